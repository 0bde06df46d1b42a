"""Which schema changes a reader can read across: the data of one version read under the schema
of another.

A column-mapped table can rename and drop columns: its files name columns by physical name, so
reading an old file under a newer schema silently relabels (a renamed column) or resurrects (a
column dropped, then one added with the same name) values. Any table can widen a type or tighten
nullability, and old files then do not have the type or the guarantee the read schema promises.
Delta Spark refuses such reads (``DeltaColumnMapping.hasNoColumnMappingSchemaChanges`` and
``SchemaUtils.isReadCompatible``); these functions apply the same rules and say, in words, what
changed, for the change data feed and every other reader of a version range:

* column mapping on both sides: no column (at any nesting level, by physical path) renamed or
  dropped, and the same partition columns;
* mapping turned on in between (none -> name/id): the same, with the older schema's names as its
  physical names (what the upgrade assigns);
* mapping turned off in between: never readable across;
* on any table: every column of the older schema still there with the same name (case included),
  the same primitive types (no widening), and nothing that was nullable made NOT NULL.

Added columns are always fine (older files read them as nulls).
"""

from __future__ import annotations

from deltaplane.engine.actions import Metadata
from deltaplane.engine.schema import ArrayType, DataType, MapType, StructField, StructType, parse_schema
from deltaplane.engine.table_properties import TableProperties


def read_incompatibility(older: Metadata, newer: Metadata) -> str | None:
    """What keeps data written under ``older`` from being read under ``newer`` (a later version's
    metadata), in words; ``None`` when it reads correctly."""
    old_schema, new_schema = parse_schema(older.schema_string), parse_schema(newer.schema_string)
    return _column_mapping_change(older, newer, old_schema, new_schema) or _type_change(
        old_schema, new_schema, ""
    )


def _mode(metadata: Metadata) -> str:
    return TableProperties(metadata.configuration).column_mapping_mode


def _column_mapping_change(
    older: Metadata, newer: Metadata, old_schema: StructType, new_schema: StructType
) -> str | None:
    old_mode, new_mode = _mode(older), _mode(newer)
    if new_mode == "none":
        return f"column mapping was turned off (mode {old_mode} -> none)" if old_mode != "none" else None
    # Both mapped, or mapping turned on in between: an unmapped field's physical name is its
    # name, which is what turning mapping on assigns.
    old_paths, new_paths = _physical_paths(old_schema), _physical_paths(new_schema)
    for path, name in old_paths.items():
        if path not in new_paths:
            return f"column {'.'.join(_logical(old_paths, path))!r} was dropped"
        if new_paths[path] != name:
            return (
                f"column {'.'.join(_logical(old_paths, path))!r} was renamed to "
                f"{'.'.join(_logical(new_paths, path))!r}"
            )
    old_parts = [c.lower() for c in older.partition_columns]
    new_parts = [c.lower() for c in newer.partition_columns]
    if old_parts != new_parts:
        return f"the partition columns changed from {older.partition_columns} to {newer.partition_columns}"
    return None


def _physical_paths(schema: StructType) -> dict[tuple[str, ...], str]:
    """Physical path of every struct field (through arrays and maps) -> its logical name."""
    out: dict[tuple[str, ...], str] = {}

    def walk(t: DataType, prefix: tuple[str, ...]) -> None:
        if isinstance(t, StructType):
            for f in t.fields:
                path = (*prefix, f.physical_name)
                out[path] = f.name
                walk(f.type, path)
        elif isinstance(t, ArrayType):
            walk(t.element_type, (*prefix, "element"))
        elif isinstance(t, MapType):
            walk(t.key_type, (*prefix, "key"))
            walk(t.value_type, (*prefix, "value"))

    walk(schema, ())
    return out


def _logical(paths: dict[tuple[str, ...], str], path: tuple[str, ...]) -> list[str]:
    return [paths.get(path[: i + 1], part) for i, part in enumerate(path)]


def _type_change(old: DataType, new: DataType, where: str) -> str | None:
    if isinstance(old, StructType) and isinstance(new, StructType):
        return _struct_change(old, new, where)
    if isinstance(old, ArrayType) and isinstance(new, ArrayType):
        if old.contains_null and not new.contains_null:
            return f"the elements of {where!r} were made NOT NULL"
        return _type_change(old.element_type, new.element_type, f"{where}.element")
    if isinstance(old, MapType) and isinstance(new, MapType):
        if old.value_contains_null and not new.value_contains_null:
            return f"the values of {where!r} were made NOT NULL"
        return _type_change(old.key_type, new.key_type, f"{where}.key") or _type_change(
            old.value_type, new.value_type, f"{where}.value"
        )
    if old != new:
        return f"the type of {where!r} changed from {_type_name(old)} to {_type_name(new)}"
    return None


