"""Data skipping is real: a selective filter opens only files whose statistics can match.

Files are counted where they are opened (a real local store that also counts), and the set a
scan may open is computed independently from the written data. A property test then checks on
random files and random predicates that skipping never drops a file holding a matching row.
"""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

from deltaplane.engine.expressions.bind import bind
from deltaplane.engine.expressions.parser import parse_predicate
from deltaplane.engine.scan import ScanBuilder
from deltaplane.engine.schema import from_arrow_schema
from deltaplane.engine.snapshot import load_snapshot
from deltaplane.engine.storage import LocalStore, MemoryStore
from tests.logbuilder import add, metadata, protocol, write_commit, write_parquet
from tests.reference import evaluate, sql_predicates


class CountingStore(LocalStore):
    """A local store that records which data files are opened."""

    def __init__(self, root: str):
        super().__init__(root)
        self.opened: list[str] = []

    def open_input(self, key: str, *, size: int | None = None):
        if not key.startswith("_delta_log/"):
            self.opened.append(key)
        return super().open_input(key, size=size)


def _many_file_table(path: str, files: int = 40, rows: int = 100) -> list[pa.Table]:
    batches = []
    for k in range(files):
        ids = list(range(k * rows, (k + 1) * rows))
        batch = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "name": [f"name-{i}" for i in ids],
                "score": pa.array([float(i % 17) for i in ids]),
            }
        )
        write_deltalake(path, batch, mode="append")
        batches.append(batch)
    return batches


def _could_match(batch: pa.Table, column: str, low, high) -> bool:
    """Independent of the engine: does [min, max] of ``column`` in this file meet [low, high]?"""
    bounds = pc.min_max(batch.column(column)).as_py()
    return bounds["min"] <= high and bounds["max"] >= low


def test_selective_filters_open_only_matching_files(tmp_path):
    path = str(tmp_path / "t")
    batches = _many_file_table(path)
    cases = [
        ("id BETWEEN 1250 AND 1260", lambda b: _could_match(b, "id", 1250, 1260), 11),
        ("id > 3950", lambda b: _could_match(b, "id", 3951, 10**9), 49),
        (
            "id = 5 OR id = 2005",
            lambda b: _could_match(b, "id", 5, 5) or _could_match(b, "id", 2005, 2005),
            2,
        ),
        ("name = 'name-1250'", lambda b: _could_match(b, "name", "name-1250", "name-1250"), 1),
        ("id < 0", lambda b: False, 0),
    ]
    for predicate, may_match, expected_rows in cases:
        store = CountingStore(path)
        scan = ScanBuilder(load_snapshot(store)).where(predicate).build()
        result = scan.to_table()
        expected_files = sum(1 for b in batches if may_match(b))
        assert len(store.opened) == expected_files, predicate
        assert scan.metrics.files_read == expected_files and scan.metrics.files_in_snapshot == 40
        assert result.num_rows == expected_rows, predicate
    # the selective ones really are selective
    store = CountingStore(path)
    ScanBuilder(load_snapshot(store)).where("id BETWEEN 1250 AND 1260").build().to_table()
    assert len(store.opened) == 1


def test_files_without_stats_are_always_read():
    store = MemoryStore()
    write_parquet(store, "a.parquet", pa.table({"id": pa.array([1, 2], pa.int64())}))
    write_parquet(store, "b.parquet", pa.table({"id": pa.array([50, 60], pa.int64())}))
    stats = {"numRecords": 2, "minValues": {"id": 1}, "maxValues": {"id": 2}, "nullCount": {"id": 0}}
    write_commit(store, 0, [protocol(), metadata(), add("a.parquet", stats=stats), add("b.parquet")])
    scan = ScanBuilder(load_snapshot(store)).where("id = 60").build()
    assert scan.files.column("path").to_pylist() == ["b.parquet"]
    scan = ScanBuilder(load_snapshot(store)).where("id = 1").build()
    assert sorted(scan.files.column("path").to_pylist()) == ["a.parquet", "b.parquet"]
    assert scan.to_table().column("id").to_pylist() == [1]


# --- property: skipping is sound on random files and predicates ------------------------------------

