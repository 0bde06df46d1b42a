"""Column values on write: the values a table defines for its own columns.

Three Delta features make a table, not the writer, responsible for some column values. They are
declared in the column's field metadata and honoured by every write path (append, overwrite and
replaceWhere, CREATE ... AS, MERGE inserts and updates, UPDATE, staged/Spark task writes) through
one ``ColumnValues`` object built from the table schema:

* **generated columns** (``delta.generationExpression``, SQL text; feature ``generatedColumns``):
  computed when the column is missing from the data; when supplied, every row must equal the
  expression (null-safe, as Delta Spark's ``(col <=> expr)`` constraint), else the write is refused
  naming the column, the expression and a bad row. An UPDATE or MERGE update that changes a column
  the expression reads recomputes the generated column.
* **column defaults** (``CURRENT_DEFAULT``, SQL text; feature ``allowColumnDefaults``, which must
  be asked for with ``delta.feature.allowColumnDefaults=supported``): filled when the column is
  missing from inserted data.
* **identity columns** (``delta.identity.start``, ``.step``, ``.allowExplicitInsert``,
  ``.highWaterMark``; feature ``identityColumns``): a BIGINT column whose missing values are
  ``start + k * step`` past the high-water mark; the new high-water mark is written in the same
  commit's ``metaData`` (tagged ``delta.identity.schemaUpdate`` in ``commitInfo.tags``, as Delta
  Spark does). ``GENERATED ALWAYS`` (allowExplicitInsert=false) refuses supplied values; ``BY
  DEFAULT`` takes them and, as Delta Spark, supplied values do not move the high-water mark.
  Identity columns cannot be updated.

  A distributed write (Spark tasks, any ``write_files`` of a staged write) assigns identity values
  without talking between tasks: the plan fixes the high-water mark ``hwm`` and task ``p`` hands
  out ``hwm + step * (p * IDENTITY_BLOCK + i + 1)`` for its ``i``-th row (``start + step * (p *
  IDENTITY_BLOCK + i)`` when no value was ever assigned), so tasks never collide and a retried task
  attempt repeats its own values only. A task that would need more than ``IDENTITY_BLOCK`` values
  is refused (repartition the write). The commit sets the high-water mark to the largest value
  (smallest, for a negative step) its files actually hold, in the same commit. Values are unique
  and move away from the start with every write, but are not contiguous: Delta's identity
  semantics promise no more (Delta Spark leaves gaps too).

Expressions are parsed and evaluated by the engine's own SQL expression code (sqlglot to a tree,
evaluated with Arrow); nothing in them is ever executed as code. An expression deltaplane cannot
evaluate is refused when the table is created (and, for a table made elsewhere, on the first write).

Declaring columns on create: put the keys in the field metadata of the ``pyarrow.Schema`` (or of a
``StructType``), or use :func:`generated_column`, :func:`identity_column` and
:func:`default_column`, which return ``pyarrow.Field`` objects carrying them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.enforcement import conform_table
from deltaplane.engine.errors import (
    ConstraintViolationError,
    DeltaError,
    InvalidArgumentError,
    SchemaError,
    SchemaMismatchError,
)
from deltaplane.engine.expressions.arrow import evaluate
from deltaplane.engine.expressions.bind import bind
from deltaplane.engine.expressions.parser import parse_expression
from deltaplane.engine.expressions.tree import Expr, Func, walk
from deltaplane.engine.expressions.tree import columns as expr_columns
from deltaplane.engine.schema import (
    PrimitiveType,
    StructField,
    StructType,
    from_arrow_schema,
    from_arrow_type,
    to_arrow_type,
)

GENERATION_EXPRESSION = "delta.generationExpression"
CURRENT_DEFAULT = "CURRENT_DEFAULT"
IDENTITY_START = "delta.identity.start"
IDENTITY_STEP = "delta.identity.step"
IDENTITY_ALLOW_EXPLICIT_INSERT = "delta.identity.allowExplicitInsert"
IDENTITY_HIGH_WATER_MARK = "delta.identity.highWaterMark"
_IDENTITY_KEYS = (IDENTITY_START, IDENTITY_STEP, IDENTITY_ALLOW_EXPLICIT_INSERT)
DECLARATION_KEYS = (GENERATION_EXPRESSION, CURRENT_DEFAULT, *_IDENTITY_KEYS, IDENTITY_HIGH_WATER_MARK)
# commitInfo tag Delta Spark puts on a commit whose metaData only moves identity high-water marks.
IDENTITY_SCHEMA_UPDATE_TAG = "delta.identity.schemaUpdate"

_LONG = PrimitiveType("long")
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
# Rows one task of a distributed write may give identity values: task p owns the values
# p * IDENTITY_BLOCK .. (p + 1) * IDENTITY_BLOCK - 1 steps past the planned high-water mark.
IDENTITY_BLOCK = 1 << 28
# Functions whose value changes between evaluations: not allowed in a generation expression.
_NONDETERMINISTIC = frozenset({"current_timestamp", "current_date"})


# --- declaring columns ----------------------------------------------------------------------------


def generated_column(name: str, type: pa.DataType, expression: str, *, nullable: bool = True) -> pa.Field:
    """A column computed from others: ``generated_column("day", pa.date32(), "CAST(ts AS DATE)")``
    (Delta Spark's ``GENERATED ALWAYS AS (expression)``)."""
    return pa.field(name, type, nullable=nullable, metadata={GENERATION_EXPRESSION: expression})


def identity_column(name: str, *, start: int = 1, step: int = 1, always: bool = True) -> pa.Field:
    """A BIGINT identity column: ``always=True`` is ``GENERATED ALWAYS AS IDENTITY`` (supplied
    values refused), ``False`` is ``GENERATED BY DEFAULT AS IDENTITY``."""
    return pa.field(
        name,
        pa.int64(),
        metadata={
            IDENTITY_START: str(start),
            IDENTITY_STEP: str(step),
            IDENTITY_ALLOW_EXPLICIT_INSERT: "false" if always else "true",
        },
    )


def default_column(name: str, type: pa.DataType, default: str, *, nullable: bool = True) -> pa.Field:
    """A column with a default (SQL text, e.g. ``"'unknown'"`` or ``"0"``); the table must ask for
    ``delta.feature.allowColumnDefaults=supported``."""
    return pa.field(name, type, nullable=nullable, metadata={CURRENT_DEFAULT: default})


def schema_from_arrow(schema: pa.Schema) -> StructType:
    """``from_arrow_schema`` keeping the column-value declarations found in Arrow field metadata
    (everything else in Arrow metadata is not Delta's and is dropped, as before)."""
    out = from_arrow_schema(schema)
    fields = []
    for arrow_field, f in zip(schema, out.fields, strict=True):
        raw = arrow_field.metadata or {}
        declared = {}
        for key in DECLARATION_KEYS:
            value = raw.get(key.encode())
            if value is not None:
                declared[key] = value.decode()
        fields.append(StructField(f.name, f.type, f.nullable, {**f.metadata, **declared}) if declared else f)
    return StructType(tuple(fields))


def normalize_declarations(schema: StructType) -> StructType:
    """The schema with declarations stored as Delta Spark stores them: identity numbers as JSON
    integers and ``allowExplicitInsert`` as a JSON boolean (Arrow metadata only holds strings)."""
    fields = []
    for f in schema.fields:
        metadata = dict(f.metadata)
        for key in (IDENTITY_START, IDENTITY_STEP, IDENTITY_HIGH_WATER_MARK):
            if key in metadata:
                metadata[key] = _integer(metadata[key], f.name, key)
        if IDENTITY_ALLOW_EXPLICIT_INSERT in metadata:
            metadata[IDENTITY_ALLOW_EXPLICIT_INSERT] = _boolean(
                metadata[IDENTITY_ALLOW_EXPLICIT_INSERT], f.name
            )
        for key in (GENERATION_EXPRESSION, CURRENT_DEFAULT):
            if key in metadata and (not isinstance(metadata[key], str) or not metadata[key].strip()):
                raise SchemaError(
                    f"column {f.name!r}: {key} must be non-empty SQL text, got {metadata[key]!r}"
                )
        fields.append(StructField(f.name, f.type, f.nullable, metadata) if metadata != f.metadata else f)
    return StructType(tuple(fields))


def _integer(value: Any, column: str, key: str) -> int:
    if isinstance(value, bool):
        raise SchemaError(f"column {column!r}: {key} must be an integer, got {value!r}")
    try:
        number = int(value) if isinstance(value, int) else int(str(value).strip())
    except ValueError:
        raise SchemaError(f"column {column!r}: {key} must be an integer, got {value!r}") from None
    if not _LONG_MIN <= number <= _LONG_MAX:
        raise SchemaError(f"column {column!r}: {key}={number} does not fit a BIGINT")
    return number


def _boolean(value: Any, column: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise SchemaError(
            f"column {column!r}: {IDENTITY_ALLOW_EXPLICIT_INSERT} must be true or false, got {value!r}"
        )
    return text == "true"


def check_declarations(
    schema: StructType,
    *,
    partition_columns: Iterable[str] = (),
    defaults_allowed: bool,
    table: str = "",
) -> None:
    """Refuse declarations deltaplane (or Delta) cannot honour: bad or unsupported expressions,
    identity columns that are not BIGINT, defaults without the allowColumnDefaults feature, ..."""
    ColumnValues(schema, table=table)  # parses and binds every expression, checks identity specs
    where = f" of {table}" if table else ""
    partitions = {p.lower() for p in partition_columns}
    for f in schema.fields:
        if CURRENT_DEFAULT in f.metadata and not defaults_allowed:
            raise SchemaError(
                f"column {f.name!r}{where} has a default ({f.metadata[CURRENT_DEFAULT]}), which needs the "
                "allowColumnDefaults table feature: set delta.feature.allowColumnDefaults=supported"
            )
        if _is_identity(f) and f.name.lower() in partitions:
            raise SchemaError(f"identity column {f.name!r}{where} cannot be a partition column")


def _is_identity(f: StructField) -> bool:
    return any(k in f.metadata for k in _IDENTITY_KEYS)


# --- the values ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Generated:
    field: StructField
    sql: str
    expr: Expr
    reads: frozenset[str]  # top-level columns the expression reads


@dataclass(frozen=True)
class _Default:
    field: StructField
    sql: str
    expr: Expr


@dataclass
class _Identity:
    field: StructField
    start: int
    step: int
    allow_explicit: bool
    high_water_mark: int | None

    def next_value(self) -> int:
        return self.start if self.high_water_mark is None else self.high_water_mark + self.step


class ColumnValues:
    """The generated, default and identity columns of one table schema, for one write.

    ``on_high_water_marks`` (given by a committing write) receives the schema with the identity
    high-water marks this write moved, after each batch that assigned identity values; without
    it, a write that would have to assign identity values is refused, unless ``task`` says which
    task of a distributed write this is: then identity values come from that task's block
    (``IDENTITY_BLOCK`` values past the high-water mark in ``schema``, see the module docstring)
    and the commit moves the mark (``written_high_water_marks``).
    """

    def __init__(
        self,
        schema: StructType,
        *,
        table: str = "",
        on_high_water_marks: Callable[[StructType], None] | None = None,
        task: int | None = None,
    ):
        if task is not None and (isinstance(task, bool) or not isinstance(task, int) or task < 0):
            raise InvalidArgumentError(f"a distributed write's task number must be an int >= 0, got {task!r}")
        if task is not None and on_high_water_marks is not None:
            raise InvalidArgumentError("a write assigns identity values by task block or by commit, not both")
        self.schema = schema
        self.table = table
        self._on_high_water_marks = on_high_water_marks
        self._task = task
        self._block_used: dict[str, int] = {}  # identity values this task handed out, per column
        self._where = f" of {table}" if table else ""
        self.generated: dict[str, _Generated] = {}
        self.defaults: dict[str, _Default] = {}
        self.identity: dict[str, _Identity] = {}
        for f in schema.fields:
            self._declare(f)
        for g in self.generated.values():
            for name in g.reads:
                if name in self.generated or name in self.identity:
                    kind = "generated" if name in self.generated else "identity"
                    raise SchemaError(
                        f"generated column {g.field.name!r}{self._where} ({g.sql}) reads {kind} column "
                        f"{name!r}: a generation expression may only read ordinary columns"
                    )

    @property
    def empty(self) -> bool:
        return not (self.generated or self.defaults or self.identity)

    def computes(self, name: str) -> bool:
        """Whether the table supplies a value for column ``name`` when the data lacks it."""
        return name in self.generated or name in self.defaults or name in self.identity

    # --- definitions ----------------------------------------------------------------------------

    def _declare(self, f: StructField) -> None:
        metadata = f.metadata
        kinds = [
            k
            for k, present in (
                ("a generation expression", GENERATION_EXPRESSION in metadata),
                ("a default", CURRENT_DEFAULT in metadata),
                ("an identity", _is_identity(f)),
            )
            if present
        ]
        if len(kinds) > 1:
            raise SchemaError(
                f"column {f.name!r}{self._where} has {' and '.join(kinds)}: it may have only one"
            )
        if GENERATION_EXPRESSION in metadata:
            sql = str(metadata[GENERATION_EXPRESSION])
            expr = self._bind(sql, f, "generation expression")
            for node in walk(parse_expression(sql)):  # before binding turns now() into a literal
                if isinstance(node, Func) and node.name in _NONDETERMINISTIC:
                    raise SchemaError(
                        f"generated column {f.name!r}{self._where}: {sql} is not deterministic "
                        f"({node.name}()); a generation expression must give the same value every time"
                    )
            self._check_result_type(expr, f, sql, "generation expression")
            reads = frozenset(c.path[0] for c in expr_columns(expr))
            self.generated[f.name] = _Generated(f, sql, expr, reads)
        elif CURRENT_DEFAULT in metadata:
            sql = str(metadata[CURRENT_DEFAULT])
            expr = self._bind(sql, f, "default")
            if expr_columns(expr):
                raise SchemaError(
                    f"the default of column {f.name!r}{self._where} ({sql}) reads columns; a default "
                    "must be a constant expression"
                )
            self._check_result_type(expr, f, sql, "default")
            self.defaults[f.name] = _Default(f, sql, expr)
        elif _is_identity(f):
            missing = [k for k in _IDENTITY_KEYS if k not in metadata]
            if missing:
                raise SchemaError(
                    f"identity column {f.name!r}{self._where} lacks {', '.join(missing)} "
                    f"(an identity column needs {', '.join(_IDENTITY_KEYS)})"
                )
            if f.type != _LONG:
                raise SchemaError(
                    f"identity column {f.name!r}{self._where} must be BIGINT (long), not {f.type.to_json()}"
                )
            step = _integer(metadata[IDENTITY_STEP], f.name, IDENTITY_STEP)
            if step == 0:
                raise SchemaError(f"identity column {f.name!r}{self._where}: the step cannot be 0")
            hwm = metadata.get(IDENTITY_HIGH_WATER_MARK)
            self.identity[f.name] = _Identity(
                f,
                _integer(metadata[IDENTITY_START], f.name, IDENTITY_START),
                step,
                _boolean(metadata[IDENTITY_ALLOW_EXPLICIT_INSERT], f.name),
                None if hwm is None else _integer(hwm, f.name, IDENTITY_HIGH_WATER_MARK),
            )

    def _bind(self, sql: str, f: StructField, what: str) -> Expr:
        try:
            return bind(parse_expression(sql), self.schema)
        except DeltaError as e:
            raise SchemaError(
                f"the {what} of column {f.name!r}{self._where} ({sql}) cannot be evaluated by deltaplane: {e}"
            ) from None

    def _check_result_type(self, expr: Expr, f: StructField, sql: str, what: str) -> None:
        """Evaluate on one all-null row: the value must cast to the column's type."""
        row = pa.table({c.name: pa.nulls(1, to_arrow_type(c.type)) for c in self.schema.fields})
        try:
            value = evaluate(row, expr)
            value.cast(to_arrow_type(f.type))
            strict = what == "generation expression"  # a default is cast, as Spark casts it
            if strict and not pa.types.is_null(value.type) and from_arrow_type(value.type) != f.type:
                # Delta Spark refuses a generation expression of another type than its column's.
                got = from_arrow_type(value.type).to_json()
                raise SchemaError(f"its values are {got}; CAST the expression to the column's type")
        except (DeltaError, pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise SchemaError(
                f"the {what} of column {f.name!r}{self._where} ({sql}) does not give a "
                f"{f.type.to_json() if isinstance(f.type, PrimitiveType) else json.dumps(f.type.to_json())} "
                f"value: {e}"
            ) from None

    # --- inserts ---------------------------------------------------------------------------------

    def insert(self, data: pa.Table | pa.RecordBatch) -> pa.Table:
        """New rows conformed to the table schema, with generated, default and identity values
        filled in where the data lacks the column, and supplied generated values checked."""
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        present = {n.lower() for n in data.schema.names}
        missing = {
            f.name for f in self.schema.fields if self.computes(f.name) and f.name.lower() not in present
        }
        for name, spec in self.identity.items():
            if name not in missing and not spec.allow_explicit:
                raise SchemaMismatchError(
                    f"column {name!r} is GENERATED ALWAYS AS IDENTITY: its values are assigned by the "
                    "table; leave it out of the data"
                )
        table = conform_table(data, self.schema, computed=missing)
        if self.empty:
            return table
        for name in [n for n in self.defaults if n in missing]:
            table = self._set(table, name, self._default(name, table.num_rows))
        assigned = [n for n in self.identity if n in missing]
        for name in assigned:
            table = self._set(table, name, self._assign_identity(name, table.num_rows))
        for name, g in self.generated.items():
            if name in missing:
                table = self._set(table, name, self._compute(g, table))
            else:
                self._check_generated(g, table)
        if assigned and table.num_rows and self._task is None:
            self._report_high_water_marks()
        return table

    def _default(self, name: str, rows: int) -> pa.Array:
        d = self.defaults[name]
        one = pa.table({"_": pa.nulls(max(rows, 1), pa.int8())})
        value = evaluate(one, d.expr, f"the default of column {name!r}")
        return value.cast(to_arrow_type(d.field.type), safe=True).slice(0, rows)

    def _assign_identity(self, name: str, rows: int) -> pa.Array:
        spec = self.identity[name]
        if self._task is not None:
            return self._assign_from_block(name, rows)
        if self._on_high_water_marks is None:
            raise SchemaMismatchError(
                f"identity column {name!r} is missing from the data and this write (a distributed or "
                "staged write) was not told which task it is, so it cannot assign identity values; "
                "write with DeltaTable.append/overwrite/merge, pass write_files(task=...), or supply "
                "the values (GENERATED BY DEFAULT only)"
            )
        if rows == 0:
            return pa.array([], pa.int64())
        first = spec.next_value()
        last = first + (rows - 1) * spec.step
        if not (_LONG_MIN <= first <= _LONG_MAX and _LONG_MIN <= last <= _LONG_MAX):
            raise ConstraintViolationError(
                f"cannot write to {self.table or 'the table'}: identity column {name!r} overflows BIGINT "
                f"assigning {rows} value(s) from {first} by {spec.step}"
            )
        spec.high_water_mark = last
        return pa.array(range(first, last + spec.step, spec.step), pa.int64())

    def _assign_from_block(self, name: str, rows: int) -> pa.Array:
        """The next ``rows`` values of this task's block (the planned mark never moves here)."""
        spec = self.identity[name]
        used = self._block_used.get(name, 0)
        if used + rows > IDENTITY_BLOCK:
            raise ConstraintViolationError(
                f"cannot write to {self.table or 'the table'}: task {self._task} of this distributed "
                f"write needs {used + rows} values for identity column {name!r}, more than the "
                f"{IDENTITY_BLOCK} one task may assign; split the data into more tasks (repartition)"
            )
        if rows == 0:
            return pa.array([], pa.int64())
        first = spec.next_value() + spec.step * (self._task * IDENTITY_BLOCK + used)
        last = first + (rows - 1) * spec.step
        if not (_LONG_MIN <= first <= _LONG_MAX and _LONG_MIN <= last <= _LONG_MAX):
            raise ConstraintViolationError(
                f"cannot write to {self.table or 'the table'}: identity column {name!r} overflows BIGINT "
                f"in task {self._task}'s block of values ({rows} value(s) from {first} by {spec.step})"
            )
        self._block_used[name] = used + rows
        return pa.array(range(first, last + spec.step, spec.step), pa.int64())

    def _report_high_water_marks(self) -> None:
        fields = []
        for f in self.schema.fields:
            spec = self.identity.get(f.name)
            moved = spec is not None and spec.high_water_mark is not None
            if moved and f.metadata.get(IDENTITY_HIGH_WATER_MARK) != spec.high_water_mark:
                f = StructField(
                    f.name, f.type, f.nullable, {**f.metadata, IDENTITY_HIGH_WATER_MARK: spec.high_water_mark}
                )
            fields.append(f)
        self.schema = StructType(tuple(fields))
        assert self._on_high_water_marks is not None
        self._on_high_water_marks(self.schema)

    def _compute(self, g: _Generated, table: pa.Table) -> pa.ChunkedArray:
        value = evaluate(table, g.expr, f"generated column {g.field.name!r}")
        try:
            return value.cast(to_arrow_type(g.field.type), safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise ConstraintViolationError(
                f"cannot write to {self.table or 'the table'}: generated column {g.field.name!r} = {g.sql} "
                f"gives values that do not fit {g.field.type.to_json()}: {e}"
            ) from None

    def _check_generated(self, g: _Generated, table: pa.Table) -> None:
        """Every supplied value must equal the expression's, null-safe (Delta's ``col <=> expr``)."""
        if table.num_rows == 0:
            return
        expected = self._compute(g, table)
        supplied = table.column(g.field.name)
        same = pc.or_kleene(
            pc.and_(supplied.is_null(), expected.is_null()),
            pc.fill_null(pc.equal(supplied, expected), False),
        )
        bad = pc.invert(same)
        count = pc.sum(bad).as_py() or 0
        if count:
            index = pc.index(bad, True).as_py()
            row = table.slice(index, 1).to_pylist()[0]
            raise ConstraintViolationError(
                f"cannot write to {self.table or 'the table'}: generated column {g.field.name!r} must equal "
                f"{g.sql}, but {count} row{'s' if count != 1 else ''} supply another value, for example "
                f"{row} (expected {expected[index].as_py()!r}); leave the column out to have it computed"
            )

    @staticmethod
    def _set(table: pa.Table, name: str, values) -> pa.Table:
        index = table.schema.get_field_index(name)
        return table.set_column(index, table.schema.field(index), values)

    # --- updates ---------------------------------------------------------------------------------

    def check_update(self, assigned: Iterable[str]) -> None:
        """Refuse assignments to identity columns (Delta Spark's rule), before anything is read."""
        for name in assigned:
            if name in self.identity:
                raise SchemaMismatchError(
                    f"cannot update identity column {name!r} of {self.table or 'the table'}: its values "
                    "are assigned by the table"
                )

    def update(self, rows: pa.Table, assigned: Iterable[str]) -> pa.Table:
        """Updated rows (full, in table order): a generated column set explicitly is checked; one
        whose inputs were set is recomputed."""
        assigned = set(assigned)
        self.check_update(assigned)
        for name, g in self.generated.items():
            if name in assigned:
                self._check_generated(g, conform_table(rows, self.schema))
            elif g.reads & assigned and rows.num_rows:
                rows = self._set(rows, name, self._compute(g, conform_table(rows, self.schema)))
        return rows


def assigned_identity_columns(schema: StructType, incoming: Iterable[str]) -> tuple[str, ...]:
    """The identity columns of ``schema`` that data with columns ``incoming`` lacks: the ones a
    write of that data assigns."""
    present = {n.lower() for n in incoming}
    return tuple(f.name for f in schema.fields if _is_identity(f) and f.name.lower() not in present)


def with_high_water_marks(schema: StructType, marks: Mapping[str, int]) -> StructType:
    """``schema`` with identity column ``name``'s high-water mark set to ``marks[name]``."""
    fields = []
    for f in schema.fields:
        if f.name in marks and f.metadata.get(IDENTITY_HIGH_WATER_MARK) != marks[f.name]:
            metadata = {**f.metadata, IDENTITY_HIGH_WATER_MARK: marks[f.name]}
            f = StructField(f.name, f.type, f.nullable, metadata)
        fields.append(f)
    return StructType(tuple(fields))


def keep_high_water_marks(schema: StructType, previous: StructType) -> StructType:
    """``schema`` in which every identity column keeps the most advanced high-water mark that the
    same column had in ``previous`` (same physical name, start and step): whatever metadata a
    commit writes (RESTORE of an older version, an ALTER, a schema overwrite), identity values
    already handed out are never handed out again. Delta Spark's RESTORE merges marks the same
    way (by physical name); a column declared anew with another start or step starts afresh."""
    before = {}
    for f in previous.fields:
        if _is_identity(f) and f.metadata.get(IDENTITY_HIGH_WATER_MARK) is not None:
            before[f.physical_name] = f
    if not before:
        return schema
    marks = {}
    for f in schema.fields:
        old = before.get(f.physical_name)
        if old is None or not _is_identity(f):
            continue
        spec = _start_and_step(f)
        if spec is None or spec != _start_and_step(old):
            continue
        step = spec[1]
        mark = _integer(old.metadata[IDENTITY_HIGH_WATER_MARK], old.name, IDENTITY_HIGH_WATER_MARK)
        ours = f.metadata.get(IDENTITY_HIGH_WATER_MARK)
        if ours is None or (mark - _integer(ours, f.name, IDENTITY_HIGH_WATER_MARK)) * step > 0:
            marks[f.name] = mark
    return with_high_water_marks(schema, marks) if marks else schema


def _start_and_step(f: StructField) -> tuple[int, int] | None:
    try:
        return _integer(f.metadata[IDENTITY_START], f.name, IDENTITY_START), _integer(
            f.metadata[IDENTITY_STEP], f.name, IDENTITY_STEP
        )
    except (KeyError, SchemaError):
        return None


def written_high_water_marks(
    schema: StructType, columns: Iterable[str], extremes: Mapping[str, tuple[int | None, int | None]]
) -> dict[str, int]:
    """New high-water marks after a distributed write: for each identity column in ``columns``,
    the value furthest from its start among those written (``extremes[name]`` is the (min, max)
    of the written values, None when nothing was written), if it is past the current mark."""
    values = ColumnValues(schema)
    marks = {}
    for name in columns:
        spec = values.identity[name]
        low, high = extremes.get(name, (None, None))
        mark = high if spec.step > 0 else low
        if mark is None:
            continue
        if spec.high_water_mark is not None and (mark - spec.high_water_mark) * spec.step <= 0:
            continue
        marks[name] = mark
    return marks


def identity_only_tag(commit_metadata: Mapping[str, Any]) -> dict[str, Any]:
    """``commit_metadata`` with Delta Spark's identity-only tag added to its ``tags``."""
    tags = dict(commit_metadata.get("tags") or {})
    tags[IDENTITY_SCHEMA_UPDATE_TAG] = "true"
    return {**commit_metadata, "tags": tags}
