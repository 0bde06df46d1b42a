"""User mistakes and damaged tables end in typed errors that name the table, the file or the
column: never a raw Arrow or Python exception, never Python internals in a message."""

from __future__ import annotations

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.deletion_vectors import serialize_bitmap, z85_encode
from deltaplane.engine.errors import (
    CorruptDeletionVectorError,
    InvalidPredicateError,
    MissingLogVersionError,
    SchemaMismatchError,
    StorageError,
    TableNotFoundError,
)
from deltaplane.engine.storage import LocalStore
from tests.engine.test_log_cleanup import write_multipart
from tests.logbuilder import add, commit_info, metadata, protocol, simple_table, write_commit, write_parquet

SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.int64()), ("s", pa.string())])


@pytest.fixture
def table(tmp_path) -> DeltaTable:
    t = DeltaTable.create(str(tmp_path / "t"), SCHEMA)
    t.append(pa.table({"id": [1, 2, 3], "x": [1, 0, 3], "s": ["a", "b", "c"]}, schema=SCHEMA))
    return t


def only_file(table: DeltaTable) -> str:
    (path,) = table.snapshot.files.column("path").to_pylist()
    return path


# --- duplicate column names ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["id", "id"], "two columns named 'id'"),
        (["id", "ID"], "columns 'id' and 'ID', which Delta treats as one"),
    ],
)
@pytest.mark.parametrize("schema_mode", [None, "merge"])
def test_duplicate_column_names_in_appended_data(table, names, message, schema_mode):
    data = pa.table([pa.array([7]), pa.array([8])], names=names)
    with pytest.raises(SchemaMismatchError, match=message) as caught:
        table.append(data, schema_mode=schema_mode)
    assert table.uri in str(caught.value)
    assert DeltaTable(table.uri).version == 1


def test_duplicate_field_names_inside_a_struct(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("s", pa.struct([("a", pa.int64())]))])
    t = DeltaTable.create(str(tmp_path / "t"), schema)
    bad = pa.table(
        {"id": [1], "s": pa.StructArray.from_arrays([pa.array([1]), pa.array([2])], names=["a", "A"])}
    )
    with pytest.raises(SchemaMismatchError, match="fields in struct column 's'"):
        t.append(bad)


# --- expressions that fail on the data ----------------------------------------------------------


@pytest.mark.parametrize(
    ("run", "fragment"),
    [
        (lambda t: t.delete("id / x > 1"), "divide by zero"),
        (lambda t: t.update({"x": "id / x"}), "divide by zero"),
        (lambda t: t.update({"x": "x * 9223372036854775807"}), "overflow"),
        (lambda t: t.update({"x": "cast(s as bigint)"}), "'c'"),
        (lambda t: t.to_arrow(filter="id / x > 1"), "divide by zero"),
    ],
)
def test_arrow_errors_while_evaluating_name_the_expression_and_the_file(table, run, fragment):
    with pytest.raises(InvalidPredicateError) as caught:
        run(table)
    message = str(caught.value)
    assert fragment in message and only_file(table) in message and table.uri in message
    assert DeltaTable(table.uri).version == 1  # nothing committed


def test_arrow_errors_in_merge_clauses_name_the_expression_and_the_table(table):
    source = pa.table({"id": [1], "x": [0]})
    builder = table.merge(source, "t.id = s.id", source_alias="s", target_alias="t")
    with pytest.raises(
        InvalidPredicateError, match=r"cannot evaluate \(t.id / s.x\).*divide by zero"
    ) as caught:
        builder.when_matched_update({"x": "t.id / s.x"}).execute()
    assert table.uri in str(caught.value)


@pytest.mark.parametrize(
    "run",
    [
        lambda t: t.delete("x"),
        lambda t: t.delete("s"),
        lambda t: t.update({"x": "1"}, "id + 1"),
        lambda t: t.to_arrow(filter="x"),
        lambda t: t.overwrite(pa.table({"id": [1], "x": [1], "s": ["a"]}), predicate="x * 2"),
        lambda t: (
            t.merge(pa.table({"id": [1]}), "t.id = s.id", source_alias="s", target_alias="t")
            .when_matched_delete("s.id")
            .execute()
        ),
        lambda t: (
            t.merge(pa.table({"id": [1]}), "s.id", source_alias="s", target_alias="t")
            .when_matched_delete()
            .execute()
        ),
    ],
)
def test_a_predicate_that_is_not_a_condition_is_refused_before_reading(table, run):
    with pytest.raises(InvalidPredicateError, match="not a condition"):
        run(table)
    assert DeltaTable(table.uri).version == 1


