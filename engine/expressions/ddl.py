"""Column lists in SQL DDL (``"id BIGINT NOT NULL, fare DOUBLE, s STRUCT<a: INT>"``) as a Delta
schema: what a DAG author writes in ``schema=`` / ``schema:`` and Spark's ``--schema`` takes.

Parsed by sqlglot in the Spark dialect, so the spelling is Spark SQL's: ``INT``/``INTEGER``,
``BIGINT``/``LONG``, ``DECIMAL(p, s)``, ``TIMESTAMP`` (with time zone, Delta's ``timestamp``),
``TIMESTAMP_NTZ``, ``ARRAY<...>``, ``MAP<K, V>``, ``STRUCT<name: TYPE, ...>``; backquoted
names may hold any character; ``NOT NULL`` and ``COMMENT '...'`` are kept.
"""

from __future__ import annotations

from deltaplane.engine.errors import SchemaError
from deltaplane.engine.schema import (
    ArrayType,
    DataType,
    DecimalType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
)

_PRIMITIVES = {
    "BIGINT": "long",
    "INT": "integer",
    "MEDIUMINT": "integer",
    "SMALLINT": "short",
    "TINYINT": "byte",
    "DOUBLE": "double",
    "FLOAT": "float",
    "BOOLEAN": "boolean",
    "TEXT": "string",
    "VARCHAR": "string",
    "CHAR": "string",
    "NCHAR": "string",
    "NVARCHAR": "string",
    "BINARY": "binary",
    "VARBINARY": "binary",
    "DATE": "date",
    "TIMESTAMPTZ": "timestamp",
    "TIMESTAMPLTZ": "timestamp",
    "TIMESTAMP": "timestamp",
    "TIMESTAMPNTZ": "timestamp_ntz",
}


def parse_ddl(text: str) -> StructType:
    """The Delta schema of a DDL column list; ``SchemaError`` naming what does not parse."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError

    if not isinstance(text, str) or not text.strip():
        raise SchemaError(f"a schema in DDL is a column list such as 'id BIGINT, name STRING', got {text!r}")
    try:
        create = sqlglot.parse_one(f"CREATE TABLE t ({text})", read="spark")
    except ParseError as e:
        raise SchemaError(f"the schema {text!r} is not a DDL column list: {_first_error(e)}") from None
    schema = create.this if isinstance(create, exp.Create) else None
    columns = schema.expressions if isinstance(schema, exp.Schema) else []
    if not columns or not all(isinstance(c, exp.ColumnDef) for c in columns):
        raise SchemaError(f"the schema {text!r} is not a DDL column list (name TYPE, ...)")
    return StructType(tuple(_field(c, text) for c in columns))


def _first_error(error) -> str:
    details = getattr(error, "errors", None) or []
    if details:
        first = details[0]
        return f"{first.get('description')} near {first.get('highlight')!r}"
    return str(error).splitlines()[0]


def _field(column, text: str) -> StructField:
    from sqlglot import exp

    kind = column.args.get("kind")
    if kind is None:
        raise SchemaError(f"column {column.name!r} of the schema {text!r} has no type")
    nullable, metadata = True, {}
    for constraint in column.args.get("constraints") or []:
        found = constraint.args.get("kind")
        if isinstance(found, exp.NotNullColumnConstraint):
            nullable = bool(found.args.get("allow_null"))
        elif isinstance(found, exp.CommentColumnConstraint):
            metadata["comment"] = found.this.name
        else:
            raise SchemaError(
                f"column {column.name!r} of the schema {text!r}: only NOT NULL and COMMENT are "
                f"understood here, not {constraint.sql('spark')!r}"
            )
    return StructField(column.name, _type(kind, column.name, text), nullable, metadata)


def _type(kind, name: str, text: str) -> DataType:
    from sqlglot import exp

    t = kind.this
    args = kind.expressions
    if t == exp.DataType.Type.DECIMAL:
        params = [int(p.this.name) for p in args] if args else [10, 0]
        if len(params) == 1:
            params.append(0)
        return DecimalType(params[0], params[1])
    if t == exp.DataType.Type.ARRAY:
        return ArrayType(_type(args[0], name, text), True)
    if t == exp.DataType.Type.MAP:
        return MapType(_type(args[0], name, text), _type(args[1], name, text), True)
    if t == exp.DataType.Type.STRUCT:
        return StructType(tuple(_field(c, text) for c in args))
    primitive = _PRIMITIVES.get(t.name)
    if primitive is None:
        raise SchemaError(f"column {name!r} of the schema {text!r}: {kind.sql('spark')} is not a Delta type")
    return PrimitiveType(primitive)
