"""Generated, default and identity columns: values the table defines, on every write path."""

from __future__ import annotations

import json
import threading

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.column_values import default_column, generated_column, identity_column
from deltaplane.engine.commands.staged import commit_write, plan_write, write_files
from deltaplane.engine.errors import (
    ConstraintViolationError,
    MetadataChangedError,
    SchemaError,
    SchemaMismatchError,
)
from tests.workers import run_in_threads

FEATURE = {"delta.feature.allowColumnDefaults": "supported"}


def _schema() -> pa.Schema:
    return pa.schema(
        [
            identity_column("id", start=10, step=5),
            pa.field("x", pa.int32()),
            generated_column("y", pa.int32(), "x * 2"),
            default_column("z", pa.string(), "'d'"),
        ]
    )


def _rows(dt: DeltaTable) -> list[dict]:
    return dt.to_arrow().sort_by("id").to_pylist()


def _fields(dt: DeltaTable) -> dict[str, dict]:
    return {f["name"]: f["metadata"] for f in json.loads(dt.metadata.schema_string)["fields"]}


def _x(*values) -> pa.Array:
    return pa.array(list(values), pa.int32())


@pytest.fixture
def table(tmp_path) -> DeltaTable:
    return DeltaTable.create(str(tmp_path / "t"), _schema(), properties=FEATURE)


def test_create_declares_delta_metadata_and_features(table):
    fields = _fields(table)
    assert fields["id"] == {
        "delta.identity.start": 10,
        "delta.identity.step": 5,
        "delta.identity.allowExplicitInsert": False,
    }
    assert fields["y"] == {"delta.generationExpression": "x * 2"}
    assert fields["z"] == {"CURRENT_DEFAULT": "'d'"}
    assert table.protocol.min_writer_version == 7
    assert {"allowColumnDefaults", "generatedColumns", "identityColumns"} <= set(
        table.protocol.writer_features
    )


def test_legacy_protocols_without_defaults(tmp_path):
    gen = DeltaTable.create(
        str(tmp_path / "g"),
        pa.schema([pa.field("x", pa.int32()), generated_column("y", pa.int32(), "x + 1")]),
    )
    assert (gen.protocol.min_reader_version, gen.protocol.min_writer_version) == (1, 4)
    ident = DeltaTable.create(
        str(tmp_path / "i"), pa.schema([identity_column("id"), pa.field("x", pa.int32())])
    )
    assert (ident.protocol.min_reader_version, ident.protocol.min_writer_version) == (1, 6)


def test_values_filled_and_high_water_mark_moves_with_reuse(table):
    table.append(pa.table({"x": _x(1, 2, None)}))
    table.append(pa.table({"x": _x(3), "z": ["own"]}))  # same object, second write
    assert _rows(table) == [
        {"id": 10, "x": 1, "y": 2, "z": "d"},
        {"id": 15, "x": 2, "y": 4, "z": "d"},
        {"id": 20, "x": None, "y": None, "z": "d"},
        {"id": 25, "x": 3, "y": 6, "z": "own"},
    ]
    assert _fields(table)["id"]["delta.identity.highWaterMark"] == 25
    # A fresh object reads the high-water mark from the log and continues after it.
    again = DeltaTable(table.uri)
    again.append(pa.table({"x": _x(4)}))
    assert [r["id"] for r in _rows(again)] == [10, 15, 20, 25, 30]
    commit = table._store.get("_delta_log/00000000000000000003.json").decode()
    info = json.loads(commit.splitlines()[0])["commitInfo"]
    assert info["tags"] == {"delta.identity.schemaUpdate": "true"}
    assert any('"metaData"' in line for line in commit.splitlines())


def test_supplied_generated_values_checked(table):
    table.append(pa.table({"x": _x(1, 2), "y": _x(2, 4)}))  # correct values are taken
    with pytest.raises(ConstraintViolationError) as e:
        table.append(pa.table({"x": _x(3, 4), "y": _x(6, 9)}))
    message = str(e.value)
    assert "'y'" in message and "x * 2" in message and "'x': 4" in message and "expected 8" in message
    with pytest.raises(ConstraintViolationError):  # null is not x * 2 when x is set
        table.append(pa.table({"x": _x(5), "y": pa.array([None], pa.int32())}))
    assert table.count() == 2


def test_always_identity_refuses_values_by_default_takes_them(tmp_path, table):
    with pytest.raises(SchemaMismatchError, match="GENERATED ALWAYS AS IDENTITY"):
        table.append(pa.table({"id": [1], "x": _x(1)}))
    by_default = DeltaTable.create(
        str(tmp_path / "bd"),
        pa.schema([identity_column("id", start=1, step=1, always=False), pa.field("x", pa.int32())]),
    )
    by_default.append(pa.table({"id": [100], "x": _x(1)}))
    assert "delta.identity.highWaterMark" not in _fields(by_default)["id"]  # as Delta Spark
    by_default.append(pa.table({"x": _x(2, 3)}))
    assert sorted(r["id"] for r in by_default.to_arrow().to_pylist()) == [1, 2, 100]
    assert _fields(by_default)["id"]["delta.identity.highWaterMark"] == 2


