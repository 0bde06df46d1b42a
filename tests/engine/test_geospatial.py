"""Reading tables with the ``geospatial`` feature: geometry and geography columns come back as
their WKB bytes, the CRS (and edge algorithm) in the Arrow field's GeoArrow metadata.

The Parquet files carry Parquet's GEOMETRY / GEOGRAPHY logical types, written by pyarrow from
GeoArrow-typed arrays (as Databricks and other geospatial writers produce them); the log, with
bounding-box statistics in WKT as the RFC specifies, is written by hand.
"""

from __future__ import annotations

import json
import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.errors import ProtocolError, SchemaError
from deltaplane.engine.schema import GeoType, parse_schema
from deltaplane.engine.storage import LocalStore
from tests.logbuilder import add, commit_info, metadata, protocol, struct_schema, write_commit


def wkb_point(x: float, y: float) -> bytes:
    return struct.pack("<BIdd", 1, 1, x, y)


class _GeoArrowWKB(pa.ExtensionType):
    """Only to make pyarrow write Parquet's geospatial logical types (never registered)."""

    def __init__(self, extension_metadata: dict):
        self._meta = json.dumps(extension_metadata).encode()
        super().__init__(pa.binary(), "geoarrow.wkb")

    def __arrow_ext_serialize__(self):
        return self._meta

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type, serialized):
        return cls(json.loads(serialized))


SCHEMA = struct_schema(
    ("id", "long"), ("shape", "geometry(OGC:CRS84)"), ("route", "geography(EPSG:4326, spherical)")
)


def write_geo_file(root, name: str, ids: list[int], points: list[tuple[float, float] | None]) -> int:
    shape = pa.ExtensionArray.from_storage(
        _GeoArrowWKB({"crs": "OGC:CRS84"}),
        pa.array([wkb_point(*p) if p else None for p in points], pa.binary()),
    )
    route = pa.ExtensionArray.from_storage(
        _GeoArrowWKB({"crs": "EPSG:4326", "edges": "spherical"}),
        pa.array([wkb_point(p[1], p[0]) if p else None for p in points], pa.binary()),
    )
    table = pa.table({"id": pa.array(ids, pa.int64()), "shape": shape, "route": route})
    path = root / name
    pq.write_table(table, path)
    assert "Geometry" in str(pq.ParquetFile(path).metadata.schema)  # the logical type is really there
    return path.stat().st_size


@pytest.fixture
def geo_table(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    store = LocalStore(str(root))
    s1 = write_geo_file(root, "a.parquet", [1, 2], [(-122.4, 37.7), (-120.5, 38.0)])
    s2 = write_geo_file(root, "b.parquet", [3], [None])
    stats = {
        "numRecords": 2,
        "minValues": {"id": 1, "shape": "POINT(-122.4 37.7)"},
        "maxValues": {"id": 2, "shape": "POINT(-120.5 38.0)"},
        "nullCount": {"id": 0, "shape": 0, "route": 0},
    }
    write_commit(
        store,
        0,
        [
            commit_info(),
            protocol(3, 7, ["geospatial"], ["geospatial"]),
            metadata(SCHEMA),
            add("a.parquet", size=s1, stats=stats),
            add(
                "b.parquet", size=s2, stats={"numRecords": 1, "minValues": {"id": 3}, "maxValues": {"id": 3}}
            ),
        ],
    )
    return root


def test_geometry_and_geography_read_as_wkb_with_their_crs(geo_table):
    table = DeltaTable(str(geo_table))
    out = table.to_arrow().sort_by("id")
    assert out.column("shape").to_pylist() == [wkb_point(-122.4, 37.7), wkb_point(-120.5, 38.0), None]
    assert out.column("route").to_pylist()[0] == wkb_point(37.7, -122.4)
    shape, route = out.schema.field("shape"), out.schema.field("route")
    assert shape.type == pa.binary() and route.type == pa.binary()
    assert shape.metadata[b"ARROW:extension:name"] == b"geoarrow.wkb"
    assert json.loads(shape.metadata[b"ARROW:extension:metadata"]) == {"crs": "OGC:CRS84"}
    assert json.loads(route.metadata[b"ARROW:extension:metadata"]) == {
        "crs": "EPSG:4326",
        "edges": "spherical",
    }
    assert table.schema == out.schema


def test_bounding_box_statistics_are_not_mistaken_for_min_max(geo_table):
    table = DeltaTable(str(geo_table))
    assert len(table.file_uris("id >= 2")) == 2 and len(table.file_uris("id = 3")) == 1
    assert table.to_arrow(filter="shape IS NULL").column("id").to_pylist() == [3]
    actions = table.get_add_actions(flatten=True)
    assert "min.shape" not in actions.column_names and "min.id" in actions.column_names


def test_a_geospatial_table_is_read_only(geo_table):
    table = DeltaTable(str(geo_table))
    with pytest.raises(ProtocolError, match="geospatial") as caught:
        table.delete("id = 1")
    assert caught.value.feature == "geospatial"


def test_geo_type_strings_parse_and_print_back():
    cases = {
        "geometry(OGC:CRS84)": GeoType("geometry", "OGC:CRS84"),
        "geometry(srid:4326)": GeoType("geometry", "srid:4326"),
        "geography(OGC:CRS84, spherical)": GeoType("geography", "OGC:CRS84", "spherical"),
        "geography(EPSG:4326,karney)": GeoType("geography", "EPSG:4326", "karney"),
        "geometry": GeoType("geometry", "OGC:CRS84"),
    }
    for text, expected in cases.items():
        field = {"name": "g", "type": text, "nullable": True, "metadata": {}}
        parsed = parse_schema(json.dumps({"type": "struct", "fields": [field]})).fields[0].type
        assert parsed == expected
        again = parse_schema(json.dumps({"type": "struct", "fields": [{**field, "type": parsed.to_json()}]}))
        assert again.fields[0].type == expected
    for bad in ("geometry(OGC:CRS84, spherical)", "geography(OGC:CRS84, flat)"):
        field = {"name": "g", "type": bad, "nullable": True, "metadata": {}}
        with pytest.raises(SchemaError):
            parse_schema(json.dumps({"type": "struct", "fields": [field]}))