def test_no_python_internals_in_a_bad_cast_literal_message(table):
    with pytest.raises(InvalidPredicateError) as caught:
        table.update({"x": "cast('abc' as bigint)"})
    assert "<class" not in str(caught.value) and "'abc'" in str(caught.value)


# --- damaged tables ------------------------------------------------------------------------------


def test_a_deletion_vector_past_the_end_of_its_file_names_the_file_and_version(tmp_path):
    root = tmp_path / "t"
    store = LocalStore(str(root))
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    write_parquet(store, "a.parquet", pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    bitmap = serialize_bitmap([1, 100])  # row 100 of a 3-row file
    dv = {
        "storageType": "i",
        "pathOrInlineDv": z85_encode(bitmap),
        "sizeInBytes": len(bitmap),
        "cardinality": 2,
    }
    write_commit(
        store,
        0,
        [
            commit_info(),
            protocol(3, 7, ["deletionVectors"], ["deletionVectors"]),
            metadata(schema, configuration={"delta.enableDeletionVectors": "true"}),
            add("a.parquet", dv=dv, stats={"numRecords": 3}),
        ],
    )
    for read in (lambda t: t.to_arrow(), lambda t: t.to_batches().read_all()):
        with pytest.raises(CorruptDeletionVectorError) as caught:
            read(DeltaTable(str(root)))
        message = str(caught.value)
        assert "a.parquet" in message and "version 0" in message and "row 100" in message


def test_an_incomplete_multi_part_checkpoint_is_named_instead_of_a_missing_commit(tmp_path):
    root = tmp_path / "t"
    store = LocalStore(str(root))
    simple_table(store, versions=4)
    actions = [protocol(), metadata()]
    adds = [add(f"part-{v:05d}.parquet") for v in range(3)]
    write_multipart(store, 2, [[*actions, adds[0]], adds[1:]], write={1})  # part 2 of 2 lost
    for v in range(3):  # cleaned up: only the checkpoint could rebuild version 2
        (root / "_delta_log" / f"{v:020d}.json").unlink()
    with pytest.raises(MissingLogVersionError) as caught:
        DeltaTable(str(root))
    message = str(caught.value)
    assert "multi-part checkpoint at version 2 is incomplete" in message and "missing part 2" in message


# --- local paths that are not tables ------------------------------------------------------------


def test_opening_a_path_that_is_a_file_or_holds_a_file_named_delta_log(tmp_path):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "_delta_log").write_text("x")
    cases = {
        tmp_path / "nope": "there is no _delta_log directory",
        tmp_path / "afile": "it is a file, not a directory",
        tmp_path / "t": "_delta_log is a file, not a directory",
    }
    for path, why in cases.items():
        with pytest.raises(TableNotFoundError) as caught:
            DeltaTable(str(path))
        assert str(caught.value) == f"no Delta table at {path}: {why}"


def test_creating_a_table_where_a_file_is_in_the_way(tmp_path):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "_delta_log").write_text("x")
    cases = {
        tmp_path / "afile": tmp_path / "afile",
        tmp_path / "afile" / "sub": tmp_path / "afile",
        tmp_path / "t": tmp_path / "t" / "_delta_log",
    }
    for path, in_the_way in cases.items():
        with pytest.raises(StorageError, match=f"{in_the_way} is a file, not a directory"):
            DeltaTable.create(str(path), SCHEMA)


# --- bad arguments: always an engine error, never a raw TypeError ---------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda t: DeltaTable(123),
        lambda t: DeltaTable(t.uri, version="abc"),
        lambda t: DeltaTable(t.uri, version=1.5),
        lambda t: DeltaTable(t.uri, version=0, timestamp=0),
        lambda t: t.to_arrow(filter=123),
        lambda t: t.to_arrow(columns=[1, 2]),
        lambda t: t.vacuum(retention_hours="x"),
        lambda t: t.history(limit="x"),
        lambda t: t.changes("x"),
        lambda t: t.update({"x": "id +"}),
        lambda t: t.delete("id = "),
        lambda t: t.append(pa.table({"id": [1]}), app_id="a", app_version="1"),
    ],
)
def test_bad_arguments_are_engine_errors_without_python_internals(table, call):
    from deltaplane.engine.errors import DeltaError

    with pytest.raises(DeltaError) as caught:
        call(table)
    assert "<class" not in str(caught.value) and "\x1b[" not in str(caught.value)
    assert isinstance(caught.value, DeltaError)
