"""Adversarial cases for the scan's dataset path (engine/scan.py ``_read_dataset``): each table is
built by hand so the expected rows are stated here, and each read is also done on the engine's
per-file path (``_read_dataset`` disabled) or by DuckDB, which must agree.
"""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.errors import DataFileError
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


@pytest.fixture
def whole_file_reads(monkeypatch):
    """Which files the engine's own whole-file path read (the real method runs)."""
    seen: list[str] = []
    original = Scan._read_whole

    def spy(self, plan, **kwargs):
        seen.append(plan.location)
        return original(self, plan, **kwargs)

    monkeypatch.setattr(Scan, "_read_whole", spy)
    return seen


# --- a file column of another type: the scanner casts silently, the check after it re-reads ----

WHEN = dt.datetime(2020, 1, 2, 3, 4, 5, 123000)  # exact in milliseconds
WHEN_UTC = WHEN.replace(tzinfo=dt.UTC)
TYPE_CASES = [
    # (table type, the first file's column (the table's type), the other file's column, its rows read)
    ("long", pa.array([1], pa.int64()), pa.array([-2, None], pa.int8()), [-2, None]),
    ("long", pa.array([1], pa.int64()), pa.array([300], pa.int16()), [300]),
    ("long", pa.array([1], pa.int64()), pa.array([2**31 - 1], pa.int32()), [2**31 - 1]),
    ("long", pa.array([1], pa.int64()), pa.array([7], pa.uint32()), [7]),
    ("long", pa.array([1], pa.int64()), pa.array(["12", "0013", None]), [12, 13, None]),
    ("integer", pa.array([1], pa.int32()), pa.array([2, 3], pa.int64()), [2, 3]),
    ("string", pa.array(["a"]), pa.array([12], pa.int64()), ["12"]),
    ("string", pa.array(["a"]), pa.array(["x", None], pa.large_string()), ["x", None]),
    ("string", pa.array(["a"]), pa.array([b"x"], pa.binary()), ["x"]),
    ("string", pa.array(["a"]), pa.array(["x", "x", "y"]).dictionary_encode(), ["x", "x", "y"]),
    ("binary", pa.array([b"a"]), pa.array(["x"]), [b"x"]),
    ("double", pa.array([1.5]), pa.array([0.25], pa.float32()), [0.25]),
    ("float", pa.array([1.5], pa.float32()), pa.array([0.25]), [0.25]),
    (
        "decimal(12,2)",
        pa.array([Decimal("1.25")], pa.decimal128(12, 2)),
        pa.array([Decimal("3.5")], pa.decimal128(5, 1)),
        [Decimal("3.50")],
    ),
    ("date", pa.array([dt.date(2020, 1, 1)]), pa.array([WHEN], pa.timestamp("us")), [dt.date(2020, 1, 2)]),
    (
        "timestamp_ntz",
        pa.array([WHEN], pa.timestamp("us")),
        pa.array([dt.date(2020, 1, 1)]),
        [dt.datetime(2020, 1, 1)],
    ),
    ("timestamp_ntz", pa.array([WHEN], pa.timestamp("us")), pa.array([WHEN], pa.timestamp("ms")), [WHEN]),
    ("timestamp_ntz", pa.array([WHEN], pa.timestamp("us")), pa.array([WHEN], pa.timestamp("ns")), [WHEN]),
    (
        "timestamp_ntz",
        pa.array([WHEN], pa.timestamp("us")),
        pa.array([WHEN], pa.timestamp("us", "UTC")),
        [WHEN],
    ),
    (
        "timestamp",
        pa.array([WHEN], pa.timestamp("us", "UTC")),
        pa.array([WHEN], pa.timestamp("ms", "UTC")),
        [WHEN_UTC],
    ),
    (
        "timestamp",
        pa.array([WHEN], pa.timestamp("us", "UTC")),
        pa.array([WHEN], pa.timestamp("ns", "UTC")),
        [WHEN_UTC],
    ),
    (
        "timestamp",
        pa.array([WHEN], pa.timestamp("us", "UTC")),
        pa.array([WHEN], pa.timestamp("us")),
        [WHEN_UTC],
    ),
    (
        "timestamp",
        pa.array([WHEN], pa.timestamp("us", "UTC")),
        pa.array([WHEN], pa.timestamp("ms", "+05:00")),
        [WHEN_UTC],
    ),
    (
        "timestamp",
        pa.array([WHEN], pa.timestamp("us", "UTC")),
        pa.array([WHEN], pa.timestamp("ns", "America/New_York")),
        [WHEN_UTC],
    ),
]