def _struct_change(old: StructType, new: StructType, where: str) -> str | None:
    new_by_name = {f.name.lower(): f for f in new.fields}
    for f in old.fields:
        name = f"{where}.{f.name}" if where else f.name
        match: StructField | None = new_by_name.get(f.name.lower())
        if match is None:
            return f"column {name!r} was dropped"
        if match.name != f.name:
            return f"column {name!r} is now spelled {match.name!r}"
        if f.nullable and not match.nullable:
            return f"column {name!r} was made NOT NULL"
        change = _type_change(f.type, match.type, name)
        if change:
            return change
    return None


def _type_name(t: DataType) -> str:
    json = t.to_json()
    return json if isinstance(json, str) else str(json.get("type", json))


# --- recording type changes ---------------------------------------------------------------------

TYPE_CHANGES = "delta.typeChanges"  # field metadata: the history of a column's widenings


def record_type_changes(schema: StructType, previous: StructType) -> StructType:
    """``schema`` in which every field whose type (or the type of an array element or map key or
    value inside it) was widened since ``previous`` has the change appended to its
    ``delta.typeChanges`` metadata (``{"fromType", "toType"}``, with ``fieldPath`` for a change
    inside an array or map), as the typeWidening feature requires. Fields are matched by physical
    name; a field whose history already grew (the command recorded it) is left alone."""
    before = {f.physical_name: f for f in previous.fields}
    fields, changed = [], False
    for f in schema.fields:
        old = before.get(f.physical_name)
        new = f
        if old is not None:
            new = _field_with_changes(f, old)
        changed |= new is not f
        fields.append(new)
    return StructType(tuple(fields)) if changed else schema


def _field_with_changes(f: StructField, old: StructField) -> StructField:
    inner = _type_with_changes(f.type, old.type)
    entries = [
        {"fromType": _json_type(a), "toType": _json_type(b), **({"fieldPath": path} if path else {})}
        for path, a, b in _widenings(f.type, old.type, "")
    ]
    metadata = f.metadata
    if entries and f.metadata.get(TYPE_CHANGES) == old.metadata.get(TYPE_CHANGES):
        metadata = {**f.metadata, TYPE_CHANGES: [*(old.metadata.get(TYPE_CHANGES) or []), *entries]}
    if inner is f.type and metadata is f.metadata:
        return f
    return StructField(f.name, inner, f.nullable, metadata)


def _type_with_changes(new: DataType, old: DataType) -> DataType:
    """Nested struct fields record their own changes."""
    if isinstance(new, StructType) and isinstance(old, StructType):
        return record_type_changes(new, old)
    if isinstance(new, ArrayType) and isinstance(old, ArrayType):
        element = _type_with_changes(new.element_type, old.element_type)
        return new if element is new.element_type else ArrayType(element, new.contains_null)
    if isinstance(new, MapType) and isinstance(old, MapType):
        key = _type_with_changes(new.key_type, old.key_type)
        value = _type_with_changes(new.value_type, old.value_type)
        if key is new.key_type and value is new.value_type:
            return new
        return MapType(key, value, new.value_contains_null)
    return new


def _widenings(new: DataType, old: DataType, path: str):
    """(fieldPath, old type, new type) of each widened leaf of this field, not crossing into
    nested struct fields (they carry their own history)."""
    from deltaplane.engine.schema import is_widening

    if isinstance(new, ArrayType) and isinstance(old, ArrayType):
        yield from _widenings(new.element_type, old.element_type, _join(path, "element"))
    elif isinstance(new, MapType) and isinstance(old, MapType):
        yield from _widenings(new.key_type, old.key_type, _join(path, "key"))
        yield from _widenings(new.value_type, old.value_type, _join(path, "value"))
    elif not isinstance(new, StructType) and new != old and is_widening(old, new):
        yield path, old, new


def _join(path: str, part: str) -> str:
    return f"{path}.{part}" if path else part


def _json_type(t: DataType) -> str:
    value = t.to_json()
    return value if isinstance(value, str) else str(value)
