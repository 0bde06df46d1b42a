"""Binding a parsed predicate to a table schema: resolve columns, type every literal.

Column names resolve as Spark resolves them (exact first, then case-insensitively, nested with
dots). Untyped literals take the type of the column they are compared with, so
``date = '2026-01-01'`` compares dates and ``ts > '2026-01-01 10:00:00'`` compares instants (a
zone-less timestamp string is read as UTC). A literal that cannot become that type is an error
that names the column, rather than a comparison that is silently always false.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal, InvalidOperation

from deltaplane.engine.errors import InvalidPredicateError
from deltaplane.engine.expressions import tree
from deltaplane.engine.schema import DataType, DecimalType, PrimitiveType, StructType

_INT_RANGES = {
    "byte": (-(2**7), 2**7 - 1),
    "short": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "long": (-(2**63), 2**63 - 1),
}
DOUBLE = PrimitiveType("double")


def bind(expr: tree.Expr, schema: StructType) -> tree.Expr:
    """A copy of ``expr`` with resolved, typed columns and typed literals.

    Parsed predicates nest at most ``parser.MAX_NESTING`` levels; a tree built in Python can be
    deeper, and one too deep to walk is an input error, never a ``RecursionError``."""
    try:
        return _Binder(schema).bind(expr)
    except RecursionError:
        raise InvalidPredicateError(
            f"the {type(expr).__name__} expression nests too deeply to bind (at most "
            "parser.MAX_NESTING levels of NOT, CASE, calls or parentheses are parsed)"
        ) from None


def bind_predicate(expr: tree.Expr, schema: StructType) -> tree.Expr:
    """``bind`` for a filter or condition: its value must be a boolean (``delete("price")`` on a
    numeric column is a mistake, refused before any file is read)."""
    return require_condition(bind(expr, schema))


def require_condition(bound: tree.Expr) -> tree.Expr:
    """``bound`` unless its type is known and not boolean."""
    dtype = _type_of(bound)
    if dtype is not None and dtype != PrimitiveType("boolean"):
        raise InvalidPredicateError(
            f"{bound} is not a condition: its values are of type {dtype.to_json()}, not boolean"
        )
    return bound


def resolve_column(schema: StructType, path: tuple[str, ...]) -> tree.Column:
    current: DataType = schema
    resolved = []
    for i, part in enumerate(path):
        if not isinstance(current, StructType):
            raise InvalidPredicateError(f"column {'.'.join(path)!r}: {'.'.join(resolved)!r} is not a struct")
        f = current.find(part)
        if f is None:
            where = f" in {'.'.join(resolved)!r}" if i else ""
            known = ", ".join(current.names) or "(none)"
            raise InvalidPredicateError(
                f"unknown column {'.'.join(path)!r}: no field {part!r}{where} (columns: {known})"
            )
        resolved.append(f.name)
        current = f.type
    return tree.Column(tuple(resolved), current)


class _Binder:
    def __init__(self, schema: StructType):
        self.schema = schema
        self._columns: dict[tuple[str, ...], tree.Column] = {}  # a long OR names one column 20,000 times

    def bind(self, expr: tree.Expr) -> tree.Expr:
        if isinstance(expr, tree.Column):
            bound = self._columns.get(expr.path)
            if bound is None:
                bound = self._columns[expr.path] = resolve_column(self.schema, expr.path)
            return bound
        if isinstance(expr, tree.Literal):
            if expr.dtype is None and isinstance(expr.value, bool):
                return tree.Literal(expr.value, PrimitiveType("boolean"))
            return expr
        if isinstance(expr, tree.And | tree.Or):
            # Nested ANDs in an AND (a tree built in Python as pairs) become one n-ary node,
            # walked with an explicit stack: any length binds.
            kind, items, stack = type(expr), [], [expr]
            while stack:
                node = stack.pop()
                if type(node) is kind:
                    stack.extend(reversed(node.items))
                else:
                    items.append(self.bind(node))
            bound = kind(tuple(items))
            return equalities_as_in(bound) if kind is tree.Or else bound
        if isinstance(expr, tree.Not):
            return tree.Not(self.bind(expr.child))
        if isinstance(expr, tree.IsNull):
            return tree.IsNull(self.bind(expr.child), expr.negated)
        if isinstance(expr, tree.Comparison):
            left, right = self.bind(expr.left), self.bind(expr.right)
            left_type, right_type = _type_of(left), _type_of(right)
            if isinstance(right, tree.Literal) and right.dtype is None and left_type is not None:
                right = coerce_literal(right.value, left_type, left)
            elif isinstance(left, tree.Literal) and left.dtype is None and right_type is not None:
                left = coerce_literal(left.value, right_type, right)
            return tree.Comparison(expr.op, left, right)
        if isinstance(expr, tree.In):
            child = self.bind(expr.child)
            target = _type_of(child)
            values = tuple(
                coerce_literal(v.value, target, child) if target is not None and v.dtype is None else v
                for v in expr.values
            )
            return tree.In(child, values, expr.negated)
        if isinstance(expr, tree.Like):
            child = self.bind(expr.child)
            if _type_of(child) != PrimitiveType("string"):
                raise InvalidPredicateError(f"LIKE needs a string column, {child} is not one")
            return tree.Like(child, expr.pattern, expr.negated)
        if isinstance(expr, tree.Cast):
            child = self.bind(expr.child)
            if isinstance(child, tree.Literal):
                return coerce_literal(child.value, expr.dtype, f"CAST(... AS {expr.dtype.to_json()})")
            return tree.Cast(child, expr.dtype)
        if isinstance(expr, tree.BinaryOp):
            left, right = self.bind(expr.left), self.bind(expr.right)
            if expr.op == "||":
                left, right = _as_string(left), _as_string(right)
            else:
                left, right = _align_literals(left, right, f"{expr}")
            return self._typed(tree.BinaryOp(expr.op, left, right))
        if isinstance(expr, tree.Func):
            return self._bind_function(expr)
        if isinstance(expr, tree.Case):
            branches = [(self.bind(c), self.bind(v)) for c, v in expr.branches]
            default = self.bind(expr.default) if expr.default is not None else None
            values = _align_all(
                [v for _, v in branches] + ([default] if default is not None else []), str(expr)
            )
            branches = [(c, v) for (c, _), v in zip(branches, values, strict=False)]
            default = values[-1] if default is not None else None
            return self._typed(tree.Case(tuple(branches), default))
        raise InvalidPredicateError(f"cannot bind expression node {type(expr).__name__}")

    def _bind_function(self, expr: tree.Func) -> tree.Expr:
        name = expr.name
        if name == "current_timestamp":
            return tree.Literal(dt.datetime.now(dt.UTC), PrimitiveType("timestamp"))
        if name == "current_date":
            return tree.Literal(dt.datetime.now(dt.UTC).date(), PrimitiveType("date"))
        args = [self.bind(a) for a in expr.args]
        if name in ("coalesce", "greatest", "least", "nullif"):
            args = _align_all(args, str(expr))
        elif name == "if" and len(args) == 3:
            args = [args[0], *_align_all(args[1:], str(expr))]
        elif name == "concat":
            args = [_as_string(a) for a in args]
        else:
            args = [_default_typed(a) for a in args]
        return self._typed(tree.Func(name, tuple(args)))

    def _typed(self, expr: tree.Expr) -> tree.Expr:
        """Set the node's type from what Arrow computes for it (its promotion rules are ours)."""
        from dataclasses import replace

        from deltaplane.engine.expressions.arrow import result_type

        return replace(expr, dtype=result_type(expr, self.schema))