def test_negative_step(tmp_path):
    dt = DeltaTable.create(
        str(tmp_path / "n"), pa.schema([identity_column("id", start=-1, step=-3), pa.field("x", pa.int32())])
    )
    dt.append(pa.table({"x": _x(1, 2)}))
    dt.append(pa.table({"x": _x(3)}))
    assert sorted(r["id"] for r in dt.to_arrow().to_pylist()) == [-7, -4, -1]
    assert _fields(dt)["id"]["delta.identity.highWaterMark"] == -7


def test_update_recomputes_generated_and_refuses_identity(table):
    table.append(pa.table({"x": _x(1, 2)}))
    table.update({"x": "x + 10"}, "x = 1")
    assert [(r["x"], r["y"]) for r in _rows(table)] == [(11, 22), (2, 4)]
    with pytest.raises(ConstraintViolationError, match="x \\* 2"):
        table.update({"y": "x * 3"}, "x = 2")
    with pytest.raises(SchemaMismatchError, match="identity column 'id'"):
        table.update({"id": "1"})
    assert [(r["x"], r["y"]) for r in _rows(table)] == [(11, 22), (2, 4)]


def test_merge_inserts_fill_and_updates_recompute(table):
    table.append(pa.table({"x": _x(1, 2)}))
    source = pa.table({"x": _x(2, 3), "nx": _x(20, 30)})
    (
        table.merge(source, "t.x = s.x", source_alias="s", target_alias="t")
        .when_matched_update({"x": "s.nx"})
        .when_not_matched_insert({"x": "s.x"})
        .execute()
    )
    assert _rows(table) == [
        {"id": 10, "x": 1, "y": 2, "z": "d"},
        {"id": 15, "x": 20, "y": 40, "z": "d"},
        {"id": 20, "x": 3, "y": 6, "z": "d"},
    ]
    assert _fields(table)["id"]["delta.identity.highWaterMark"] == 20
    with pytest.raises(SchemaMismatchError, match="GENERATED ALWAYS"):
        (
            table.merge(pa.table({"id": [1], "x": _x(99)}), "t.x = s.x", source_alias="s", target_alias="t")
            .when_not_matched_insert_all()
            .execute()
        )


def test_overwrite_and_replace_where(table):
    table.append(pa.table({"x": _x(1, 2)}))
    table.overwrite(pa.table({"x": _x(2)}), "x = 2")
    assert [(r["id"], r["x"], r["y"]) for r in _rows(table)] == [(10, 1, 2), (20, 2, 4)]
    table.overwrite(pa.table({"x": _x(7)}))
    assert [(r["id"], r["x"], r["y"], r["z"]) for r in _rows(table)] == [(25, 7, 14, "d")]


def test_staged_writes_compute_generated_but_not_identity(tmp_path):
    uri = str(tmp_path / "s")
    schema = pa.schema([pa.field("x", pa.int32()), generated_column("y", pa.int32(), "x * 2")])
    DeltaTable.create(uri, schema)
    spec = plan_write(uri, pa.schema([pa.field("x", pa.int32())]))
    commit_write(spec, write_files(spec, pa.table({"x": _x(4)})))
    assert DeltaTable(uri).to_arrow().to_pylist() == [{"x": 4, "y": 8}]
    bad = plan_write(uri, schema)
    with pytest.raises(ConstraintViolationError, match="x \\* 2"):
        write_files(bad, pa.table({"x": _x(4), "y": _x(7)}))
    ident = str(tmp_path / "si")
    DeltaTable.create(ident, pa.schema([identity_column("id"), pa.field("x", pa.int32())]))
    spec = plan_write(ident, pa.schema([pa.field("x", pa.int32())]))
    with pytest.raises(SchemaMismatchError, match="cannot assign identity values"):
        write_files(spec, pa.table({"x": _x(1)}))


def test_concurrent_identity_appends_never_duplicate(tmp_path):
    uri = str(tmp_path / "c")
    DeltaTable.create(uri, pa.schema([identity_column("id"), pa.field("x", pa.int32())]))
    outcomes: list[str] = []
    barrier = threading.Barrier(4)

    def writer(n: int) -> None:
        dt = DeltaTable(uri)
        barrier.wait()
        for i in range(5):
            try:
                dt.append(pa.table({"x": _x(n * 100 + i, n * 100 + i)}))
                outcomes.append("ok")
            except MetadataChangedError as e:
                assert "identity" in str(e)
                outcomes.append("conflict")

    run_in_threads(writer, range(4))
    ids = [r["id"] for r in DeltaTable(uri).to_arrow().to_pylist()]
    assert len(ids) == len(set(ids)) == 2 * outcomes.count("ok")
    assert outcomes.count("ok") >= 1
    assert max(ids) <= _fields(DeltaTable(uri))["id"]["delta.identity.highWaterMark"]


