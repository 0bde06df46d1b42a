"""Reading tables with the ``variantShredding`` feature.

The fixtures (``tests/fixtures/variant_shredding``) were written by PySpark 4.3: the same variant
rows once shredded with a forced schema and once unshredded (see ``generate.py`` there). A Delta
table is built around the shredded file; what deltaplane reads must decode to the same values as
Spark's unshredded file, row for row. Cases cover objects (fully and partially shredded, fields
missing, present-but-null, of the wrong type), nested objects and arrays, arrays of mixed
elements, typed primitives (dates, timestamps with and without zone, decimals of every width,
floats, booleans, binaries, long strings), and whole variants shredded as a primitive or an array.
"""

from __future__ import annotations

import json
import shutil
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.errors import ProtocolError
from deltaplane.engine.storage import LocalStore
from tests.logbuilder import add, commit_info, metadata, protocol, struct_schema, write_commit
from tests.variant_decode import decode

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "variant_shredding"
CASES = ("objects", "longs", "arrays")
SCHEMA = struct_schema(("id", "integer"), ("v", "variant"))


def table_around(tmp_path: Path, data_file: Path) -> Path:
    root = tmp_path / "t"
    root.mkdir()
    shutil.copy(data_file, root / "part-0.parquet")
    rows = pq.ParquetFile(data_file).metadata.num_rows
    features = ["variantType", "variantShredding"]
    write_commit(
        LocalStore(str(root)),
        0,
        [
            commit_info(),
            protocol(3, 7, features, features),
            metadata(SCHEMA, configuration={"delta.enableVariantShredding": "true"}),
            add("part-0.parquet", size=(root / "part-0.parquet").stat().st_size, stats={"numRecords": rows}),
        ],
    )
    return root


def decoded(table: pa.Table) -> dict[int, object]:
    out = {}
    for row in table.to_pylist():
        v = row["v"]
        out[row["id"]] = "<null>" if v is None else decode(v["value"], v["metadata"])
    return out


@pytest.mark.parametrize("case", CASES)
def test_shredded_variants_read_as_spark_wrote_them_unshredded(tmp_path, case):
    shredded = FIXTURES / f"{case}.shredded.parquet"
    assert "typed_value" in str(pq.ParquetFile(shredded).schema_arrow)  # really shredded
    ours = DeltaTable(str(table_around(tmp_path, shredded))).to_arrow()
    assert ours.schema.field("v").type == pa.struct(
        [pa.field("value", pa.binary(), False), pa.field("metadata", pa.binary(), False)]
    )
    expected = decoded(pq.read_table(FIXTURES / f"{case}.unshredded.parquet"))
    assert decoded(ours) == expected
    assert len(expected) >= 12


@pytest.mark.parametrize("case", CASES)
def test_the_values_are_the_json_spark_printed(tmp_path, case):
    ours = decoded(DeltaTable(str(table_around(tmp_path, FIXTURES / f"{case}.shredded.parquet"))).to_arrow())
    for row in json.loads((FIXTURES / f"{case}.json").read_text()):
        if row["id"] >= 100:
            continue  # typed rows: Spark prints dates and timestamps in its own formats
        if row["json"] is None:
            assert ours[row["id"]] == "<null>"
        else:
            assert ours[row["id"]] == json.loads(row["json"], parse_float=Decimal), row


def test_typed_primitives_keep_their_variant_types(tmp_path):
    ours = decoded(DeltaTable(str(table_around(tmp_path, FIXTURES / "objects.shredded.parquet"))).to_arrow())
    typed = ours[100]
    assert typed["dec"] == Decimal("12.34") and typed["big"] == Decimal("12345678901234567890.5")
    assert typed["f"] == 1.25 and typed["bo"] is True and typed["bin"] == b"\x00\xff\x10"
    assert str(typed["dt"]) == "2024-01-02" and typed["ts"].isoformat() == "2024-01-02T03:04:05.678901+00:00"
    assert typed["ntz"].isoformat() == "2024-05-06T07:08:09"
    assert ours[101]["ts"] == "not a timestamp" and ours[101]["dt"] == 5  # wrong types fall back to value


def test_a_filter_and_a_projection_on_a_shredded_table(tmp_path):
    table = DeltaTable(str(table_around(tmp_path, FIXTURES / "objects.shredded.parquet")))
    out = table.to_arrow(columns=["v"], filter="id = 3")
    assert decode(out.column("v")[0]["value"].as_py(), out.column("v")[0]["metadata"].as_py()) == [1, 2, 3]
    assert table.count("v IS NULL") == 1


def test_writing_a_shredded_variant_table_is_refused(tmp_path):
    table = DeltaTable(str(table_around(tmp_path, FIXTURES / "longs.shredded.parquet")))
    with pytest.raises(ProtocolError, match="variantShredding"):
        table.delete("id = 1")


def test_missing_parts_read_as_variant_null_and_shredded_fields_win(tmp_path):
    from deltaplane.engine.variant import unshred

    # metadata: version 1, dictionary ["a", "b"]
    meta = bytes([0x01, 2, 0, 1, 2]) + b"ab"
    obj_b = bytes([0x02, 1, 1, 0, 2]) + bytes([0x0C, 0x07])  # {"b": 7} (int8), field id 1
    typed = pa.StructArray.from_arrays(
        [
            pa.StructArray.from_arrays(
                [pa.array([None, None], pa.binary()), pa.array([5, 6], pa.int32())], ["value", "typed_value"]
            )
        ],
        ["a"],
        mask=pa.array([False, True]),
    )
    column = pa.StructArray.from_arrays(
        [pa.array([meta, meta]), pa.array([obj_b, None], pa.binary()), typed],
        ["metadata", "value", "typed_value"],
    )
    out = unshred(column).to_pylist()
    assert decode(out[0]["value"], out[0]["metadata"]) == {"a": 5, "b": 7}  # partially shredded
    assert out[1]["value"] == b"\x00"  # present, but neither part: Variant null