@pytest.mark.parametrize("case", TYPE_CASES, ids=lambda c: f"{c[0]}<-{c[2].type}")
def test_a_file_column_of_another_type_is_read_as_the_tables_type(
    tmp_path, engine_path, whole_file_reads, case
):
    delta_type, first, other, rows = case
    build(
        tmp_path,
        struct(field("v", delta_type)),
        [("a.parquet", pa.table({"v": first})), ("b.parquet", pa.table({"v": other}))],
    )
    got = DeltaTable(str(tmp_path)).to_arrow()
    # The scanner cast b.parquet; the check after the scan re-read it on the engine's path.
    assert whole_file_reads == ["b.parquet"]
    assert got.column("v").to_pylist() == first.to_pylist()[:1] + rows
    want = engine_path(tmp_path)
    assert got.schema == want.schema and got.to_pylist() == want.to_pylist()


def test_int96_timestamps_after_plain_files(tmp_path, engine_path):
    when = dt.datetime(2026, 1, 2, 3, 4, 5, 678901)
    build(
        tmp_path,
        struct(field("ts", "timestamp")),
        [("a.parquet", pa.table({"ts": pa.array([WHEN], pa.timestamp("us", "UTC"))}))],
    )
    pq.write_table(
        pa.table({"ts": pa.array([when], pa.timestamp("us"))}),
        tmp_path / "b.parquet",
        use_deprecated_int96_timestamps=True,
    )
    write_commit(
        LocalStore(str(tmp_path)), 1, [add("b.parquet", size=os.path.getsize(tmp_path / "b.parquet"))]
    )
    got = both(tmp_path, engine_path).column("ts").to_pylist()
    assert sorted(got) == [WHEN_UTC, when.replace(tzinfo=dt.UTC)]


def test_widened_integers_agree_with_duckdb(tmp_path, engine_path):
    files = [("a.parquet", pa.table({"v": pa.array([1, None], pa.int64())}))]
    files += [
        (f"{t}.parquet", pa.table({"v": pa.array([-5, 6], t)})) for t in (pa.int8(), pa.int16(), pa.int32())
    ]
    build(tmp_path, struct(field("v", "long")), files)
    got = both(tmp_path, engine_path).column("v").to_pylist()
    con = duckdb.connect()
    duck = [
        row[0]
        for name, _ in files
        for row in con.execute(f"SELECT CAST(v AS BIGINT) FROM read_parquet('{tmp_path / name}')").fetchall()
    ]
    assert got == duck == [1, None, -5, 6, -5, 6, -5, 6]


def test_a_value_the_tables_type_cannot_hold_is_the_engines_typed_error(tmp_path, engine_path):
    build(
        tmp_path,
        struct(field("v", "integer")),
        [
            ("a.parquet", pa.table({"v": pa.array([1], pa.int32())})),
            ("b.parquet", pa.table({"v": pa.array([2**40])})),
        ],
    )
    with pytest.raises(DataFileError, match=r"column 'v' of data file b\.parquet has type int64"):
        DeltaTable(str(tmp_path)).to_arrow()
    build(
        tmp_path / "s",
        struct(field("v", "long")),
        [("a.parquet", pa.table({"v": [1]})), ("b.parquet", pa.table({"v": ["x"]}))],
    )
    with pytest.raises(DataFileError, match=r"column 'v' of data file b\.parquet has type string"):
        DeltaTable(str(tmp_path / "s")).to_arrow()


# --- nested types ------------------------------------------------------------------------------

AB = struct(field("a", "long"), field("b", "string"))


@pytest.mark.parametrize(
    "second, read",
    [
        (pa.array([{"b": "y", "a": 2}]), {"a": 2, "b": "y"}),  # fields in another order
        (pa.array([{"a": 2}]), {"a": 2, "b": None}),  # a field missing
        (pa.array([{"a": 2, "b": "y", "c": 3.0}]), {"a": 2, "b": "y"}),  # an extra field
        (pa.array([{"A": 2, "B": "y"}]), {"a": 2, "b": "y"}),  # names in another case
        (
            pa.array([{"a": 2, "b": "y"}], pa.struct([("a", pa.int32()), ("b", pa.string())])),
            {"a": 2, "b": "y"},
        ),
    ],
    ids=["order", "missing", "extra", "case", "narrow-child"],
)
def test_struct_files_of_another_shape(tmp_path, engine_path, second, read):
    first = pa.table({"s": pa.array([{"a": 1, "b": "x"}, None])})
    build(tmp_path, struct(field("s", AB)), [("a.parquet", first), ("b.parquet", pa.table({"s": second}))])
    assert both(tmp_path, engine_path).column("s").to_pylist() == [{"a": 1, "b": "x"}, None, read]


