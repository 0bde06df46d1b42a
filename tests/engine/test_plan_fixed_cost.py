"""Planning a filtered read: the per-call work that does not depend on the table's size.

Stats JSON of a few files is parsed on the calling thread (a thread pool costs more to start
than ten files take to parse); past one parse block the work is split across threads. Both
sizes must give every file its own statistics, in order, with odd strings mixed in.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from deltaplane.engine.schema import PrimitiveType
from deltaplane.engine.stats import parse_file_stats

LONG = PrimitiveType("long")
STRING = PrimitiveType("string")


def _stats(i: int, padding: int) -> str | None:
    if i % 7 == 3:
        return None  # a file written without stats
    if i % 11 == 5:
        return ""  # an empty string: also unknown
    text = json.dumps(
        {
            "numRecords": i + 1,
            "minValues": {"id": i * 10, "name": f"n{i}\nline"},
            "maxValues": {"id": i * 10 + 9, "name": f"z{i}"},
            "nullCount": {"id": 0, "name": i % 2},
            "note": "x" * padding,  # a column the predicate does not ask for
        }
    )
    return text if i % 13 != 1 else text.replace(", ", ",\n ")  # a writer that pretty-printed


@pytest.mark.parametrize(
    ("files", "padding"),
    [(10, 0), (12_000, 2000)],
    ids=["ten-files-one-thread", "over-one-parse-block"],
)
def test_every_file_gets_its_own_stats(files, padding):
    texts = [_stats(i, padding) for i in range(files)]
    assert (sum(len(t or "") for t in texts) > 1 << 24) == (files > 10)
    table = pa.table({"stats": pa.array(texts, pa.string())})
    out = parse_file_stats(table, {("id",): LONG, ("name",): STRING})

    known = [t is not None and t != "" for t in texts]
    assert out.num_records.to_pylist() == [i + 1 if k else None for i, k in enumerate(known)]
    assert out.min_values[("id",)].to_pylist() == [i * 10 if k else None for i, k in enumerate(known)]
    assert out.max_values[("id",)].to_pylist() == [i * 10 + 9 if k else None for i, k in enumerate(known)]
    assert out.min_values[("name",)].to_pylist() == [
        f"n{i}\nline" if k else None for i, k in enumerate(known)
    ]
    assert out.null_count[("name",)].to_pylist() == [i % 2 if k else None for i, k in enumerate(known)]

    # The same table object again: nothing carried over from the first call.
    again = parse_file_stats(table, {("id",): LONG})
    assert again.max_values[("id",)].equals(out.max_values[("id",)])