def equalities_as_in(expr: tree.Or) -> tree.Expr:
    """``c = 1 OR c = 2 OR ...`` (bound) as ``c IN (1, 2, ...)``: the same value for every row
    under SQL's three-valued logic (and NaN equal to NaN, as IN compares), but one membership
    test instead of one comparison per term, for row filters and for skipping alike (a
    20,000-term OR of ids). Equalities of one column with literals of one type are merged where
    the first of them stood; everything else keeps its place."""
    equalities = [_equality(item) for item in expr.items]
    groups: dict[tuple, list[tree.Literal]] = {}
    for found in equalities:
        if found is not None:
            groups.setdefault(found[0], []).append(found[2])
    if all(len(values) < 2 for values in groups.values()):
        return expr
    out: list[tree.Expr] = []
    placed: set[tuple] = set()
    for item, found in zip(expr.items, equalities, strict=True):
        if found is None or len(groups[found[0]]) < 2:
            out.append(item)
        elif found[0] not in placed:
            placed.add(found[0])
            out.append(tree.In(found[1], tuple(groups[found[0]])))
    return out[0] if len(out) == 1 else tree.Or(tuple(out))


def _equality(item: tree.Expr) -> tuple[tuple, tree.Column, tree.Literal] | None:
    """For ``column = literal`` with a typed non-null literal: ((column path, literal type),
    the column, the literal); None for anything else."""
    if not isinstance(item, tree.Comparison) or item.op != "=":
        return None
    column, literal = item.left, item.right
    if isinstance(column, tree.Literal):
        column, literal = literal, column
    if not (isinstance(column, tree.Column) and isinstance(literal, tree.Literal)):
        return None
    if literal.value is None or literal.dtype is None:
        return None
    return (column.path, literal.dtype), column, literal