def test_lists_maps_and_lists_of_structs_with_either_writers_names(tmp_path, engine_path):
    """pyarrow's own names (ARROW:schema stored) and the Parquet names Spark writes
    (``key_value``, ``element``, or the legacy ``item``/``array``) read the same."""
    schema = struct(
        field("m", {"type": "map", "keyType": "string", "valueType": AB, "valueContainsNull": True}),
        field("l", {"type": "array", "elementType": AB, "containsNull": True}),
        field(
            "lm",
            {
                "type": "array",
                "elementType": {
                    "type": "map",
                    "keyType": "string",
                    "valueType": "long",
                    "valueContainsNull": True,
                },
                "containsNull": True,
            },
        ),
    )
    ab = pa.struct([("a", pa.int64()), ("b", pa.string())])
    rows = pa.table(
        {
            "m": pa.array([[("k", {"a": 1, "b": "x"})], None, []], pa.map_(pa.string(), ab)),
            "l": pa.array([[{"a": 2, "b": None}, None], [], None], pa.list_(ab)),
            "lm": pa.array([[[("z", 3)]], [None, []], None], pa.list_(pa.map_(pa.string(), pa.int64()))),
        }
    )
    for i, options in enumerate(
        [{}, {"store_schema": False}, {"store_schema": False, "use_compliant_nested_type": False}]
    ):
        pq.write_table(rows, tmp_path / f"{i}.parquet", **options)
    store = LocalStore(str(tmp_path))
    write_commit(store, 0, [protocol(), metadata(schema=schema)] + [add(f"{i}.parquet") for i in range(3)])
    got = both(tmp_path, engine_path)
    assert got.to_pylist() == rows.to_pylist() * 3
    assert DeltaTable(str(tmp_path)).to_arrow().schema == got.schema


# --- column names ------------------------------------------------------------------------------


def test_column_names_in_another_case_and_two_that_differ_only_by_case(tmp_path, engine_path):
    one = pa.table({"id": pa.array([1], pa.int64()), "Name": ["a"]})
    upper = pa.table({"ID": pa.array([2], pa.int64()), "NAME": ["b"]})
    both_cases = pa.table({"ID": pa.array([30], pa.int64()), "id": pa.array([3], pa.int64()), "name": ["c"]})
    schema = struct(field("id", "long"), field("name", "string"))
    build(tmp_path, schema, [("a.parquet", one), ("b.parquet", upper), ("c.parquet", both_cases)])
    # The exact name wins over one in another case.
    assert both(tmp_path, engine_path).to_pylist() == [
        {"id": 1, "name": "a"},
        {"id": 2, "name": "b"},
        {"id": 3, "name": "c"},
    ]


def test_names_the_scanner_could_read_as_paths(tmp_path, engine_path):
    schema = struct(field("a.b", "long"), field("[0]", "long"), field(".x", "string"))
    build(tmp_path, schema, [("a.parquet", pa.table({"a.b": [1], "[0]": [2], ".x": ["three"]}))])
    assert both(tmp_path, engine_path).to_pylist() == [{"a.b": 1, "[0]": 2, ".x": "three"}]


def test_projection_duplicates_and_unknown_names(tmp_path, engine_path):
    build(
        tmp_path,
        struct(field("id", "long"), field("p", "string")),
        [("a.parquet", pa.table({"id": [1, 2]}))],
        parts=[{"p": "x"}],
        partition_columns=["p"],
    )
    got = both(tmp_path, engine_path, columns=["p", "id", "p"])
    assert got.column_names == ["p", "id", "p"] and got.to_pylist() == [
        {"p": "x", "id": 1},
        {"p": "x", "id": 2},
    ]
    from deltaplane.engine.errors import SchemaError

    with pytest.raises(SchemaError, match="unknown column 'nope'"):
        DeltaTable(str(tmp_path)).to_arrow(columns=["id", "nope"])
