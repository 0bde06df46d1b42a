"""Random sequences of appends, deletes, updates and merges, checked against a plain-Python model.

The same sequence runs on a table with deletion vectors, on one with copy-on-write, and on the
model (a list of rows with SQL three-valued predicate logic). After the run, every version read
by time travel must equal the model's rows at that version, and the change data feed must equal
the model's change log.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltaplane.engine import DeltaTable
from deltaplane.engine.expressions.bind import bind
from deltaplane.engine.expressions.parser import parse_expression, parse_predicate
from deltaplane.engine.schema import from_arrow_schema
from tests.reference import evaluate, sql_predicates

SCHEMA = pa.schema([("id", pa.int64()), ("cat", pa.string()), ("value", pa.int64())])
DELTA_SCHEMA = from_arrow_schema(SCHEMA)
ROW = st.fixed_dictionaries(
    {
        "id": st.integers(0, 20),
        "cat": st.sampled_from(["a", "b"]),
        "value": st.one_of(st.none(), st.integers(0, 9)),
    }
)
ATOM = st.one_of(
    st.builds(lambda op, k: f"id {op} {k}", st.sampled_from(["<", ">=", "="]), st.integers(0, 20)),
    st.builds(lambda op, k: f"value {op} {k}", st.sampled_from(["<", ">", "="]), st.integers(0, 9)),
    st.sampled_from(["cat = 'a'", "cat = 'b'", "value IS NULL", "value IS NOT NULL", "id % 3 = 0"]),
)
PREDICATE = sql_predicates(ATOM, max_leaves=3)
ASSIGNMENTS = st.sampled_from(
    [
        {"value": "value + 1"},
        {"value": "id * 2"},
        {"cat": "'a'"},
        {"cat": "'b'", "value": "0"},
        {"value": "NULL"},
    ]
)
OPERATION = st.one_of(
    st.tuples(st.just("append"), st.lists(ROW, min_size=1, max_size=5)),
    st.tuples(st.just("delete"), PREDICATE),
    st.tuples(st.just("update"), ASSIGNMENTS, PREDICATE),
    st.tuples(
        st.just("merge"),
        st.lists(ROW, min_size=1, max_size=4, unique_by=lambda r: r["id"]),
        st.sampled_from(["upsert", "delete_or_update", "prune_orphans"]),
    ),
)


def _pred(text: str):
    return bind(parse_predicate(text), DELTA_SCHEMA)


def _assign(row: dict, assignments: dict) -> dict:
    new = dict(row)
    for column, text in assignments.items():
        new[column] = evaluate(bind(parse_expression(text), DELTA_SCHEMA), row)
    return new


class Model:
    def __init__(self):
        self.rows: list[dict] = []
        self.changes: list[list[tuple]] = []

    def apply(self, op) -> None:
        kind = op[0]
        log: list[tuple] = []
        if kind == "append":
            self.rows += [dict(r) for r in op[1]]
            log += [("insert", r) for r in op[1]]
        elif kind == "delete":
            pred = _pred(op[1])
            keep = []
            for r in self.rows:
                (log.append(("delete", r)) if evaluate(pred, r) is True else keep.append(r))
            self.rows = keep
        elif kind == "update":
            assignments, pred = op[1], _pred(op[2])
            out = []
            for r in self.rows:
                if evaluate(pred, r) is True:
                    new = _assign(r, assignments)
                    log += [("update_preimage", r), ("update_postimage", new)]
                    out.append(new)
                else:
                    out.append(r)
            self.rows = out
        else:
            self._merge(op[1], op[2], log)
        self.changes.append(log)

    def _merge(self, source: list[dict], variant: str, log: list) -> None:
        by_id = {s["id"]: s for s in source}
        matched_ids = set()
        out = []
        for r in self.rows:
            s = by_id.get(r["id"])
            if s is not None:
                matched_ids.add(r["id"])
                if variant == "upsert":
                    new = {**r, "value": s["value"]}
                elif variant == "delete_or_update":
                    if s["value"] is not None and s["value"] > 5:
                        log.append(("delete", r))
                        continue
                    new = dict(s)
                else:  # prune_orphans: matched rows take the source category
                    new = {**r, "cat": s["cat"]}
                log += [("update_preimage", r), ("update_postimage", new)]
                out.append(new)
            elif variant == "prune_orphans" and r["value"] is None:
                log.append(("delete", r))
            else:
                out.append(r)
        if variant in ("upsert", "delete_or_update"):
            for s in source:
                if s["id"] not in matched_ids:
                    new = dict(s) if variant == "upsert" else {"id": s["id"], "cat": s["cat"], "value": 0}
                    out.append(new)
                    log.append(("insert", new))
        self.rows = out


def run(table: DeltaTable, op) -> None:
    kind = op[0]
    if kind == "append":
        table.append(pa.Table.from_pylist(op[1], schema=SCHEMA))
    elif kind == "delete":
        table.delete(op[1])
    elif kind == "update":
        table.update(op[1], op[2])
    else:
        source, variant = pa.Table.from_pylist(op[1], schema=SCHEMA), op[2]
        builder = table.merge(source, "t.id = s.id", source_alias="s", target_alias="t")
        if variant == "upsert":
            builder.when_matched_update({"value": "s.value"}).when_not_matched_insert_all()
        elif variant == "delete_or_update":
            (
                builder.when_matched_delete("s.value > 5")
                .when_matched_update_all()
                .when_not_matched_insert({"id": "s.id", "cat": "s.cat", "value": "0"})
            )
        else:
            builder.when_matched_update({"cat": "s.cat"}).when_not_matched_by_source_delete("t.value IS NULL")
        builder.execute()


def as_multiset(rows) -> Counter:
    return Counter((r["id"], r["cat"], r["value"]) for r in rows)


_tables = itertools.count()


@pytest.fixture
def table_root(tmp_path) -> Iterator[Path]:
    """Where the tables go: a folder in memory (/dev/shm) where the machine has one, else
    ``tmp_path``. The engine fsyncs every commit and data file as it always does; on a disk those
    fsyncs were a third of this test's time (1,800 of them), and durability is not its subject."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    root = Path(tempfile.mkdtemp(prefix="deltaplane-dml-model-", dir=shm))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=st.lists(OPERATION, min_size=1, max_size=8))
