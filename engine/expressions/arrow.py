"""Bound predicates to ``pyarrow.compute`` expressions, for filtering rows after a scan.

Arrow's ``and``/``or`` are Kleene (three-valued), and a filter drops rows whose predicate is
null, which is SQL's WHERE. The two places where Arrow differs from SQL are handled here:
``NOT IN`` must be null (so dropped) for a null input, and ``<=>`` is null-safe equality.
"""

from __future__ import annotations

import functools

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.errors import InvalidPredicateError
from deltaplane.engine.expressions import tree
from deltaplane.engine.schema import (
    DecimalType,
    PrimitiveType,
    from_arrow_type,
    to_arrow_schema,
    to_arrow_type,
)
from deltaplane.engine.values_to_arrow import array_from_values, empty_table, scalar


def compare(op: str, left, right, left_nan: bool = False, right_nan: bool = False):
    """``left op right`` in Spark SQL's order, on Arrow arrays, scalars or expressions alike.

    Spark orders doubles totally: NaN equals NaN and is larger than every other value, +inf
    included (Arrow, like IEEE 754, makes every comparison with NaN false except ``!=``).
    ``left_nan``/``right_nan`` say whether a side can hold NaN (is a float or double); nulls
    stay null (Kleene logic). One rule for row filters and for skipping on min/max bounds.
    """
    if op == ">":
        return compare("<", right, left, right_nan, left_nan)
    if op == ">=":
        return compare("<=", right, left, right_nan, left_nan)
    if op == "!=":
        return pc.invert(compare("=", left, right, left_nan, right_nan))
    if op == "=":
        equal = pc.equal(left, right)
        if left_nan and right_nan:
            equal = pc.or_kleene(equal, pc.and_kleene(pc.is_nan(left), pc.is_nan(right)))
        return equal
    if op not in ("<", "<="):
        raise InvalidPredicateError(f"unknown comparison {op!r}")
    base = pc.less(left, right) if op == "<" else pc.less_equal(left, right)
    if not right_nan:
        return base  # NaN on the left is never below a number: IEEE says false already
    # ``x < NaN`` for every number x, ``NaN <= NaN``; a null left side stays null.
    below_nan = pc.invert(pc.is_nan(left)) if op == "<" and left_nan else pc.is_valid(left)
    return pc.or_kleene(base, pc.and_kleene(pc.is_nan(right), below_nan))


def balanced(combine, items: list):
    """``items`` joined by the binary ``combine`` as a balanced tree: a 20,000-term OR becomes an
    Arrow expression 15 levels deep, not 20,000 (Arrow binds and runs expressions recursively)."""
    while len(items) > 1:
        paired = [combine(items[i], items[i + 1]) for i in range(0, len(items) - 1, 2)]
        if len(items) % 2:
            paired.append(items[-1])
        items = paired
    return items[0]


def may_be_nan(expr: tree.Expr) -> bool:
    """Whether values of ``expr`` can be NaN (its type is float or double)."""
    return _kind(expr) in ("float", "double")


def literal_scalar(lit: tree.Literal) -> pa.Scalar:
    if lit.dtype is None:
        return pa.scalar(lit.value)
    return scalar(lit.value, to_arrow_type(lit.dtype))