def _type_of(expr: tree.Expr) -> DataType | None:
    if isinstance(expr, tree.Column | tree.Cast | tree.Literal | tree.BinaryOp | tree.Func | tree.Case):
        return expr.dtype
    return PrimitiveType("boolean")


def _default_typed(expr: tree.Expr) -> tree.Expr:
    """An untyped literal with the type its Python value suggests (1 -> long, 'x' -> string)."""
    if not isinstance(expr, tree.Literal) or expr.dtype is not None or expr.value is None:
        return expr
    value = expr.value
    if isinstance(value, bool):
        return tree.Literal(value, PrimitiveType("boolean"))
    if isinstance(value, int):
        return coerce_literal(value, PrimitiveType("long"), str(value))
    if isinstance(value, float):
        return tree.Literal(value, DOUBLE)
    if isinstance(value, Decimal):
        return coerce_literal(value, DecimalType(1, 0), str(value))
    if isinstance(value, str):
        return tree.Literal(value, PrimitiveType("string"))
    return expr


def _align_literals(left: tree.Expr, right: tree.Expr, where: str) -> tuple[tree.Expr, tree.Expr]:
    lt, rt = _type_of(left), _type_of(right)
    if isinstance(left, tree.Literal) and left.dtype is None and rt is not None:
        left = coerce_literal(left.value, rt, where) if left.value is not None else tree.Literal(None, rt)
    elif isinstance(right, tree.Literal) and right.dtype is None and lt is not None:
        right = coerce_literal(right.value, lt, where) if right.value is not None else tree.Literal(None, lt)
    return _default_typed(left), _default_typed(right)


def _align_all(items: list[tree.Expr], where: str) -> list[tree.Expr]:
    """Untyped literals take the type of the first typed item (``coalesce(x, 0)``)."""
    target = next((_type_of(i) for i in items if not (isinstance(i, tree.Literal) and i.dtype is None)), None)
    out = []
    for item in items:
        if isinstance(item, tree.Literal) and item.dtype is None and target is not None:
            item = (
                coerce_literal(item.value, target, where)
                if item.value is not None
                else tree.Literal(None, target)
            )
        out.append(_default_typed(item))
    return out


def _as_string(expr: tree.Expr) -> tree.Expr:
    if isinstance(expr, tree.Literal) and expr.dtype is None:
        return tree.Literal(None if expr.value is None else str(expr.value), PrimitiveType("string"))
    if _type_of(expr) != PrimitiveType("string"):
        return tree.Cast(expr, PrimitiveType("string"))
    return expr


