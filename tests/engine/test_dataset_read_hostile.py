"""Adversarial cases for the scan's dataset path (``scan/dataset_path.py``): each table is
built by hand so the expected rows are stated here, and each read is also done on the engine's
per-file path (``_read_dataset`` disabled) or by DuckDB, which must agree.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from decimal import Decimal
from urllib.parse import unquote, urlsplit

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.deletion_vectors import encode_uuid, frame_dv, serialize_bitmap
from deltaplane.engine.errors import DataFileError
from deltaplane.engine.scan import Scan, ScanBuilder
from deltaplane.engine.snapshot import load_snapshot
from deltaplane.engine.storage.local import LocalStore
from tests.logbuilder import DV_FEATURES, add, inline_dv, metadata, protocol, write_commit
from tests.workers import run_in_threads

pytestmark = pytest.mark.usefixtures("dataset_scanner_for_small_scans")


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


def both(path, engine_path, *, dataset: bool = True, **kwargs) -> pa.Table:
    """The table as ``to_arrow`` reads it, after checking it equals the engine path's (values and
    schema); ``dataset``: the dataset path reads it (a first file needing conformance, or no
    file, leaves it all to the engine's path)."""
    scan = DeltaTable(str(path)).scan(**kwargs)
    if dataset:
        got = scan._read_dataset()
        assert got is not None  # the dataset path read the table (possibly re-reading some files)
    else:
        got = scan.to_table()
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
    assert both(tmp_path, engine_path, dataset=False).to_pylist() == expected
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
    assert both(tmp_path, engine_path, dataset=False).to_pylist() == [
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
    pq.write_table(pa.table({"ts": pa.array([WHEN], pa.timestamp("us", "UTC"))}), tmp_path / "a.parquet")
    int96 = pa.table({"ts": pa.array([when, None], pa.timestamp("us"))})
    pq.write_table(int96, tmp_path / "b.parquet", use_deprecated_int96_timestamps=True)
    schema = struct(field("ts", "timestamp"))
    write_commit(
        LocalStore(str(tmp_path)),
        0,
        [protocol(), metadata(schema=schema), add("a.parquet"), add("b.parquet")],
    )
    got = both(tmp_path, engine_path).column("ts").to_pylist()
    assert got == [WHEN_UTC, when.replace(tzinfo=dt.UTC), None]  # a zone-less INT96 value is a UTC instant


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
    one = pa.table({"id": pa.array([1], pa.int64()), "name": ["a"]})
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


# --- partition values --------------------------------------------------------------------------

PARTITION_CASES = [
    ("date", ["2020-01-02", None], [dt.date(2020, 1, 2), None]),
    (
        "timestamp",
        ["2020-01-02 03:04:05.123456", "1970-01-01 00:00:00"],
        [dt.datetime(2020, 1, 2, 3, 4, 5, 123456, dt.UTC), dt.datetime(1970, 1, 1, tzinfo=dt.UTC)],
    ),
    ("timestamp_ntz", ["2020-01-02 03:04:05", None], [dt.datetime(2020, 1, 2, 3, 4, 5), None]),
    ("decimal(5,2)", ["1.50", "-0.01"], [Decimal("1.50"), Decimal("-0.01")]),
    ("boolean", ["true", "false"], [True, False]),
    ("binary", ["ab", ""], [b"ab", None]),  # an empty partition value is null
    ("string", ["", "a/b%20c"], [None, "a/b%20c"]),
    ("integer", ["7", None], [7, None]),
    ("byte", ["-1", "2"], [-1, 2]),
    ("double", ["1.5", "-0.0"], [1.5, -0.0]),
]


@pytest.mark.parametrize("case", PARTITION_CASES, ids=lambda c: c[0])
def test_partition_values_of_every_type(tmp_path, engine_path, case):
    delta_type, raw, values = case
    rows = pa.table({"id": pa.array([1, 2], pa.int64())})
    schema = struct(field("id", "long"), field("p", delta_type))
    parts = [{"p": raw[0]}, {"p": raw[1]}]
    build(tmp_path, schema, [("a.parquet", rows), ("b.parquet", rows)], parts=parts, partition_columns=["p"])
    got = both(tmp_path, engine_path)
    assert got.to_pylist() == [{"id": i, "p": v} for v in values for i in (1, 2)]
    assert both(tmp_path, engine_path, columns=["p"]).column("p").to_pylist() == [
        v for v in values for _ in (1, 2)
    ]
    only_first = both(
        tmp_path, engine_path, filter="p IS NOT NULL" if values[1] is None else "id = 1 OR id = 2"
    )
    assert only_first.num_rows == (2 if values[1] is None else 4)


def test_a_partition_column_also_in_the_file_reads_the_logs_value(tmp_path, engine_path):
    schema = struct(field("id", "long"), field("p", "string"))
    files = [
        ("a.parquet", pa.table({"id": [1]})),
        ("b.parquet", pa.table({"id": [2], "p": ["from the file"]})),
        ("c.parquet", pa.table({"id": [3], "P": ["from the file"]})),
    ]
    build(tmp_path, schema, files, parts=[{"p": "x"}, {"p": "y"}, {"p": None}], partition_columns=["p"])
    expected = [{"id": 1, "p": "x"}, {"id": 2, "p": "y"}, {"id": 3, "p": None}]
    assert both(tmp_path, engine_path).to_pylist() == expected
    assert both(tmp_path, engine_path, filter="p = 'y'", dataset=False).to_pylist() == [expected[1]]
    assert both(tmp_path, engine_path, filter="p IS NULL", columns=["id"]).to_pylist() == [{"id": 3}]


def test_filters_on_partition_columns_only_apply_once_over_the_whole_table(tmp_path, engine_path):
    schema = struct(field("id", "long"), field("p", "integer"), field("q", "string"))
    rows = [pa.table({"id": pa.array([i * 10, i * 10 + 1], pa.int64())}) for i in range(4)]
    parts = [{"p": "1", "q": "a"}, {"p": "2", "q": "a"}, {"p": "1", "q": "b"}, {"p": None, "q": "a"}]
    build(
        tmp_path,
        schema,
        [(f"{i}.parquet", r) for i, r in enumerate(rows)],
        parts=parts,
        partition_columns=["p", "q"],
    )
    got = both(tmp_path, engine_path, filter="p = 1 OR q = 'b'", columns=["id"])
    assert got.column("id").to_pylist() == [0, 1, 20, 21]
    assert both(tmp_path, engine_path, filter="1 = 1", columns=[]).num_rows == 8
    assert both(tmp_path, engine_path, filter="1 = 0", dataset=False).num_rows == 0  # no file left
    assert both(tmp_path, engine_path, filter="q = 'a'", columns=[]).num_rows == 6


# --- deletion vectors, empty files, metrics ----------------------------------------------------


def file_dv(root, rows: list[int]) -> dict:
    u = uuid.uuid4()
    bitmap = serialize_bitmap(rows)
    (root / "dv").mkdir(exist_ok=True)
    (root / "dv" / f"deletion_vector_{u}.bin").write_bytes(b"\x01" + frame_dv(bitmap))
    return {
        "storageType": "u",
        "pathOrInlineDv": "dv" + encode_uuid(u),
        "offset": 1,
        "sizeInBytes": len(bitmap),
        "cardinality": len(rows),
    }


def ids(start: int, stop: int, typ: pa.DataType | None = None) -> pa.Table:
    return pa.table({"id": pa.array(range(start, stop), typ or pa.int64())})


def log_table(
    root,
    entries: list[tuple[str, pa.Table | None, dict | None, dict | None]],
    schema=None,
    partition_columns=(),
):
    """A table whose log names ``entries``: (path as the log writes it, rows written at its decoded
    path under ``root`` or ``None`` when written elsewhere, deletion vector, partition values)."""
    actions = [
        protocol(3, 7, DV_FEATURES, DV_FEATURES),
        metadata(schema=schema or struct(field("id", "long")), partition_columns=partition_columns),
    ]
    for path, rows, dv, parts in entries:
        if rows is not None:
            local = urlsplit(path).path if path.startswith("file:") else path
            target = root / unquote(local)  # relative, or absolute (the join keeps it)
            target.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(rows, target)
        actions.append(add(path, partition_values=parts or {}, dv=dv))
    write_commit(LocalStore(str(root)), 0, actions)


def metrics(root, *, dataset: bool, monkeypatch) -> tuple[int, int, int]:
    with monkeypatch.context() as m:
        if not dataset:
            m.setattr(Scan, "_read_dataset", lambda self: None)
        scan = ScanBuilder(load_snapshot(LocalStore(str(root)))).build()
        scan.to_table()
    return scan.metrics.files_read, scan.metrics.rows_read, scan.metrics.rows_deleted_by_dv


def test_deletion_vectors_inline_and_in_files_with_empty_files_between(tmp_path, engine_path, monkeypatch):
    schema = struct(field("id", "long"), field("p", "string"))
    log_table(
        tmp_path,
        [
            ("a.parquet", ids(0, 5), inline_dv([0, 4]), {"p": "a"}),
            ("b.parquet", ids(5, 8), inline_dv([0, 1, 2]), {"p": "b"}),  # every row deleted
            ("e.parquet", ids(0, 0), None, {"p": "e"}),  # no rows
            ("c.parquet", ids(8, 10), file_dv(tmp_path, [1]), {"p": "c"}),
            ("d.parquet", ids(10, 13, pa.int32()), inline_dv([0]), {"p": "d"}),  # re-read: a narrower type
            ("f.parquet", ids(13, 15), file_dv(tmp_path, [0, 1]), {"p": "f"}),  # every row deleted, last
        ],
        schema=schema,
        partition_columns=["p"],
    )
    got = both(tmp_path, engine_path)
    assert got.to_pylist() == [
        {"id": i, "p": p} for i, p in [(1, "a"), (2, "a"), (3, "a"), (8, "c"), (11, "d"), (12, "d")]
    ]
    assert both(tmp_path, engine_path, columns=["p"]).num_rows == 6
    assert both(tmp_path, engine_path, filter="p = 'd'", columns=["id"], dataset=False).column(
        "id"
    ).to_pylist() == [11, 12]
    expected_metrics = (6, 15, 9)
    assert metrics(tmp_path, dataset=True, monkeypatch=monkeypatch) == expected_metrics
    assert metrics(tmp_path, dataset=False, monkeypatch=monkeypatch) == expected_metrics


def test_a_deletion_vector_past_the_files_rows_is_the_typed_error(tmp_path):
    from deltaplane.engine.errors import CorruptDeletionVectorError

    log_table(
        tmp_path, [("a.parquet", ids(0, 3), None, None), ("b.parquet", ids(3, 5), inline_dv([2]), None)]
    )
    with pytest.raises(
        CorruptDeletionVectorError, match=r"b\.parquet.*deletes row 2, but the file has 2 rows"
    ):
        DeltaTable(str(tmp_path)).to_arrow()


def test_many_row_groups_and_deletion_vectors_in_file_order(tmp_path, engine_path):
    """Files of several row groups (the scanner yields many batches; the keep-mask is filtered
    batch by batch on a pool): every surviving row, in file order, with its file's partition."""
    entries, expected = [], []
    for f in range(3):
        n = 70_000 + f
        deleted = list(range(f, n, 7))
        pq.write_table(ids(f * 100_000, f * 100_000 + n), tmp_path / f"{f}.parquet", row_group_size=20_000)
        entries.append((f"{f}.parquet", None, inline_dv(deleted), {"p": str(f)}))
        gone = set(deleted)
        expected += [f * 100_000 + k for k in range(n) if k not in gone]
    log_table(
        tmp_path, entries, schema=struct(field("id", "long"), field("p", "integer")), partition_columns=["p"]
    )
    got = DeltaTable(str(tmp_path)).to_arrow()
    assert got.column("id").to_pylist() == expected
    assert got.column("p").to_pylist() == [i // 100_000 for i in expected]
    want = engine_path(tmp_path)
    assert got.equals(want)


# --- where the files are -----------------------------------------------------------------------


def test_encoded_absolute_and_file_uri_paths(tmp_path, engine_path):
    root = tmp_path / "t"
    elsewhere = tmp_path / "else where"
    elsewhere.mkdir()
    pq.write_table(ids(100, 102), elsewhere / "abs.parquet")
    log_table(
        root,
        [
            ("a%20b.parquet", ids(0, 1), None, None),  # a space
            ("a%2520b.parquet", ids(1, 2), None, None),  # a literal "%20" in the name
            ("%C3%A9%20%C3%BC/x.parquet", ids(2, 3), None, None),  # unicode in a directory
            (f"file://{root}/f.parquet", ids(3, 4), None, None),
            (f"file:{root}/g.parquet", ids(4, 5), None, None),
            (f"{root}/h.parquet", ids(5, 6), None, None),
            ("q%3F%23.parquet", ids(6, 7), None, None),
            ("file://" + str(elsewhere).replace(" ", "%20") + "/abs.parquet", None, None, None),
        ],
    )
    assert both(root, engine_path).column("id").to_pylist() == [0, 1, 2, 3, 4, 5, 6, 100, 101]


def test_more_files_than_are_joined_in_python_with_encoded_names_and_a_special_root(tmp_path, engine_path):
    root = tmp_path / "r o%20t é"
    entries = []
    for i in range(300):  # past the count where file URIs are built by Arrow kernels
        if i % 3 == 0:
            path = "p=a%20b%252F/" + f"{i}.parquet"
        elif i % 3 == 1:
            path = "file://" + str(root).replace("%", "%25").replace(" ", "%20") + f"/{i}.parquet"
        else:
            path = f"{i}.parquet"
        entries.append((path, ids(i, i + 1), None, None))
    log_table(root, entries)
    assert both(root, engine_path).column("id").to_pylist() == list(range(300))


@pytest.mark.parametrize("position", ["first", "later"])
@pytest.mark.parametrize("damage", ["missing", "truncated", "empty", "not parquet"])
def test_a_damaged_file_is_the_engines_typed_error_naming_it(tmp_path, position, damage):
    entries = [("a.parquet", ids(0, 3), None, None), ("bad.parquet", ids(3, 6), None, None)]
    log_table(tmp_path, entries if position == "later" else entries[::-1])
    bad = tmp_path / "bad.parquet"
    if damage == "missing":
        bad.unlink()
    elif damage == "truncated":
        bad.write_bytes(bad.read_bytes()[:-10])
    elif damage == "empty":
        bad.write_bytes(b"")
    else:
        bad.write_bytes(b"PAR1" + b"\0" * 100)
    why = "is missing" if damage == "missing" else "is not readable Parquet"
    with pytest.raises(DataFileError, match=rf"data file bad\.parquet of .* {why}") as info:
        DeltaTable(str(tmp_path)).to_arrow()
    assert info.value.path == "bad.parquet"


def test_an_unreadable_file_is_the_engines_typed_error(tmp_path):
    log_table(tmp_path, [("a.parquet", ids(0, 3), None, None), ("bad.parquet", ids(3, 6), None, None)])
    bad = tmp_path / "bad.parquet"
    bad.chmod(0)
    try:
        readable = os.access(bad, os.R_OK)  # root reads it all the same
        if readable:
            assert DeltaTable(str(tmp_path)).to_arrow().column("id").to_pylist() == list(range(6))
        else:
            with pytest.raises(DataFileError, match=r"bad\.parquet"):
                DeltaTable(str(tmp_path)).to_arrow()
    finally:
        bad.chmod(0o644)


# --- reuse and concurrency ---------------------------------------------------------------------


def test_one_table_object_across_widening_new_columns_deletes_and_overwrite(tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    first = pa.table({"id": pa.array([1, 2], pa.int32()), "g": ["a", "b"]})
    properties = {"delta.enableTypeWidening": "true", "delta.enableDeletionVectors": "true"}
    table = DeltaTable.create(path, data=first, partition_by=["g"], properties=properties)
    assert table.to_arrow().to_pylist() == [{"id": 1, "g": "a"}, {"id": 2, "g": "b"}]

    def rows(t):
        got = t.to_arrow()
        with monkeypatch.context() as m:
            m.setattr(Scan, "_read_dataset", lambda self: None)
            assert got.equals(t.to_arrow())  # the engine's path, same object, same version
        return sorted(got.to_pylist(), key=lambda r: r["id"])

    widen = pa.table({"id": pa.array([2**40], pa.int64()), "g": ["a"]})
    table.append(widen, schema_mode="merge")  # int -> long
    assert rows(table) == [{"id": 1, "g": "a"}, {"id": 2, "g": "b"}, {"id": 2**40, "g": "a"}]
    assert table.to_arrow().schema.field("id").type == pa.int64()
    table.append(pa.table({"id": pa.array([5], pa.int32()), "g": ["c"], "z": ["zz"]}), schema_mode="merge")
    table.delete("id = 1")
    assert rows(table) == [
        {"id": 2, "g": "b", "z": None},
        {"id": 5, "g": "c", "z": "zz"},
        {"id": 2**40, "g": "a", "z": None},
    ]
    DeltaTable(path).append(
        pa.table({"id": pa.array([9], pa.int64()), "g": ["a"], "z": [None]})
    )  # another writer
    assert len(rows(table)) == 3  # this object still reads its version
    table.refresh()
    assert [r["id"] for r in rows(table)] == [2, 5, 9, 2**40]
    table.overwrite(pa.table({"id": pa.array([7], pa.int32()), "g": ["q"]}), schema_mode="overwrite")
    assert rows(table) == [{"id": 7, "g": "q"}]


def test_threads_reading_one_table_at_once_get_the_same_rows(tmp_path):
    schema = struct(field("id", "long"), field("p", "string"))
    entries = [
        (
            f"{i}.parquet",
            ids(i * 100, i * 100 + 100, pa.int32() if i % 4 == 1 else pa.int64()),
            inline_dv([i]) if i % 3 == 0 else None,
            {"p": str(i % 5)},
        )
        for i in range(24)
    ]
    log_table(tmp_path, entries, schema=schema, partition_columns=["p"])
    expected = [
        {"id": i * 100 + k, "p": str(i % 5)}
        for i in range(24)
        for k in range(100)
        if not (i % 3 == 0 and k == i)
    ]
    table = DeltaTable(str(tmp_path))
    results: list = [None] * 6

    def read(slot: int) -> None:
        results[slot] = table.to_arrow().to_pylist()

    run_in_threads(read, range(6))
    assert all(r == expected for r in results)


def test_a_top_level_column_dropped_and_re_added_under_name_mapping(tmp_path, engine_path):
    """``x`` dropped and added again (new physical name): older files hold the old column only."""
    schema = struct(mapped("id", 1, "col-1"), mapped("x", 3, "col-3", "string"))
    old = pa.table({"col-1": pa.array([1], pa.int64()), "col-2": ["dropped"]})
    new = pa.table({"col-1": pa.array([2], pa.int64()), "col-3": ["new"]})
    build(
        tmp_path, schema, [("old.parquet", old), ("new.parquet", new)], config=NAME_MODE, proto=protocol(2, 5)
    )
    assert both(tmp_path, engine_path).to_pylist() == [{"id": 1, "x": None}, {"id": 2, "x": "new"}]