def to_arrow_expression(expr: tree.Expr) -> pc.Expression:
    if isinstance(expr, tree.Column):
        return pc.field(*expr.path)
    if isinstance(expr, tree.Literal):
        return pc.scalar(literal_scalar(expr))
    if isinstance(expr, tree.Comparison):
        left, right = to_arrow_expression(expr.left), to_arrow_expression(expr.right)
        nans = may_be_nan(expr.left), may_be_nan(expr.right)
        if expr.op == "<=>":
            both_null = left.is_null() & right.is_null()
            return both_null | pc.coalesce(compare("=", left, right, *nans), pc.scalar(False))
        return compare(expr.op, left, right, *nans)
    if isinstance(expr, tree.And):
        return balanced(pc.and_kleene, [to_arrow_expression(i) for i in expr.items])
    if isinstance(expr, tree.Or):
        return balanced(pc.or_kleene, [to_arrow_expression(i) for i in expr.items])
    if isinstance(expr, tree.Not):
        return ~to_arrow_expression(expr.child)
    if isinstance(expr, tree.IsNull):
        child = to_arrow_expression(expr.child)
        return child.is_valid() if expr.negated else child.is_null()
    if isinstance(expr, tree.In):
        # SQL: NULL IN (...) is NULL, and x IN (..., NULL) is NULL when x is not listed;
        # Arrow's is_in answers false in both cases, so the nulls are put back.
        child = to_arrow_expression(expr.child)
        values = [v for v in expr.values if v.value is not None]
        typ = to_arrow_type(values[0].dtype) if values and values[0].dtype else None
        member = child.isin(array_from_values([v.value for v in values], typ))
        unknown = pc.scalar(scalar(None, pa.bool_()))
        if len(values) != len(expr.values):
            member = pc.if_else(member, pc.scalar(True), unknown)
        result = pc.if_else(child.is_valid(), member, unknown)
        return ~result if expr.negated else result
    if isinstance(expr, tree.Like):
        matched = pc.match_like(to_arrow_expression(expr.child), pattern=expr.pattern)
        return ~matched if expr.negated else matched
    if isinstance(expr, tree.Cast):
        return to_arrow_expression(expr.child).cast(to_arrow_type(expr.dtype))
    if isinstance(expr, tree.BinaryOp):
        return _binary(expr)
    if isinstance(expr, tree.Func):
        return _function(expr)
    if isinstance(expr, tree.Case):
        conditions = [pc.coalesce(to_arrow_expression(c), pc.scalar(False)) for c, _ in expr.branches]
        values = [to_arrow_expression(v) for _, v in expr.branches]
        if expr.default is not None:
            values.append(to_arrow_expression(expr.default))
        names = [f"c{i}" for i in range(len(conditions))]
        return pc.case_when(pc.make_struct(*conditions, field_names=names), *values)
    raise InvalidPredicateError(f"cannot evaluate {type(expr).__name__} on rows")


_NUMERIC = {"byte", "short", "integer", "long", "float", "double"}


def _kind(expr: tree.Expr) -> str | None:
    t = getattr(expr, "dtype", None)
    if isinstance(t, DecimalType):
        return "decimal"
    return t.name if isinstance(t, PrimitiveType) else None


def _binary(expr: tree.BinaryOp) -> pc.Expression:
    left, right = to_arrow_expression(expr.left), to_arrow_expression(expr.right)
    op = expr.op
    if op == "||":
        return pc.binary_join_element_wise(left, right, "")
    if op == "+":
        return pc.add_checked(left, right)
    if op == "-":
        return pc.subtract_checked(left, right)
    if op == "*":
        return pc.multiply_checked(left, right)
    floating = _kind(expr.left) in _NUMERIC and _kind(expr.right) in _NUMERIC
    if op == "/":
        # SQL division is never integer division: 7 / 2 = 3.5.
        if floating:
            return pc.divide_checked(
                left.cast(pa.float64(), safe=False), right.cast(pa.float64(), safe=False)
            )
        return pc.divide_checked(left, right)
    if op == "%":
        # Sign of the dividend (Java/Spark): a - b * trunc(a / b).
        quotient = pc.divide_checked(left, right)
        if _kind(expr.left) in ("float", "double") or _kind(expr.right) in ("float", "double"):
            quotient = pc.trunc(quotient)
        return pc.subtract_checked(left, pc.multiply_checked(right, quotient))
    raise InvalidPredicateError(f"unknown operator {op!r}")


def _literal_int(expr: tree.Expr, what: str) -> int:
    if not isinstance(expr, tree.Literal) or not isinstance(expr.value, int):
        raise InvalidPredicateError(f"{what} must be an integer literal")
    return int(expr.value)