def test_identity_only_winner_does_not_fail_a_delete(tmp_path):
    uri = str(tmp_path / "d")
    dt = DeltaTable.create(uri, pa.schema([identity_column("id"), pa.field("x", pa.int32())]))
    dt.append(pa.table({"x": _x(1, 2)}))
    stale = DeltaTable(uri)
    _ = stale.snapshot  # read version 1
    DeltaTable(uri).append(pa.table({"x": _x(3)}))  # identity-only metadata update at version 2
    from deltaplane.engine.commands.dml import execute_delete

    result = execute_delete(stale._store, stale.snapshot, "x = 1")
    assert result.version == 3
    assert sorted(r["x"] for r in DeltaTable(uri).to_arrow().to_pylist()) == [2, 3]


@pytest.mark.parametrize(
    "field, message",
    [
        (generated_column("g", pa.int32(), "x +"), "cannot be evaluated"),
        (generated_column("g", pa.int32(), "nosuch * 2"), "unknown column"),
        (generated_column("g", pa.int32(), "x; DROP TABLE t"), "cannot be evaluated"),
        (
            generated_column("g", pa.int32(), "__import__('os').system('touch /tmp/pwned')"),
            "cannot be evaluated",
        ),
        (generated_column("g", pa.int32(), "rand()"), "cannot be evaluated"),
        (generated_column("g", pa.timestamp("us", "UTC"), "current_timestamp()"), "not deterministic"),
        (generated_column("g", pa.date32(), "x"), "does not give"),
        (generated_column("g", pa.int64(), "x + 1"), "values are integer"),  # Delta Spark refuses too
        (
            pa.field(
                "i",
                pa.int32(),
                metadata={
                    "delta.identity.start": "1",
                    "delta.identity.step": "1",
                    "delta.identity.allowExplicitInsert": "false",
                },
            ),
            "must be BIGINT",
        ),
        (identity_column("i", step=0), "step cannot be 0"),
        (pa.field("i", pa.int64(), metadata={"delta.identity.start": "1"}), "lacks"),
        (
            pa.field(
                "i",
                pa.int64(),
                metadata={
                    "delta.identity.start": "one",
                    "delta.identity.step": "1",
                    "delta.identity.allowExplicitInsert": "false",
                },
            ),
            "must be an integer",
        ),
        (default_column("d", pa.int32(), "x + 1"), "constant expression"),
        (default_column("d", pa.int32(), "'abc'"), "does not give"),
    ],
)
def test_bad_declarations_refused_at_create(tmp_path, field, message):
    schema = pa.schema([pa.field("x", pa.int32()), field])
    with pytest.raises(SchemaError, match=message):
        DeltaTable.create(str(tmp_path / "bad"), schema, properties=FEATURE)
    assert not (tmp_path / "bad" / "_delta_log").exists() or not list(
        (tmp_path / "bad" / "_delta_log").iterdir()
    )


def test_default_needs_the_feature(tmp_path):
    with pytest.raises(SchemaError, match="allowColumnDefaults"):
        DeltaTable.create(str(tmp_path / "nf"), pa.schema([default_column("d", pa.int32(), "1")]))


def test_generated_column_reading_generated_refused(tmp_path):
    schema = pa.schema(
        [
            pa.field("x", pa.int32()),
            generated_column("y", pa.int32(), "x + 1"),
            generated_column("w", pa.int32(), "y + 1"),
        ]
    )
    with pytest.raises(SchemaError, match="reads generated column 'y'"):
        DeltaTable.create(str(tmp_path / "gg"), schema)


def test_date_generation_expressions(tmp_path):
    schema = pa.schema(
        [
            pa.field("ts", pa.timestamp("us", "UTC")),
            generated_column("d", pa.date32(), "CAST(ts AS DATE)"),
            generated_column("yr", pa.int32(), "YEAR(ts)"),
            generated_column("mo", pa.int32(), "MONTH(ts)"),
        ]
    )
    dt = DeltaTable.create(str(tmp_path / "dates"), schema, partition_by=["d"])
    import datetime as datetime_module

    ts = datetime_module.datetime(2026, 3, 4, 5, 6, tzinfo=datetime_module.UTC)
    dt.append(pa.table({"ts": pa.array([ts], pa.timestamp("us", "UTC"))}))
    row = dt.to_arrow().to_pylist()[0]
    assert (row["d"], row["yr"], row["mo"]) == (datetime_module.date(2026, 3, 4), 2026, 3)