def coerce_literal(value, dtype: DataType, target: object) -> tree.Literal:
    """A literal of ``dtype`` (or of a wider numeric type when the value does not fit exactly);
    ``target`` (what it is compared with) is only formatted into an error message.

    Long because it is one dispatch over Delta's primitive types, a short branch
    per type family, read as a table of conversions.
    """
    if value is None:
        return tree.Literal(None, dtype)

    def bad(why: str = "") -> InvalidPredicateError:
        extra = f": {why}" if why else ""
        return InvalidPredicateError(
            f"literal {value!r} cannot be compared with {target} of type {dtype.to_json()}{extra}"
        )

    if isinstance(dtype, DecimalType):
        try:
            number = Decimal(str(value)) if not isinstance(value, Decimal) else value
        except InvalidOperation:
            raise bad() from None
        if not number.is_finite():
            return tree.Literal(float(number), DOUBLE)
        # A decimal type holding both the column's values and the literal exactly.
        _, digits, exponent = number.as_tuple()
        literal_scale = max(-exponent, 0) if isinstance(exponent, int) else 0
        literal_integer_digits = max(len(digits) - literal_scale, 1)
        scale = max(dtype.scale, literal_scale)
        precision = max(dtype.precision - dtype.scale, literal_integer_digits) + scale
        if precision > 38:
            return tree.Literal(float(number), DOUBLE)
        return tree.Literal(number, DecimalType(precision, scale))
    if not isinstance(dtype, PrimitiveType):
        raise bad("only primitive columns can be compared with literals")
    name = dtype.name
    try:
        if name in _INT_RANGES:
            if isinstance(value, bool):
                raise bad()
            if isinstance(value, str):
                value = Decimal(value.strip())
            if isinstance(value, float | Decimal) and value != int(value):
                return tree.Literal(float(value), DOUBLE)
            number = int(value)
            low, high = _INT_RANGES[name]
            if not low <= number <= high:
                # Out of the column's range: compare as a wider integer.
                return (
                    tree.Literal(number, PrimitiveType("long"))
                    if _in_long(number)
                    else tree.Literal(float(number), DOUBLE)
                )
            return tree.Literal(number, dtype)
        if name in ("float", "double"):
            if isinstance(value, bool):
                raise bad()
            return tree.Literal(float(value), dtype)
        if name == "string":
            return tree.Literal(value if isinstance(value, str) else str(value), dtype)
        if name == "boolean":
            if isinstance(value, bool):
                return tree.Literal(value, dtype)
            if isinstance(value, str) and value.strip().lower() in ("true", "false"):
                return tree.Literal(value.strip().lower() == "true", dtype)
            raise bad()
        if name == "date":
            if isinstance(value, dt.datetime):
                return tree.Literal(value.date(), dtype)
            if isinstance(value, dt.date):
                return tree.Literal(value, dtype)
            if isinstance(value, str):
                return tree.Literal(
                    dt.date.fromisoformat(value.strip()[:10])
                    if len(value.strip()) >= 10
                    else dt.date.fromisoformat(value),
                    dtype,
                )
            raise bad()
        if name in ("timestamp", "timestamp_ntz"):
            stamp = _timestamp(value)
            if name == "timestamp":
                stamp = stamp.replace(tzinfo=dt.UTC) if stamp.tzinfo is None else stamp.astimezone(dt.UTC)
            elif stamp.tzinfo is not None:
                stamp = stamp.astimezone(dt.UTC).replace(tzinfo=None)
            return tree.Literal(stamp, dtype)
        if name == "binary":
            if isinstance(value, bytes):
                return tree.Literal(value, dtype)
            if isinstance(value, str):
                return tree.Literal(value.encode("utf-8"), dtype)
            raise bad()
    except InvalidOperation:
        raise bad("not a number") from None
    except (ValueError, TypeError, OverflowError) as e:
        raise bad(str(e)) from None
    raise bad()


def _in_long(number: int) -> bool:
    low, high = _INT_RANGES["long"]
    return low <= number <= high


def _timestamp(value) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day)
    if isinstance(value, str):
        return dt.datetime.fromisoformat(value.strip())
    raise TypeError(f"not a timestamp: {value!r}")