def _function(expr: tree.Func) -> pc.Expression:
    name, args = expr.name, expr.args
    a = [to_arrow_expression(x) for x in args]
    simple = {
        "upper": pc.utf8_upper,
        "lower": pc.utf8_lower,
        "length": pc.utf8_length,
        "char_length": pc.utf8_length,
        "character_length": pc.utf8_length,
        "trim": pc.utf8_trim_whitespace,
        "ltrim": pc.utf8_ltrim_whitespace,
        "rtrim": pc.utf8_rtrim_whitespace,
        "abs": pc.abs_checked,
        "floor": pc.floor,
        "ceil": pc.ceil,
        "sqrt": pc.sqrt_checked,
        "exp": pc.exp,
        "ln": pc.ln_checked,
        "negate": pc.negate_checked,
        # Spark's date parts are INT (a generated column's type must equal its expression's).
        "year": lambda x: pc.year(x).cast(pa.int32()),
        "month": lambda x: pc.month(x).cast(pa.int32()),
        "day": lambda x: pc.day(x).cast(pa.int32()),
        "hour": lambda x: pc.hour(x).cast(pa.int32()),
    }
    if name in simple and len(a) == 1:
        return simple[name](a[0])
    if name == "round":
        digits = _literal_int(args[1], "round()'s scale") if len(args) > 1 else 0
        return pc.round(a[0], ndigits=digits, round_mode="half_towards_infinity")  # Spark: HALF_UP
    if name == "power" and len(a) == 2:
        return pc.power_checked(a[0].cast(pa.float64(), safe=False), a[1].cast(pa.float64(), safe=False))
    if name == "substring":
        start = _literal_int(args[1], "substring()'s position")
        begin = max(start - 1, 0)
        if len(args) > 2:
            return pc.utf8_slice_codeunits(
                a[0], start=begin, stop=begin + _literal_int(args[2], "substring()'s length")
            )
        return pc.utf8_slice_codeunits(a[0], start=begin)
    if name == "coalesce":
        return pc.coalesce(*a)
    if name == "greatest":
        largest = pc.max_element_wise(*a)
        nan_args = [(x, arg) for x, arg in zip(a, args, strict=True) if may_be_nan(arg)]
        if not nan_args:
            return largest
        # Arrow's maximum skips NaN; in Spark NaN is the largest value.
        flags = [pc.coalesce(pc.is_nan(x), pc.scalar(False)) for x, _ in nan_args]
        any_nan = functools.reduce(pc.or_kleene, flags)
        double = any(_kind(arg) == "double" for _, arg in nan_args)
        nan = scalar(float("nan"), pa.float64()).cast(pa.float64() if double else pa.float32())
        return pc.if_else(any_nan, pc.scalar(nan), largest)
    if name == "least":
        return pc.min_element_wise(*a)
    if name == "concat":
        return pc.binary_join_element_wise(*a, "")
    if name == "nullif" and len(a) == 2:
        return pc.if_else(
            pc.coalesce(compare("=", a[0], a[1], may_be_nan(args[0]), may_be_nan(args[1])), pc.scalar(False)),
            pc.scalar(None).cast(_arrow_of(args[0])),
            a[0],
        )
    if name == "if" and len(a) == 3:
        return pc.if_else(pc.coalesce(a[0], pc.scalar(False)), a[1], a[2])
    if name in ("date", "to_date") and len(a) == 1:
        return a[0].cast(pa.date32())
    raise InvalidPredicateError(f"unsupported function {name}() with {len(a)} argument(s)")


def _arrow_of(expr: tree.Expr) -> pa.DataType:
    t = getattr(expr, "dtype", None)
    return to_arrow_type(t) if t is not None else pa.null()


