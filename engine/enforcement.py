"""Schema enforcement and constraints on write: data must fit the table before it is written.

Incoming Arrow data is conformed to the table's logical schema: columns matched by name (as
Spark matches them, case-insensitively), missing nullable columns filled with nulls, and types
cast only where the cast cannot lose information (a narrower integer into a wider column, a
large/view string into a string, ...). Anything else is a ``SchemaMismatchError`` naming the
column, the table's type and the data's type. NOT NULL, CHECK constraints
(``delta.constraints.*``) and column invariants (``delta.invariants``) are then evaluated on the
conformed batch with Arrow; a violation is a ``ConstraintViolationError`` quoting a bad row.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.errors import ConstraintViolationError, DeltaError, SchemaMismatchError
from deltaplane.engine.expressions.arrow import evaluate
from deltaplane.engine.expressions.bind import bind_predicate
from deltaplane.engine.expressions.parser import parse_predicate
from deltaplane.engine.expressions.tree import Expr
from deltaplane.engine.schema import (
    NUMERIC_WIDENINGS,
    ArrayType,
    DataType,
    DecimalType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
    from_arrow_type,
    iter_fields,
    to_arrow_field,
    to_arrow_type,
)

# Lossless Arrow-level casts accepted on write: (from, to) Delta type names. Small integers also
# fit a float exactly, which typeWidening does not list; "void" (all nulls) casts to anything.
_SAFE_UPCASTS = NUMERIC_WIDENINGS | {("byte", "float"), ("short", "float"), ("void", "*")}


def check_unique_names(schema: pa.Schema) -> None:
    """Column names (and struct field names, at any depth) must be unique ignoring case: Delta
    resolves names case-insensitively, so ``id`` and ``ID`` would be one column."""

    def check(names: list[str], where: str) -> None:
        seen: dict[str, str] = {}
        for name in names:
            other = seen.setdefault(name.lower(), name)
            if other is name:
                continue
            if other == name:
                raise SchemaMismatchError(f"the data has two {where} named {name!r}")
            raise SchemaMismatchError(
                f"the data has {where} {other!r} and {name!r}, which Delta treats as one "
                "(column names are case-insensitive)"
            )

    def walk(t: pa.DataType, where: str) -> None:
        if pa.types.is_struct(t):
            check([t.field(i).name for i in range(t.num_fields)], f"fields in struct column {where!r}")
            for i in range(t.num_fields):
                walk(t.field(i).type, f"{where}.{t.field(i).name}")
        elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            walk(t.value_type, f"{where}.element")
        elif pa.types.is_map(t):
            walk(t.key_type, f"{where}.key")
            walk(t.item_type, f"{where}.value")

    check(schema.names, "columns")
    for f in schema:
        walk(f.type, f.name)


def conform_table(
    data: pa.Table | pa.RecordBatch, schema: StructType, *, computed: Collection[str] = ()
) -> pa.Table:
    """``data`` as a table of exactly the table's logical Arrow schema, or a clear error.
    ``computed``: columns the table fills itself (column_values.py), nulls here even if NOT NULL."""
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    check_unique_names(data.schema)
    names = data.schema.names
    lowered = {n.lower(): n for n in names}
    used = set()
    arrays = []
    for f in schema.fields:
        name = f.name if f.name in names else lowered.get(f.name.lower())
        if name is None:
            if not f.nullable and f.name not in computed:
                raise SchemaMismatchError(f"column {f.name!r} is missing from the data and is NOT NULL")
            arrays.append(pa.nulls(data.num_rows, to_arrow_type(f.type)))
            continue
        used.add(name)
        arrays.append(_conform_column(data.column(name), f.type, f.name))
    extra = [n for n in names if n not in used]
    if extra:
        raise SchemaMismatchError(
            f"the data has columns the table does not: {', '.join(extra)} "
            "(append with schema_mode='merge' to add them)"
        )
    return pa.Table.from_arrays(arrays, schema=pa.schema([to_arrow_field(f) for f in schema.fields]))


def _conform_column(column: pa.ChunkedArray, target: DataType, where: str) -> pa.ChunkedArray:
    target_type = to_arrow_type(target)
    if column.type == target_type:
        return column
    chunks = [_conform_array(chunk, target, where) for chunk in column.chunks]
    return pa.chunked_array(chunks, type=target_type)


def _conform_array(arr: pa.Array, target: DataType, where: str) -> pa.Array:
    target_type = to_arrow_type(target)
    if arr.type == target_type:
        return arr
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), target_type)
    if isinstance(target, StructType):
        if not pa.types.is_struct(arr.type):
            raise _mismatch(where, target, arr.type)
        lowered = {arr.type.field(i).name.lower(): i for i in range(arr.type.num_fields)}
        children = []
        for child in target.fields:
            index = arr.type.get_field_index(child.name)
            if index < 0:
                index = lowered.get(child.name.lower(), -1)
            if index < 0:
                children.append(pa.nulls(len(arr), to_arrow_type(child.type)))
            else:
                children.append(_conform_array(arr.field(index), child.type, f"{where}.{child.name}"))
        known = {c.name.lower() for c in target.fields}
        extra = [
            arr.type.field(i).name
            for i in range(arr.type.num_fields)
            if arr.type.field(i).name.lower() not in known
        ]
        if extra:
            raise SchemaMismatchError(
                f"struct column {where!r} has fields the table does not: {', '.join(extra)}"
            )
        return pa.StructArray.from_arrays(
            children, fields=list(target_type), mask=arr.is_null() if arr.null_count else None
        )
    if isinstance(target, ArrayType):
        if not (
            pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_list_view(arr.type)
        ):
            raise _mismatch(where, target, arr.type)
        if not pa.types.is_list(arr.type):
            arr = arr.cast(pa.list_(arr.type.value_type))
        values = _conform_array(arr.values, target.element_type, f"{where}[]")
        return pa.ListArray.from_arrays(
            arr.offsets, values, type=target_type, mask=arr.is_null() if arr.null_count else None
        )
    if isinstance(target, MapType):
        if not pa.types.is_map(arr.type):
            raise _mismatch(where, target, arr.type)
        keys = _conform_array(arr.keys, target.key_type, f"{where}.key")
        items = _conform_array(arr.items, target.value_type, f"{where}.value")
        return pa.MapArray.from_arrays(
            arr.offsets, keys, items, type=target_type, mask=arr.is_null() if arr.null_count else None
        )
    try:
        source = from_arrow_type(arr.type)
    except DeltaError:
        raise _mismatch(where, target, arr.type) from None
    if not _castable(source, target, arr.type, target_type):
        raise _mismatch(where, target, arr.type)
    try:
        return arr.cast(target_type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise SchemaMismatchError(f"column {where!r}: values do not fit {target.to_json()}: {e}") from None


def _castable(
    source: DataType, target: DataType, arrow_source: pa.DataType, arrow_target: pa.DataType
) -> bool:
    if source == target:
        return True  # same Delta type, another Arrow encoding (large_string, ms timestamps, ...)
    if isinstance(source, PrimitiveType) and isinstance(target, PrimitiveType):
        return (source.name, target.name) in _SAFE_UPCASTS
    if isinstance(source, DecimalType) and isinstance(target, DecimalType):
        return (
            target.scale >= source.scale
            and target.precision - target.scale >= source.precision - source.scale
        )
    if isinstance(source, PrimitiveType) and isinstance(target, DecimalType):
        digits = {"byte": 3, "short": 5, "integer": 10, "long": 19}.get(source.name)
        return digits is not None and target.precision - target.scale >= digits
    return False


def _type_text(t: DataType) -> str:
    return t.to_json() if isinstance(t, PrimitiveType | DecimalType) else json.dumps(t.to_json())


def _mismatch(where: str, target: DataType, got: pa.DataType) -> SchemaMismatchError:
    try:
        got_text = _type_text(from_arrow_type(got))
    except DeltaError:
        got_text = str(got)
    return SchemaMismatchError(
        f"column {where!r}: the table has type {_type_text(target)}, the data has {got_text}"
    )


# --- constraints ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Constraint:
    name: str
    sql: str
    expr: Expr  # bound
    kind: str  # "CHECK constraint" or "invariant"


def table_constraints(schema: StructType, configuration: dict[str, str]) -> list[Constraint]:
    """CHECK constraints from the configuration and invariants from column metadata, bound."""
    out = []
    for key, sql in sorted(configuration.items()):
        if key.startswith("delta.constraints."):
            name = key[len("delta.constraints.") :]
            out.append(
                Constraint(name, sql, _bind(sql, schema, f"CHECK constraint {name}"), "CHECK constraint")
            )
    for f in iter_fields(schema):
        raw = f.metadata.get("delta.invariants")
        if raw is None:
            continue
        try:
            sql = json.loads(raw)["expression"]["expression"]
        except (ValueError, KeyError, TypeError):
            raise SchemaMismatchError(
                f"column {f.name!r} has an unreadable delta.invariants: {raw!r}"
            ) from None
        out.append(Constraint(f.name, sql, _bind(sql, schema, f"invariant on {f.name}"), "invariant"))
    return out


def _bind(sql: str, schema: StructType, what: str) -> Expr:
    try:
        return bind_predicate(parse_predicate(sql), schema)
    except DeltaError as e:
        raise ConstraintViolationError(f"{what} ({sql}) cannot be evaluated by deltaplane: {e}") from e


def check_constraints(table: pa.Table, schema: StructType, constraints: list[Constraint]) -> None:
    """Raise if any row violates NOT NULL, a CHECK constraint or an invariant."""
    _check_not_null(table.column, schema.fields, ())
    for c in constraints:
        result = evaluate(table, c.expr)
        bad = pc.invert(pc.fill_null(result, False))
        count = pc.sum(bad).as_py() or 0
        if count:
            example = table.filter(bad).slice(0, 1).to_pylist()[0]
            raise ConstraintViolationError(
                f"{c.kind} {c.name} ({c.sql}) is violated by {count} row{'s' if count != 1 else ''}, "
                f"for example {example}"
            )


def _check_not_null(columns, fields: tuple[StructField, ...], path: tuple[str, ...]) -> None:
    """NOT NULL on every field, nested ones counted only where their parent is not null."""
    for f in fields:
        column = columns(f.name)
        if not f.nullable and column.null_count:
            raise ConstraintViolationError(
                f"NOT NULL constraint violated for column {'.'.join((*path, f.name))!r}: "
                f"{column.null_count} null value{'s' if column.null_count != 1 else ''}"
            )
        if isinstance(f.type, StructType) and len(column):
            present = column.filter(pc.is_valid(column)) if column.null_count else column
            _check_not_null(lambda name, c=present: pc.struct_field(c, name), f.type.fields, (*path, f.name))
