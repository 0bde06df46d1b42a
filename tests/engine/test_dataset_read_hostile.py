"""Adversarial cases for the scan's dataset path (engine/scan.py ``_read_dataset``): each table is
built by hand so the expected rows are stated here, and each read is also done on the engine's
per-file path (``_read_dataset`` disabled) or by DuckDB, which must agree.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.scan import Scan
from deltaplane.engine.storage.local import LocalStore
from tests.logbuilder import add, metadata, protocol, write_commit


def field(name: str, typ, nullable: bool = True, **meta) -> dict:
    return {"name": name, "type": typ, "nullable": nullable, "metadata": meta}


def struct(*fields: dict) -> dict:
    return {"type": "struct", "fields": list(fields)}


def build(
    root,
    schema: dict,
    files: list[tuple[str, pa.Table]],
    parts=None,
    partition_columns=(),
    config=None,
    proto=None,
    **write_options,
) -> None:
    """A table of ``files`` (written as given, in this order) under ``schema``."""
    actions = [
        proto or protocol(),
        metadata(schema=schema, partition_columns=partition_columns, configuration=config),
    ]
    for i, (name, table) in enumerate(files):
        full = os.path.join(root, name)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        pq.write_table(table, full, **write_options)
        actions.append(add(name, partition_values=(parts[i] if parts else {}), size=os.path.getsize(full)))
    write_commit(LocalStore(str(root)), 0, actions)


@pytest.fixture
def engine_path(monkeypatch):
    """A function reading a table on the engine's per-file path (the dataset path switched off)."""

    def read(path, **kwargs):
        with monkeypatch.context() as m:
            m.setattr(Scan, "_read_dataset", lambda self: None)
            return DeltaTable(str(path)).to_arrow(**kwargs)

    return read


def both(path, engine_path, **kwargs) -> pa.Table:
    """The dataset path's table, after checking it equals the engine path's (values and schema)."""
    got = DeltaTable(str(path)).to_arrow(**kwargs)
    want = engine_path(path, **kwargs)
    assert got.schema == want.schema
    assert got.to_pylist() == want.to_pylist()
    return got


def mapped(name: str, column_id: int, physical: str, typ="long") -> dict:
    return field(
        name, typ, **{"delta.columnMapping.id": column_id, "delta.columnMapping.physicalName": physical}
    )


NAME_MODE = {"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "9"}


# --- column mapping: nested fields are matched by physical name ------------------------------


def test_nested_fields_whose_physical_names_are_other_logical_names(tmp_path, engine_path):
    """Column mapping enabled on an existing table keeps each field's name as its physical name;
    renaming ``s.a``/``s.b`` into each other and moving one first gives a logical struct<a, b>
    whose old files hold struct<a, b> under the *physical* names: the file's ``a`` is ``s.b``."""
    inner = {"type": "struct", "fields": [mapped("a", 2, "b"), mapped("b", 3, "a")]}
    rows = pa.table({"s": pa.array([{"a": 1, "b": 2}, None])})
    build(
        tmp_path,
        struct(mapped("s", 1, "s", inner)),
        [("f.parquet", rows)],
        config=NAME_MODE,
        proto=protocol(2, 5),
    )
    expected = [{"s": {"a": 2, "b": 1}}, {"s": None}]
    assert both(tmp_path, engine_path).to_pylist() == expected
    # delta-rs's kernel-based reader agrees (its pyarrow-dataset reader does not: it matches by logical name).
    from deltalake import DeltaTable as RsTable
    from deltalake import QueryBuilder

    rs = QueryBuilder().register("t", RsTable(str(tmp_path))).execute("select * from t").read_all()
    assert pa.table(rs).to_pylist() == expected


def test_a_nested_field_dropped_and_re_added_reads_nulls_from_older_files(tmp_path, engine_path):
    """``s.a`` dropped and added again gets a new physical name; older files still hold a child
    named ``a`` (the physical name it had before): that is the dropped field, not the new one."""
    inner = {"type": "struct", "fields": [mapped("a", 4, "col-4")]}
    schema = struct(
        mapped("s", 1, "s", inner),
        mapped("l", 2, "l", {"type": "array", "elementType": inner, "containsNull": True}),
    )
    old = pa.table({"s": pa.array([{"a": 7}]), "l": pa.array([[{"a": 8}, None]])})
    new = pa.table({"s": pa.array([{"col-4": 9}]), "l": pa.array([[{"col-4": 10}]])})
    build(
        tmp_path, schema, [("old.parquet", old), ("new.parquet", new)], config=NAME_MODE, proto=protocol(2, 5)
    )
    assert both(tmp_path, engine_path).to_pylist() == [
        {"s": {"a": None}, "l": [{"a": None}, None]},
        {"s": {"a": 9}, "l": [{"a": 10}]},
    ]
