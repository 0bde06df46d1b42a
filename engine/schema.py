"""Delta table schemas: the JSON ``schemaString`` model, and conversion to and from Arrow.

The Delta schema is Spark's JSON schema. It is kept as its own small model (rather than as an
Arrow schema) because it carries what Arrow cannot: field metadata used by the protocol (column
mapping names and ids, invariants, generation expressions, type-change history) and Spark type
names that have no one-to-one Arrow twin (``timestamp`` vs ``timestamp_ntz``, ``variant``).

Column mapping: with mode ``name`` or ``id`` the Parquet files and the log's stats and partition
values use *physical* names (``delta.columnMapping.physicalName``), and in ``id`` mode Parquet
columns are matched by field id (``delta.columnMapping.id``). :func:`physical_schema` gives the
schema the files were written with.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from deltaplane.engine.errors import SchemaError

PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
FIELD_ID_KEY = "delta.columnMapping.id"
PARQUET_FIELD_ID = b"PARQUET:field_id"

PRIMITIVE_NAMES = (
    "string",
    "long",
    "integer",
    "short",
    "byte",
    "float",
    "double",
    "boolean",
    "binary",
    "date",
    "timestamp",
    "timestamp_ntz",
    "void",
    "variant",
)
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(-?\d+)\s*\)$")
_GEO = re.compile(r"^(geometry|geography)(?:\(\s*([^,()]*?)\s*(?:,\s*([A-Za-z]+)\s*)?\))?$")
GEO_ALGORITHMS = ("spherical", "vincenty", "thomas", "andoyer", "karney")
DEFAULT_CRS = "OGC:CRS84"


@dataclass(frozen=True)
class PrimitiveType:
    name: str

    def to_json(self) -> str:
        return self.name


@dataclass(frozen=True)
class DecimalType:
    precision: int
    scale: int

    def to_json(self) -> str:
        return f"decimal({self.precision},{self.scale})"


@dataclass(frozen=True)
class GeoType:
    """``geometry(<crs>)`` or ``geography(<crs>, <algorithm>)`` (the ``geospatial`` feature):
    WKB values in Parquet's geospatial logical types. In Arrow they are binary columns whose
    field carries GeoArrow's ``geoarrow.wkb`` extension name and the CRS (and edge algorithm)
    as extension metadata, so geospatial tools recognise them and nothing else needs to."""

    kind: str  # "geometry" or "geography"
    crs: str = DEFAULT_CRS
    algorithm: str | None = None  # geography only: how edges are interpolated

    def to_json(self) -> str:
        if self.kind == "geography":
            return f"geography({self.crs}, {self.algorithm or 'spherical'})"
        return f"geometry({self.crs})"

    def arrow_metadata(self) -> dict[bytes, bytes]:
        extension: dict[str, str] = {"crs": self.crs}
        if self.kind == "geography":
            extension["edges"] = self.algorithm or "spherical"
        return {
            b"ARROW:extension:name": b"geoarrow.wkb",
            b"ARROW:extension:metadata": json.dumps(extension).encode(),
        }


@dataclass(frozen=True)
class ArrayType:
    element_type: DataType
    contains_null: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "array",
            "elementType": self.element_type.to_json(),
            "containsNull": self.contains_null,
        }


@dataclass(frozen=True)
class MapType:
    key_type: DataType
    value_type: DataType
    value_contains_null: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "map",
            "keyType": self.key_type.to_json(),
            "valueType": self.value_type.to_json(),
            "valueContainsNull": self.value_contains_null,
        }


@dataclass(frozen=True)
class StructField:
    name: str
    type: DataType
    nullable: bool = True
    metadata: dict[str, Any] = field(default_factory=dict, hash=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type.to_json(),
            "nullable": self.nullable,
            "metadata": self.metadata,
        }

    @property
    def physical_name(self) -> str:
        return self.metadata.get(PHYSICAL_NAME_KEY, self.name)

    @property
    def field_id(self) -> int | None:
        value = self.metadata.get(FIELD_ID_KEY)
        return int(value) if value is not None else None


@dataclass(frozen=True)
class StructType:
    fields: tuple[StructField, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"type": "struct", "fields": [f.to_json() for f in self.fields]}

    def to_json_string(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def find(self, name: str) -> StructField | None:
        """Field by name, exactly or else case-insensitively (Spark resolves names that way)."""
        for f in self.fields:
            if f.name == name:
                return f
        lowered = name.lower()
        for f in self.fields:
            if f.name.lower() == lowered:
                return f
        return None

    def __getitem__(self, name: str) -> StructField:
        found = self.find(name)
        if found is None:
            raise KeyError(name)
        return found


DataType = PrimitiveType | DecimalType | GeoType | ArrayType | MapType | StructType


# --- JSON <-> model ---------------------------------------------------------------------------


def parse_schema(schema_string: str | None) -> StructType:
    """Parse ``metaData.schemaString``; ``SchemaError`` on anything malformed.

    An absent schema string is an empty schema, as Delta Spark reads it.
    """
    if schema_string is None:
        return StructType(())
    try:
        obj = json.loads(schema_string)
    except (TypeError, ValueError) as e:
        raise SchemaError(f"schemaString is not valid JSON: {e}") from e
    parsed = _parse_type(obj)
    if not isinstance(parsed, StructType):
        raise SchemaError("a table schema must be a struct")
    return parsed


def _parse_type(obj: Any) -> DataType:
    if isinstance(obj, str):
        if obj in PRIMITIVE_NAMES:
            return PrimitiveType(obj)
        if obj == "decimal":
            return DecimalType(10, 0)
        m = _DECIMAL.match(obj)
        if m:
            precision, scale = int(m.group(1)), int(m.group(2))
            if not (0 < precision <= 38 and 0 <= scale <= precision):
                raise SchemaError(f"invalid decimal type {obj!r}")
            return DecimalType(precision, scale)
        m = _GEO.match(obj.strip())
        if m:
            return _geo_type(obj, m.group(1), m.group(2) or DEFAULT_CRS, m.group(3))
        raise SchemaError(f"unknown data type {obj!r}")
    if isinstance(obj, dict):
        kind = obj.get("type")
        try:
            if kind == "struct":
                return StructType(tuple(_parse_field(f) for f in obj["fields"]))
            if kind == "array":
                return ArrayType(_parse_type(obj["elementType"]), bool(obj.get("containsNull", True)))
            if kind == "map":
                return MapType(
                    _parse_type(obj["keyType"]),
                    _parse_type(obj["valueType"]),
                    bool(obj.get("valueContainsNull", True)),
                )
        except KeyError as e:
            raise SchemaError(f"{kind} type without {e.args[0]!r}: {obj}") from None
        # Some writers put a primitive in {"type": "..."} form.
        if isinstance(kind, str):
            return _parse_type(kind)
    raise SchemaError(f"cannot parse data type {obj!r}")


def _geo_type(text: str, kind: str, crs: str, algorithm: str | None) -> GeoType:
    if kind == "geometry" and algorithm is not None:
        raise SchemaError(f"{text!r}: a geometry type has no edge interpolation algorithm")
    if algorithm is not None and algorithm.lower() not in GEO_ALGORITHMS:
        raise SchemaError(
            f"{text!r}: unknown edge interpolation algorithm (one of {', '.join(GEO_ALGORITHMS)})"
        )
    if kind == "geography":
        algorithm = (algorithm or "spherical").lower()
    return GeoType(kind, crs, algorithm)


def _parse_field(obj: Any) -> StructField:
    if not isinstance(obj, dict) or "name" not in obj or "type" not in obj:
        raise SchemaError(f"invalid struct field {obj!r}")
    return StructField(
        name=obj["name"],
        type=_parse_type(obj["type"]),
        nullable=bool(obj.get("nullable", True)),
        metadata=dict(obj.get("metadata") or {}),
    )


# --- model -> Arrow ---------------------------------------------------------------------------

_PRIMITIVE_ARROW: dict[str, pa.DataType] = {
    "string": pa.string(),
    "long": pa.int64(),
    "integer": pa.int32(),
    "short": pa.int16(),
    "byte": pa.int8(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
    "void": pa.null(),
    # Variant values are stored as a struct of two binaries (the Parquet variant encoding);
    # Arrow has no variant type that every consumer understands, so that struct is exposed.
    "variant": pa.struct(
        [
            pa.field("value", pa.binary(), nullable=False),
            pa.field("metadata", pa.binary(), nullable=False),
        ]
    ),
}


def to_arrow_type(dtype: DataType, *, physical: bool = False) -> pa.DataType:
    """Arrow type of a Delta type; with ``physical`` nested struct fields use physical names."""
    if isinstance(dtype, PrimitiveType):
        return _PRIMITIVE_ARROW[dtype.name]
    if isinstance(dtype, DecimalType):
        return pa.decimal128(dtype.precision, dtype.scale)
    if isinstance(dtype, GeoType):
        return pa.binary()
    if isinstance(dtype, ArrayType):
        return pa.list_(
            pa.field("element", to_arrow_type(dtype.element_type, physical=physical), dtype.contains_null)
        )
    if isinstance(dtype, MapType):
        return pa.map_(
            to_arrow_type(dtype.key_type, physical=physical),
            pa.field(
                "value",
                to_arrow_type(dtype.value_type, physical=physical),
                dtype.value_contains_null,
            ),
        )
    if isinstance(dtype, StructType):
        return pa.struct([to_arrow_field(f, physical=physical) for f in dtype.fields])
    raise SchemaError(f"no Arrow type for {dtype!r}")


def to_arrow_field(f: StructField, *, physical: bool = False) -> pa.Field:
    name = f.physical_name if physical else f.name
    metadata = f.type.arrow_metadata() if isinstance(f.type, GeoType) else None
    return pa.field(name, to_arrow_type(f.type, physical=physical), nullable=f.nullable, metadata=metadata)


def to_arrow_schema(schema: StructType, *, physical: bool = False) -> pa.Schema:
    return pa.schema([to_arrow_field(f, physical=physical) for f in schema.fields])


# --- Arrow -> model ---------------------------------------------------------------------------


def from_arrow_type(t: pa.DataType) -> DataType:
    """Delta type for an Arrow type; ``SchemaError`` for types Delta cannot store."""
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return PrimitiveType("string")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return PrimitiveType("binary")
    if pa.types.is_fixed_size_binary(t):
        return PrimitiveType("binary")
    simple = {
        pa.int64(): "long",
        pa.int32(): "integer",
        pa.int16(): "short",
        pa.int8(): "byte",
        pa.float32(): "float",
        pa.float64(): "double",
        pa.bool_(): "boolean",
        pa.date32(): "date",
        pa.null(): "void",
    }
    if t in simple:
        return PrimitiveType(simple[t])
    if pa.types.is_timestamp(t):
        return PrimitiveType("timestamp" if t.tz is not None else "timestamp_ntz")
    if pa.types.is_date64(t):
        return PrimitiveType("date")
    if pa.types.is_decimal(t):
        if t.precision > 38:
            raise SchemaError(f"decimal precision {t.precision} exceeds Delta's 38")
        return DecimalType(t.precision, t.scale)
    if pa.types.is_dictionary(t):
        return from_arrow_type(t.value_type)
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_list_view(t)
        or (pa.types.is_fixed_size_list(t))
    ):
        return ArrayType(from_arrow_type(t.value_type), t.value_field.nullable)
    if pa.types.is_map(t):
        return MapType(from_arrow_type(t.key_type), from_arrow_type(t.item_type), t.item_field.nullable)
    if pa.types.is_struct(t):
        return StructType(tuple(from_arrow_field(t.field(i)) for i in range(t.num_fields)))
    raise SchemaError(f"Arrow type {t} has no Delta equivalent")


def from_arrow_field(f: pa.Field) -> StructField:
    return StructField(f.name, from_arrow_type(f.type), f.nullable, {})


def from_arrow_schema(schema: pa.Schema) -> StructType:
    return StructType(tuple(from_arrow_field(f) for f in schema))


# --- column mapping ---------------------------------------------------------------------------


def physical_schema(schema: StructType) -> StructType:
    """The schema with every (nested) field renamed to its physical name."""
    return StructType(tuple(_physical_field(f) for f in schema.fields))


def _physical_field(f: StructField) -> StructField:
    return StructField(f.physical_name, _physical_type(f.type), f.nullable, f.metadata)


def _physical_type(t: DataType) -> DataType:
    if isinstance(t, StructType):
        return physical_schema(t)
    if isinstance(t, ArrayType):
        return ArrayType(_physical_type(t.element_type), t.contains_null)
    if isinstance(t, MapType):
        return MapType(_physical_type(t.key_type), _physical_type(t.value_type), t.value_contains_null)
    return t


def partition_physical_names(schema: StructType, partition_columns: list[str]) -> list[str]:
    """Physical names of the partition columns: the keys of ``partitionValues`` in the log."""
    out = []
    for name in partition_columns:
        f = schema.find(name)
        if f is None:
            raise SchemaError(f"partition column {name!r} is not in the table schema")
        out.append(f.physical_name)
    return out


def iter_fields(t: DataType):
    """Every struct field nested in ``t`` (depth first)."""
    if isinstance(t, StructType):
        for f in t.fields:
            yield f
            yield from iter_fields(f.type)
    elif isinstance(t, ArrayType):
        yield from iter_fields(t.element_type)
    elif isinstance(t, MapType):
        yield from iter_fields(t.key_type)
        yield from iter_fields(t.value_type)


def iter_types(t: DataType):
    """Every type nested in ``t``, ``t`` included (used by feature detection)."""
    yield t
    if isinstance(t, StructType):
        for f in t.fields:
            yield from iter_types(f.type)
    elif isinstance(t, ArrayType):
        yield from iter_types(t.element_type)
    elif isinstance(t, MapType):
        yield from iter_types(t.key_type)
        yield from iter_types(t.value_type)


# --- evolution ----------------------------------------------------------------------------------

# Integer and floating-point widenings, lossless in Arrow and allowed by typeWidening: (from, to)
# type names.
NUMERIC_WIDENINGS = frozenset(
    {
        ("byte", "short"),
        ("byte", "integer"),
        ("byte", "long"),
        ("short", "integer"),
        ("short", "long"),
        ("integer", "long"),
        ("float", "double"),
        ("byte", "double"),
        ("short", "double"),
        ("integer", "double"),
    }
)
# Type changes the typeWidening feature allows (the protocol's list; decimals in is_widening).
_WIDENINGS = NUMERIC_WIDENINGS | {("date", "timestamp_ntz")}


def is_widening(old: DataType, new: DataType) -> bool:
    """Whether ``old -> new`` is a change the typeWidening feature permits."""
    if isinstance(old, PrimitiveType) and isinstance(new, PrimitiveType):
        return (old.name, new.name) in _WIDENINGS
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        k2 = new.scale - old.scale
        k1 = (new.precision - new.scale) - (old.precision - old.scale)
        return k1 >= 0 and k2 >= 0 and (k1, k2) != (0, 0)
    if isinstance(old, PrimitiveType) and isinstance(new, DecimalType):
        floor = {"byte": 10, "short": 10, "integer": 10, "long": 20}.get(old.name)
        return floor is not None and new.precision - new.scale >= floor
    return False


def merge_schemas(table: StructType, incoming: StructType, *, allow_widening: bool) -> StructType:
    """``table`` with ``incoming``'s new fields appended (recursively in structs).

    Existing fields keep their name, metadata and position; a type may only change by an
    allowed widening, and only when ``allow_widening``. Raises ``SchemaMismatchError``.
    """

    out = list(table.fields)
    for new in incoming.fields:
        current = table.find(new.name)
        if current is None:
            out.append(StructField(new.name, new.type, True, dict(new.metadata)))
            continue
        merged = _merge_types(current.type, new.type, allow_widening, new.name)
        if merged != current.type:
            index = out.index(current)
            out[index] = StructField(current.name, merged, current.nullable, current.metadata)
    return StructType(tuple(out))


def _merge_types(old: DataType, new: DataType, allow_widening: bool, where: str) -> DataType:
    from deltaplane.engine.errors import SchemaMismatchError

    if old == new:
        return old
    if isinstance(old, StructType) and isinstance(new, StructType):
        return merge_schemas(old, new, allow_widening=allow_widening)
    if isinstance(old, ArrayType) and isinstance(new, ArrayType):
        return ArrayType(
            _merge_types(old.element_type, new.element_type, allow_widening, where), old.contains_null
        )
    if isinstance(old, MapType) and isinstance(new, MapType):
        return MapType(
            _merge_types(old.key_type, new.key_type, allow_widening, where),
            _merge_types(old.value_type, new.value_type, allow_widening, where),
            old.value_contains_null,
        )
    if allow_widening and is_widening(old, new):
        return new
    if is_widening(new, old):
        return old  # narrower incoming data is cast up on write
    hint = "" if allow_widening else " (enable delta.enableTypeWidening to widen types)"
    raise SchemaMismatchError(
        f"column {where!r}: table type {old.to_json()} cannot take {new.to_json()}{hint}"
    )


def split_field_path(name: str) -> list[str]:
    """A column name as Spark SQL spells it, split into its field path: ``a.b`` -> ``["a", "b"]``;
    back-quoted parts keep their dots and spaces (```a.b`.c`` -> ``["a.b", "c"]``), a doubled
    back-quote inside one is a back-quote. ``SchemaError`` for an unbalanced back-quote or an
    empty part."""
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    i = 0
    while i < len(name):
        ch = name[i]
        if ch == "`":
            if quoted and i + 1 < len(name) and name[i + 1] == "`":
                current.append("`")
                i += 2
                continue
            quoted = not quoted
        elif ch == "." and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    if quoted:
        raise SchemaError("unbalanced back-quote")
    parts.append("".join(current))
    if any(not p for p in parts):
        raise SchemaError("empty name part")
    return parts


def type_text(t: DataType) -> str:
    """A type as messages write it: a primitive's name (``long``, ``decimal(10,2)``), a nested
    type's Delta JSON."""
    value = t.to_json()
    return value if isinstance(value, str) else json.dumps(value)


def split_name_list(text: str) -> list[str]:
    """A comma-separated list of column names (``delta.dataSkippingStatsColumns``); commas
    inside back-quotes belong to the name."""
    names, current, quoted = [], [], False
    for ch in text:
        if ch == "`":
            quoted = not quoted  # a doubled back-quote toggles twice: still inside
        if ch == "," and not quoted:
            names.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    names.append("".join(current).strip())
    return [n for n in names if n]