def test_engine_matches_model(table_root, operations):
    n = next(_tables)
    tables = {
        "dv": DeltaTable.create(
            str(table_root / f"dv{n}"),
            SCHEMA,
            partition_by=["cat"],
            properties={"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"},
        ),
        "cow": DeltaTable.create(
            str(table_root / f"cow{n}"),
            SCHEMA,
            partition_by=["cat"],
            properties={"delta.enableChangeDataFeed": "true"},
        ),
    }
    model = Model()
    states = [as_multiset([])]
    logs, committed = [], []  # a DELETE/UPDATE/MERGE that changes no row commits nothing
    for op in operations:
        model.apply(op)
        if model.changes[-1]:
            states.append(as_multiset(model.rows))
            logs.append(model.changes[-1])
            committed.append(op)
        for name, table in tables.items():
            run(table, op)
            assert as_multiset(table.to_arrow().to_pylist()) == states[-1], (name, op)
    for name, table in tables.items():
        assert table.version == len(committed)
        for version, expected in enumerate(states):
            assert as_multiset(DeltaTable(table.uri, version=version).to_arrow().to_pylist()) == expected, (
                name,
                version,
            )
        feed = table.changes(1).to_pylist() if committed else []
        for version, log in enumerate(logs, start=1):
            got = Counter(
                (r["_change_type"], r["id"], r["cat"], r["value"])
                for r in feed
                if r["_commit_version"] == version
            )
            want = Counter((kind, r["id"], r["cat"], r["value"]) for kind, r in log)
            assert got == want, (name, version, committed[version - 1])