SCHEMA = pa.schema(
    [("i", pa.int64()), ("s", pa.string()), ("d", pa.float64()), ("day", pa.date32()), ("p", pa.string())]
)
DAYS = [dt.date(2026, 1, d) for d in (1, 2, 3)]
ROWS = st.lists(
    st.fixed_dictionaries(
        {
            "i": st.one_of(st.none(), st.integers(-5, 5)),
            "s": st.one_of(st.none(), st.sampled_from(["", "a", "ab", "b", "zz"])),
            "d": st.one_of(st.none(), st.sampled_from([-1.0, 0.0, 2.5])),
            "day": st.one_of(st.none(), st.sampled_from(DAYS)),
        }
    ),
    min_size=1,
    max_size=6,
)
FILE = st.tuples(st.sampled_from(["x", "y", None]), ROWS)
ATOM = st.one_of(
    st.builds(
        lambda op, v: f"i {op} {v}", st.sampled_from(["=", "!=", "<", "<=", ">", ">="]), st.integers(-6, 6)
    ),
    st.builds(
        lambda op, v: f"s {op} '{v}'", st.sampled_from(["=", "!=", "<", ">"]), st.sampled_from(["a", "b", ""])
    ),
    st.builds(lambda op, v: f"d {op} {v}", st.sampled_from(["<", ">=", "="]), st.sampled_from(["0", "2.5"])),
    st.builds(lambda op, v: f"day {op} '{v}'", st.sampled_from(["=", "<", ">="]), st.sampled_from(DAYS)),
    st.builds(
        lambda c, n: f"{c} IS {n}NULL", st.sampled_from(["i", "s", "p", "day"]), st.sampled_from(["", "NOT "])
    ),
    st.builds(
        lambda n, vs: f"i {n}IN ({', '.join(vs)})",
        st.sampled_from(["", "NOT "]),
        st.lists(st.sampled_from(["0", "3", "-5"]), min_size=1, max_size=3),
    ),
    st.builds(lambda op, v: f"p {op} '{v}'", st.sampled_from(["=", "!="]), st.sampled_from(["x", "y"])),
    st.sampled_from(["s LIKE 'a%'", "s LIKE '%b'"]),
)
PREDICATE = sql_predicates(ATOM, max_leaves=5)


def _stats(rows: list[dict]) -> dict:
    """Statistics computed in plain Python, the way a writer would."""
    out = {"numRecords": len(rows), "minValues": {}, "maxValues": {}, "nullCount": {}}
    for col in ("i", "s", "d", "day"):
        values = [r[col] for r in rows if r[col] is not None]
        out["nullCount"][col] = len(rows) - len(values)
        if values:
            lo, hi = min(values), max(values)
            out["minValues"][col] = lo.isoformat() if isinstance(lo, dt.date) else lo
            out["maxValues"][col] = hi.isoformat() if isinstance(hi, dt.date) else hi
    return out


@settings(max_examples=150, deadline=None)
@given(files=st.lists(FILE, min_size=1, max_size=5), text=PREDICATE)
def test_skipping_never_drops_a_matching_file(files, text):
    store = MemoryStore()
    data_schema = pa.schema([f for f in SCHEMA if f.name != "p"])
    actions = [
        protocol(),
        metadata(schema=json.loads(from_arrow_schema(SCHEMA).to_json_string()), partition_columns=["p"]),
    ]
    everything = []
    for n, (part, rows) in enumerate(files):
        key = f"f{n}.parquet"
        write_parquet(store, key, pa.Table.from_pylist(rows, schema=data_schema))
        actions.append(add(key, partition_values={"p": part}, stats=_stats(rows)))
        everything += [(key, dict(r, p=part)) for r in rows]
    write_commit(store, 0, actions)

    expr = bind(parse_predicate(text), from_arrow_schema(SCHEMA))
    matching_files = {key for key, row in everything if evaluate(expr, row) is True}
    scan = ScanBuilder(load_snapshot(store)).where(text).build()
    kept = set(scan.files.column("path").to_pylist())
    assert matching_files <= kept, text
    got = sorted(scan.to_table().to_pylist(), key=repr)
    want = [{k: row[k] for k in SCHEMA.names} for _, row in everything if evaluate(expr, row) is True]
    assert got == sorted(want, key=repr), text