def result_type(expr: tree.Expr, schema):
    """The Delta type of a bound expression, as Arrow computes it on this schema's columns."""
    import pyarrow.dataset as ds

    empty = empty_table(to_arrow_schema(schema))
    _checked_size(expr)
    try:
        out = (
            ds.dataset(empty)
            .to_table(columns={"value": to_arrow_expression(expr)})
            .schema.field("value")
            .type
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise InvalidPredicateError(f"cannot evaluate {expr}: {e}") from None
    return from_arrow_type(out)


# Arrow folds a chain of one associative function (and_kleene, or_kleene) into one level per
# term when it binds an expression, recursing once per level: a 20,000-term OR handed to Arrow
# as one expression overflows the C stack (the process dies). An AND/OR of more than this many
# nodes is evaluated in groups of at most this many, the groups' results combined array by
# array (256 nodes per Arrow expression measured fastest on 3,000- and 20,000-term chains).
_GROUP = 256


def evaluate(table: pa.Table, expr: tree.Expr, where: str | None = None) -> pa.ChunkedArray:
    """The expression's value for every row of ``table``.

    Arrow's errors on the data (overflow, division by zero, a string that does not cast) become
    ``InvalidPredicateError`` naming the expression and ``where`` the rows came from (a file).
    """
    try:
        return _evaluate(table, expr)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise evaluation_error(expr, e, where) from None


def filter_rows(table: pa.Table, expr: tree.Expr, where: str | None = None) -> pa.Table:
    """The rows of ``table`` where the bound predicate ``expr`` is true (null drops the row)."""
    try:
        if _size(expr) <= _GROUP:
            return table.filter(to_arrow_expression(expr))
        return table.filter(_evaluate(table, expr))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise evaluation_error(expr, e, where) from None


def _evaluate(table: pa.Table, expr: tree.Expr) -> pa.ChunkedArray:
    import pyarrow.dataset as ds

    if _size(expr) > _GROUP:
        if isinstance(expr, tree.And | tree.Or):
            combine = pc.and_kleene if isinstance(expr, tree.And) else pc.or_kleene
            return functools.reduce(combine, (_evaluate(table, part) for part in _groups(expr)))
        if isinstance(expr, tree.Not):
            return pc.invert(_evaluate(table, expr.child))
    expression = to_arrow_expression(_checked_size(expr))
    return ds.dataset(table).to_table(columns={"value": expression}).column("value")


def _groups(expr: tree.And | tree.Or) -> list[tree.Expr]:
    """A large AND/OR as consecutive groups of its items of at most ``_GROUP`` nodes each (an
    item larger than that alone, to be split in turn)."""
    kind = type(expr)
    out: list[tree.Expr] = []
    chunk: list[tree.Expr] = []
    budget = 0
    for item in expr.items:
        size = _size(item)
        if chunk and budget + size > _GROUP - 1:  # the AND/OR node itself is one more
            out.append(kind(tuple(chunk)) if len(chunk) > 1 else chunk[0])
            chunk, budget = [], 0
        chunk.append(item)
        budget += size
    out.append(kind(tuple(chunk)) if len(chunk) > 1 else chunk[0])
    return out


# The largest expression handed to Arrow in one piece (nodes): a huge OR inside a function call
# (``coalesce(a OR b OR ..., false)``) cannot be split into groups, and from about 20,000 nodes
# Arrow's recursion overflows the C stack. Refused before that, naming the limit.
MAX_EXPRESSION_NODES = 4096


def _size(expr: tree.Expr) -> int:
    """Nodes of ``expr`` as Arrow sees them (an IN list is one membership test, whatever its
    length), counted without recursion."""
    count, stack = 0, [expr]
    while stack:
        node = stack.pop()
        count += 1
        stack.extend((node.child,) if isinstance(node, tree.In) else node.children())
    return count


def _checked_size(expr: tree.Expr) -> tree.Expr:
    if _size(expr) > MAX_EXPRESSION_NODES:
        raise InvalidPredicateError(
            f"expression too large to evaluate: {str(expr)[:120]}... has more than "
            f"{MAX_EXPRESSION_NODES} nodes inside one function, comparison or CASE (at most "
            f"{MAX_EXPRESSION_NODES}); a long AND/OR chain at the top of a predicate has no limit"
        )
    return expr


def evaluation_error(expr: tree.Expr, error: Exception, where: str | None) -> InvalidPredicateError:
    """The error for an expression that fails on some rows' values."""
    place = f" on the rows of {where}" if where else ""
    return InvalidPredicateError(f"cannot evaluate {expr}{place}: {_arrow_message(error)}")


def _arrow_message(error: Exception) -> str:
    """Arrow's message without its C++ source locations."""
    lines = [line for line in str(error).splitlines() if not line.lstrip().startswith("/")]
    return " ".join(line.strip() for line in lines if line.strip()) or type(error).__name__