def test_stale_identity_write_fails_typed_and_a_rerun_reassigns(tmp_path):
    """A write planned before another identity write committed cannot commit its values (they
    may repeat the winner's); run again, it gets new ones."""
    from deltaplane.engine.commands.write import execute_append

    uri = str(tmp_path / "r")
    dt = DeltaTable.create(uri, pa.schema([identity_column("id"), pa.field("x", pa.int32())]))
    dt.append(pa.table({"x": _x(1)}))
    stale = DeltaTable(uri).snapshot
    DeltaTable(uri).append(pa.table({"x": _x(2)}))
    with pytest.raises(MetadataChangedError, match="identity"):
        execute_append(dt._store, stale, pa.table({"x": _x(3)}))
    dt.append(pa.table({"x": _x(3)}))  # the facade plans on the latest version
    assert sorted(r["id"] for r in DeltaTable(uri).to_arrow().to_pylist()) == [1, 2, 3]


def test_alter_sets_and_drops_a_default(tmp_path, table):
    table.alter.set_column_default("x", "7")
    table.append(pa.table({"z": ["a"]}))
    assert [(r["x"], r["y"]) for r in _rows(table)] == [(7, 14)]
    table.alter.drop_column_default("x")
    assert "CURRENT_DEFAULT" not in _fields(table)["x"]
    table.append(pa.table({"z": ["b"]}))
    assert [(r["x"], r["y"]) for r in _rows(table)] == [(7, 14), (None, None)]
    with pytest.raises(SchemaError, match="cannot be evaluated"):
        table.alter.set_column_default("x", "1 +")
    plain = DeltaTable.create(str(tmp_path / "plain"), pa.schema([pa.field("x", pa.int32())]))
    with pytest.raises(SchemaError, match="allowColumnDefaults"):
        plain.alter.set_column_default("x", "1")
    plain.alter.set_table_properties({"delta.feature.allowColumnDefaults": "supported"})
    plain.alter.set_column_default("x", "1")
    plain.append(pa.table({"x": _x(5)}))
    assert "allowColumnDefaults" in plain.protocol.writer_features


@pytest.mark.parametrize("step", [1, -3])
def test_restore_never_moves_the_identity_high_water_mark_back(tmp_path, step):
    uri = str(tmp_path / "t")
    table = DeltaTable.create(
        uri, pa.schema([identity_column("id", start=1, step=step), pa.field("x", pa.int32())])
    )
    table.append(pa.table({"x": _x(1, 2)}))  # v1: ids start, start+step
    table.append(pa.table({"x": _x(3, 4, 5)}))  # v2: the mark is start + 4 * step
    given = [1 + n * step for n in range(5)]
    table.restore(1)  # the same object, after other work
    assert _fields(table)["id"]["delta.identity.highWaterMark"] == given[-1]
    table.append(pa.table({"x": _x(6)}))
    again = DeltaTable(uri)
    again.restore(0)  # before any value was handed out: the target has no mark at all
    assert _fields(again)["id"]["delta.identity.highWaterMark"] == given[-1] + step
    again.append(pa.table({"x": _x(7)}))
    ids = [r["id"] for r in DeltaTable(uri).to_arrow().to_pylist()]
    assert ids == [given[-1] + 2 * step]  # never one of the values handed out before
    every = {
        r["id"]
        for v in range(DeltaTable(uri).version() + 1)
        for r in DeltaTable(uri, version=v).to_arrow().to_pylist()
    }
    assert len(every) == 7  # no value was given to two rows across the whole history


def test_only_the_same_identity_column_keeps_its_mark():
    from deltaplane.engine.column_values import keep_high_water_marks, schema_from_arrow

    def schema(start=1, step=1, mark=None, name="id"):
        f = identity_column(name, start=start, step=step)
        if mark is not None:
            f = f.with_metadata({**f.metadata, b"delta.identity.highWaterMark": str(mark).encode()})
        return schema_from_arrow(pa.schema([f, pa.field("x", pa.int32())]))

    def mark(s):
        return s.fields[0].metadata.get("delta.identity.highWaterMark")

    assert int(mark(keep_high_water_marks(schema(mark=2), schema(mark=5)))) == 5
    assert int(mark(keep_high_water_marks(schema(mark=9), schema(mark=5)))) == 9  # never back
    assert int(mark(keep_high_water_marks(schema(step=-1, mark=-2), schema(step=-1, mark=-5)))) == -5
    assert int(mark(keep_high_water_marks(schema(step=-1, mark=-9), schema(step=-1, mark=-5)))) == -9
    assert mark(keep_high_water_marks(schema(start=100), schema(mark=5))) is None  # declared anew
    assert mark(keep_high_water_marks(schema(step=2), schema(mark=5))) is None
    assert mark(keep_high_water_marks(schema(name="other"), schema(mark=5))) is None
