"""Finding, typing and replacing a column by its path in a table's schema (struct fields, array
elements, map keys and values), for ALTER's column operations (engine/commands/alter.py), and the
statistics-column properties that follow a rename or a drop."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from deltaplane.engine.errors import (
    InvalidArgumentError,
    TableReadOnlyError,
)
from deltaplane.engine.schema import (
    ArrayType,
    MapType,
    StructField,
    StructType,
    split_field_path,
)
from deltaplane.engine.snapshot import Snapshot
from deltaplane.engine.storage.base import ObjectStore
from deltaplane.engine.table_properties import TableProperties


def field_path(store: ObjectStore, snapshot: Snapshot, column: str, verb: str) -> list[str]:
    """``column`` split and resolved (case-insensitively) to the schema's spelling; requires
    column mapping."""
    if TableProperties(snapshot.metadata.configuration).column_mapping_mode == "none":
        raise TableReadOnlyError(
            f"cannot {verb} a column of {store.root} without column mapping: its files name columns by "
            "their names. Enable it first: alter.set_table_properties({'delta.columnMapping.mode': 'name'})"
        )
    if not isinstance(column, str) or not column:
        raise InvalidArgumentError(f"a column name is a non-empty string, got {column!r}")
    parts = split_field_path(column)
    resolved: list[str] = []
    t: Any = snapshot.schema
    for part in parts:
        if isinstance(t, ArrayType) and part.lower() == "element":
            resolved.append("element")
            t = t.element_type
            continue
        if isinstance(t, MapType) and part.lower() in ("key", "value"):
            resolved.append(part.lower())
            t = t.key_type if part.lower() == "key" else t.value_type
            continue
        f = t.find(part) if isinstance(t, StructType) else None
        if f is None:
            raise InvalidArgumentError(
                f"{store.root} has no column {column!r} (columns: {', '.join(snapshot.schema.names)})"
            )
        resolved.append(f.name)
        t = f.type
    if resolved[-1] in ("element", "key", "value") and not isinstance(
        _parent_type(snapshot.schema, resolved), StructType
    ):
        raise InvalidArgumentError(f"{column!r} is not a field: only struct fields can be renamed or dropped")
    return resolved


def _parent_type(schema: StructType, path: list[str]) -> Any:
    t: Any = schema
    for part in path[:-1]:
        t = _child(t, part)
    return t


def _child(t: Any, part: str) -> Any:
    if isinstance(t, StructType):
        return t[part].type
    if isinstance(t, ArrayType):
        return t.element_type
    if isinstance(t, MapType):
        return t.key_type if part == "key" else t.value_type
    raise KeyError(part)


def sibling_fields(schema: StructType, path: list[str]) -> tuple[StructField, ...]:
    parent = _parent_type(schema, path)
    return parent.fields if isinstance(parent, StructType) else ()


def map_field(schema: StructType, path: list[str], change) -> StructType:
    """``schema`` with the field at ``path`` replaced by ``change(field)`` (``None`` drops it)."""

    def visit(t: Any, rest: list[str]) -> Any:
        head, tail = rest[0], rest[1:]
        if isinstance(t, ArrayType):
            return ArrayType(visit(t.element_type, tail), t.contains_null)
        if isinstance(t, MapType):
            if head == "key":
                return MapType(visit(t.key_type, tail), t.value_type, t.value_contains_null)
            return MapType(t.key_type, visit(t.value_type, tail), t.value_contains_null)
        fields = []
        for f in t.fields:
            if f.name != head:
                fields.append(f)
            elif not tail:
                changed = change(f)
                if changed is not None:
                    fields.append(changed)
            else:
                fields.append(StructField(f.name, visit(f.type, tail), f.nullable, f.metadata))
        return StructType(tuple(fields))

    return visit(schema, path)


def _quoted(path: list[str]) -> str:
    return ".".join(f"`{p.replace('`', '``')}`" if not p.isidentifier() else p for p in path)


def _stats_columns(configuration: Mapping[str, str]) -> list[str] | None:
    return TableProperties(dict(configuration)).data_skipping_stats_columns


def renamed_stats_columns(configuration: Mapping[str, str], path: list[str], new_name: str) -> dict[str, str]:
    listed = _stats_columns(configuration)
    if not listed:
        return dict(configuration)
    renamed = []
    for name in listed:
        parts = split_field_path(name)
        if [p.lower() for p in parts[: len(path)]] == [p.lower() for p in path]:
            parts = [*path[:-1], new_name, *parts[len(path) :]]
        renamed.append(_quoted(parts))
    return {**configuration, "delta.dataSkippingStatsColumns": ",".join(renamed)}


def dropped_stats_columns(configuration: Mapping[str, str], paths: list[list[str]]) -> dict[str, str]:
    listed = _stats_columns(configuration)
    if not listed:
        return dict(configuration)
    kept = [
        name
        for name in listed
        if not any(
            [p.lower() for p in split_field_path(name)[: len(path)]] == [p.lower() for p in path]
            for path in paths
        )
    ]
    return {**configuration, "delta.dataSkippingStatsColumns": ",".join(kept)}


def resolve_path(store: ObjectStore, schema: StructType, column: str) -> tuple[list[str], list[str]]:
    """The struct-field path of ``column`` (resolved case-insensitively) and, after it, the
    ``element``/``key``/``value`` steps into arrays and maps (``arr.element``)."""
    if not isinstance(column, str) or not column:
        raise InvalidArgumentError(f"a column name is a non-empty string, got {column!r}")
    resolved: list[str] = []
    inside: list[str] = []
    t: Any = schema
    for part in split_field_path(column):
        step = part.lower()
        if isinstance(t, ArrayType) and step == "element":
            inside.append(step)
            t = t.element_type
            continue
        if isinstance(t, MapType) and step in ("key", "value"):
            inside.append(step)
            t = t.key_type if step == "key" else t.value_type
            continue
        f = t.find(part) if isinstance(t, StructType) and not inside else None
        if f is None:
            raise InvalidArgumentError(
                f"{store.root} has no column {column!r} (columns: {', '.join(schema.names)})"
            )
        resolved.append(f.name)
        t = f.type
    return resolved, inside


def type_inside(t: Any, steps: list[str]) -> Any:
    for step in steps:
        t = t.element_type if step == "element" else t.key_type if step == "key" else t.value_type
    return t


def replace_inside(t: Any, steps: list[str], target: Any) -> Any:
    if not steps:
        return target
    head, rest = steps[0], steps[1:]
    if isinstance(t, ArrayType):
        return ArrayType(replace_inside(t.element_type, rest, target), t.contains_null)
    if head == "key":
        return MapType(replace_inside(t.key_type, rest, target), t.value_type, t.value_contains_null)
    return MapType(t.key_type, replace_inside(t.value_type, rest, target), t.value_contains_null)


def field_at(schema: StructType, path: list[str]) -> StructField | None:
    t: Any = schema
    found = None
    for part in path:
        if not isinstance(t, StructType):
            return None
        found = t.find(part)
        if found is None:
            return None
        t = found.type
    return found


def data_type_of(value: Any):
    from deltaplane.engine.schema import DecimalType, PrimitiveType, from_arrow_type

    if isinstance(value, pa.DataType):
        return from_arrow_type(value)
    if isinstance(value, (PrimitiveType, DecimalType)):
        return value
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        names = {
            "tinyint": "byte", "byte": "byte", "smallint": "short", "short": "short", "int": "integer",
            "integer": "integer", "bigint": "long", "long": "long", "float": "float", "real": "float",
            "double": "double", "date": "date", "timestamp_ntz": "timestamp_ntz", "timestamp": "timestamp",
            "string": "string", "boolean": "boolean", "binary": "binary",
        }  # fmt: skip
        if text in names:
            return PrimitiveType(names[text])
        if text.startswith("decimal(") and text.endswith(")"):
            try:
                precision, scale = (int(v) for v in text[len("decimal(") : -1].split(","))
            except ValueError:
                pass
            else:
                return DecimalType(precision, scale)
    raise InvalidArgumentError(f"not a column type: {value!r} (give a pyarrow type or a name like 'bigint')")
