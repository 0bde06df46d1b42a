"""Planning a filtered read: the per-call work that does not depend on the table's size.

Stats JSON of a few files is parsed by json.loads on the calling thread (pyarrow.json's
hand-offs cost more than ten files take to parse); more files go to pyarrow.json, on one thread
up to one parse block and split across threads past it. Every size must give every file its own
statistics, in order, with odd strings mixed in, and the same values. A predicate
text parsed before is not parsed again: its tree is immutable and shared.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.errors import InvalidPredicateError
from deltaplane.engine.expressions.parser import parse_predicate
from deltaplane.engine.expressions.tree import Column
from deltaplane.engine.schema import DecimalType, PrimitiveType
from deltaplane.engine.stats import parse_file_stats
from deltaplane.engine.storage import LocalStore
from tests.logbuilder import simple_table

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
    [(10, 0), (100, 0), (12_000, 2000)],
    ids=["ten-files-in-python", "a-hundred-files-one-block", "over-one-parse-block"],
)
def test_every_file_gets_its_own_stats(files, padding):
    texts = [_stats(i, padding) for i in range(files)]
    assert (sum(len(t or "") for t in texts) > 1 << 24) == (files > 100)
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


def _columns(expr) -> list:
    out = [expr] if isinstance(expr, Column) else []
    for child in expr.children():
        out.extend(_columns(child))
    return out


def test_a_repeated_predicate_is_parsed_once_and_shared_unchanged(tmp_path):
    """The same text twice is one parse; the shared tree is never bound in place, so tables
    of different schemas (and the same table again) each read what the text says; bad text
    fails every time with the same message."""
    text = "id BETWEEN 4 AND 5 OR id = 0"
    first = parse_predicate(text)
    assert parse_predicate(text) is first
    assert parse_predicate(" " + text) == first  # another text, the same tree

    ints = tmp_path / "ints"
    simple_table(LocalStore(str(ints)), versions=3, rows_per_file=3)  # ids 0..8 in three files
    wide = tmp_path / "wide"
    DeltaTable.create(str(wide), pa.schema([("id", pa.string()), ("x", pa.int32())]))
    DeltaTable(str(wide)).append(pa.table({"id": ["4", "5", "7"], "x": pa.array([1, 2, 3], pa.int32())}))
    table = DeltaTable(str(ints))
    for _ in range(2):
        assert sorted(table.to_arrow(filter=text).column("id").to_pylist()) == [0, 4, 5]
        assert sorted(table.file_uris(filter=text)) == [str(ints / f"part-{v:05d}.parquet") for v in (0, 1)]
        assert sorted(DeltaTable(str(wide)).to_arrow(filter="id = '5' OR x = 3").column("x").to_pylist()) == [
            2,
            3,
        ]
    assert parse_predicate(text) is first
    assert all(column.dtype is None for column in _columns(first))

    for bad in ("id IN ()", "id >", "id = 1; DROP TABLE t"):
        messages = []
        for _ in range(2):
            with pytest.raises(InvalidPredicateError) as error:
                parse_predicate(bad)
            messages.append(str(error.value))
        assert messages[0] == messages[1]


def _odd(i: int) -> str:
    kind = i % 5
    if kind == 0:
        bounds = f'"minValues": {{"id": {i}, "score": 2}}, "maxValues": {{"id": {i + 3}, "score": 2.5}}'
        return f'{{"numRecords": 4, {bounds}, "nullCount": {{"id": 0, "score": 1}}}}'
    if kind == 1:
        return '{"numRecords": 4, "minValues": null}'
    if kind == 2:  # a string where a long belongs: that bound is unknown
        return f'{{"numRecords": 4, "minValues": {{"id": "{i}"}}, "maxValues": {{"id": {i + 3}}}}}'
    if kind == 3:  # cut short: nothing is known
        return f'{{"numRecords": 4, "minValues": {{"id": {i}}}'
    bounds = f'"minValues": {{"id": {i}, "extra": [1, {{"a": 2}}]}}, "maxValues": {{"id": {i}}}'
    return f'{{"numRecords": 4, "tightBounds": false, {bounds}}}'


@pytest.mark.parametrize("files", [10, 100], ids=["parsed-in-python", "parsed-by-pyarrow"])
def test_odd_stats_are_unknown_and_the_rest_exact(files):
    table = pa.table({"stats": pa.array([_odd(i) for i in range(files)], pa.string())})
    out = parse_file_stats(table, {("id",): LONG, ("score",): PrimitiveType("double")})
    kinds = [i % 5 for i in range(files)]
    assert out.num_records.to_pylist() == [None if k == 3 else 4 for k in kinds]
    assert out.tight_bounds.to_pylist() == [False if k == 4 else None for k in kinds]
    expected_min = [i if k in (0, 4) else None for i, k in enumerate(kinds)]
    assert out.min_values[("id",)].to_pylist() == expected_min
    expected_max = [{0: i + 3, 2: i + 3, 4: i}.get(k) for i, k in enumerate(kinds)]
    assert out.max_values[("id",)].to_pylist() == expected_max
    assert out.min_values[("score",)].to_pylist() == [2.0 if k == 0 else None for k in kinds]
    assert out.max_values[("score",)].to_pylist() == [2.5 if k == 0 else None for k in kinds]
    assert out.null_count[("score",)].to_pylist() == [1 if k == 0 else None for k in kinds]


def test_decimal_stats_stay_exact():
    """Decimal bounds are read from the JSON text itself, never through a float."""
    texts = ['{"numRecords": 1, "minValues": {"p": 0.10}, "maxValues": {"p": 12345678.99}}'] * 3
    out = parse_file_stats(pa.table({"stats": texts}), {("p",): DecimalType(10, 2)})
    assert out.min_values[("p",)].to_pylist() == [Decimal("0.10")] * 3
    assert out.max_values[("p",)].to_pylist() == [Decimal("12345678.99")] * 3
