"""SQL text to the engine's expression tree, with sqlglot (Spark's dialect): the work behind
``parser.py``, loaded on the first parse (a process that never parses a string does not import
sqlglot)."""

from __future__ import annotations

import re
from decimal import Decimal

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from deltaplane.engine.errors import InvalidPredicateError
from deltaplane.engine.expressions import tree
from deltaplane.engine.schema import DataType, DecimalType, PrimitiveType

_COMPARISON_NODES = {
    exp.EQ: "=",
    exp.NEQ: "!=",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.NullSafeEQ: "<=>",
}

_SQL_TYPES: dict[str, DataType] = {
    "BIGINT": PrimitiveType("long"),
    "INT": PrimitiveType("integer"),
    "SMALLINT": PrimitiveType("short"),
    "TINYINT": PrimitiveType("byte"),
    "FLOAT": PrimitiveType("float"),
    "DOUBLE": PrimitiveType("double"),
    "BOOLEAN": PrimitiveType("boolean"),
    "TEXT": PrimitiveType("string"),
    "VARCHAR": PrimitiveType("string"),
    "CHAR": PrimitiveType("string"),
    "BINARY": PrimitiveType("binary"),
    "VARBINARY": PrimitiveType("binary"),
    "DATE": PrimitiveType("date"),
    "TIMESTAMP": PrimitiveType("timestamp"),
    "TIMESTAMPTZ": PrimitiveType("timestamp"),
    "TIMESTAMPLTZ": PrimitiveType("timestamp"),
    "TIMESTAMPNTZ": PrimitiveType("timestamp_ntz"),
    "DATETIME": PrimitiveType("timestamp_ntz"),
}


_ARITHMETIC = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%", exp.DPipe: "||"}

# sqlglot node class -> (our function name, how to read its arguments)
_FUNCTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "Upper": ("upper", ("this",)),
    "Lower": ("lower", ("this",)),
    "Length": ("length", ("this",)),
    "Trim": ("trim", ("this",)),
    "Abs": ("abs", ("this",)),
    "Floor": ("floor", ("this",)),
    "Ceil": ("ceil", ("this",)),
    "Sqrt": ("sqrt", ("this",)),
    "Exp": ("exp", ("this",)),
    "Ln": ("ln", ("this",)),
    "Round": ("round", ("this", "decimals")),
    "Pow": ("power", ("this", "expression")),
    "Substring": ("substring", ("this", "start", "length")),
    "Nullif": ("nullif", ("this", "expression")),
    "If": ("if", ("this", "true", "false")),
    "Year": ("year", ("this",)),
    "Month": ("month", ("this",)),
    "Day": ("day", ("this",)),
    "Hour": ("hour", ("this",)),
    "CurrentTimestamp": ("current_timestamp", ()),
    "CurrentDate": ("current_date", ()),
}
_VARIADIC = {"Coalesce": "coalesce", "Greatest": "greatest", "Least": "least", "Concat": "concat"}
_ANONYMOUS = {"ltrim", "rtrim", "char_length", "character_length", "date", "to_date"}


def _parse_message(error: ParseError | TokenError) -> str:
    """sqlglot's message without its internals (``for <class 'sqlglot...Add'>``) or ANSI codes."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))
    text = re.sub(r"\s*for <class '[^']*'>", "", text)
    return " ".join(text.split())


def parse_sql(text: str, what: str, convert) -> tree.Expr:
    """Tokenize once, check the tokens, parse them with sqlglot and convert the parsed statement
    with ``convert(converter, statement)``."""
    dialect = sqlglot.Dialect.get_or_raise("spark")
    try:
        tokens = dialect.tokenize(text)
        _refuse_empty_in_lists(tokens, text, what)
        _refuse_deep_nesting(tokens, text, what)
        statements = dialect.parser().parse(tokens, text)
        if not statements or statements[0] is None:
            raise ParseError("no expression was parsed")
        # Several statements (``x; DROP TABLE t``) are a Block, which no converter accepts.
        statement = exp.Block(expressions=statements) if len(statements) > 1 else statements[0]
        return convert(_Converter(text), statement)
    except (ParseError, TokenError) as e:
        raise InvalidPredicateError(f"cannot parse {what} {_shown(text)}: {_parse_message(e)}") from None
    except RecursionError:
        # Within the nesting limit but on a caller's stack too deep to parse it: still an input
        # error, never a retryable RecursionError.
        raise InvalidPredicateError(_too_deep(text, what, None)) from None


def _shown(text: str) -> str:
    """The input for a message: whole when short, its start and length when long."""
    return repr(text) if len(text) <= 200 else f"{text[:120]!r}... ({len(text):,} characters)"


def _too_deep(text: str, what: str, at: int | None) -> str:
    where = f" (level {tree.MAX_NESTING + 1} at character {at + 1})" if at is not None else ""
    return (
        f"{what} {_shown(text)} nests too deeply{where}: at most {tree.MAX_NESTING} levels of "
        "parentheses, CASE, NOT or unary minus; long AND/OR chains need no parentheses"
    )


_PREFIX = ("NOT", "DASH", "PLUS", "TILDE")


def _refuse_deep_nesting(tokens, text: str, what: str) -> None:
    """``InvalidPredicateError`` when parentheses, CASE ... END and runs of prefix operators
    (``NOT NOT x``, ``- - 1``) nest more than ``MAX_NESTING`` levels: found on the tokens, in
    one pass, before any recursive parsing starts."""
    from sqlglot.tokens import TokenType

    opening = {TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.CASE}
    closing = {TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.END}
    prefix = {getattr(TokenType, name) for name in _PREFIX if hasattr(TokenType, name)}
    depth = run = 0
    for token in tokens:
        kind = token.token_type
        if kind in prefix:
            run += 1
        else:
            run = 0
            if kind in opening:
                depth += 1
            elif kind in closing:
                depth -= 1
        if depth + run > tree.MAX_NESTING:
            raise InvalidPredicateError(_too_deep(text, what, token.start))


def _refuse_empty_in_lists(tokens, text: str, what: str) -> None:
    """``x IN ()`` matches no row and ``x NOT IN ()`` every row: almost always a templated list
    that rendered empty (``id IN ({{ ids | join(',') }})``), where a DELETE would commit nothing
    or delete the whole table. Refused, naming where the list is (1-based character of ``IN``).
    Scanned on tokens, so ``'IN ()'`` inside a string literal is just text."""
    from sqlglot.tokens import TokenType

    for first, second, third in zip(tokens, tokens[1:], tokens[2:], strict=False):
        if (first.token_type, second.token_type, third.token_type) == (
            TokenType.IN,
            TokenType.L_PAREN,
            TokenType.R_PAREN,
        ):
            raise InvalidPredicateError(
                f"in {what} {_shown(text)}: empty IN list at character {first.start + 1} "
                f"({text[first.start : third.end + 1]!r}): IN () matches no row and NOT IN () every "
                "row; list at least one value (did a templated list render empty?)"
            )


class _Converter:
    def __init__(self, text: str):
        self.text = text

    def fail(self, node: exp.Expression, why: str = "is not supported") -> InvalidPredicateError:
        return InvalidPredicateError(
            f"in predicate {_shown(self.text)}: {_shown(node.sql(dialect='spark'))} {why}"
        )

    def convert(self, node: exp.Expression) -> tree.Expr:
        if isinstance(node, exp.Paren):
            return self.convert(node.this)
        if isinstance(node, exp.And):
            return tree.And(self._flatten(tree.And, node))
        if isinstance(node, exp.Or):
            return tree.Or(self._flatten(tree.Or, node))
        if isinstance(node, exp.Not):
            inner = node.this
            while isinstance(inner, exp.Paren):
                inner = inner.this
            if isinstance(inner, exp.Is):
                return self._is(inner, negated=True)
            if isinstance(inner, exp.In):
                return self._in(inner, negated=True)
            if isinstance(inner, exp.Like):
                return self._like(inner, negated=True)
            return tree.Not(self.convert(inner))
        for cls, op in _COMPARISON_NODES.items():
            if isinstance(node, cls):
                return tree.Comparison(op, self.value(node.this), self.value(node.expression))
        if isinstance(node, exp.NullSafeNEQ):
            return tree.Not(tree.Comparison("<=>", self.value(node.this), self.value(node.expression)))
        if isinstance(node, exp.Is):
            return self._is(node, negated=False)
        if isinstance(node, exp.In):
            return self._in(node, negated=False)
        if isinstance(node, exp.Between):
            target = self.value(node.this)
            return tree.And(
                (
                    tree.Comparison(">=", target, self.value(node.args["low"])),
                    tree.Comparison("<=", target, self.value(node.args["high"])),
                )
            )
        if isinstance(node, exp.Like):
            return self._like(node, negated=False)
        if isinstance(node, exp.Column | exp.Dot | exp.Boolean | exp.Func | exp.Case):
            # A bare boolean column, TRUE/FALSE, or a boolean-valued function used as a predicate.
            return self.value(node)
        if isinstance(node, exp.Binary | exp.Literal | exp.Neg | exp.Cast):
            raise self.fail(node, "is not a condition: a predicate must be true or false for each row")
        raise self.fail(node)

    def _flatten(self, kind: type, node: exp.Expression) -> tuple[tree.Expr, ...]:
        """``a AND (b AND c)`` as one n-ary node: simpler trees for every visitor.

        sqlglot nests a chain one level per term (``a OR b OR c`` is ``Or(Or(a, b), c)``), so
        the chain is walked with an explicit stack, left to right: a 20,000-term OR is a loop,
        not 20,000 nested calls."""
        connector = exp.And if kind is tree.And else exp.Or
        items: list[tree.Expr] = []
        stack = [node]
        while stack:
            current = stack.pop()
            while isinstance(current, exp.Paren):
                current = current.this
            if isinstance(current, connector):
                stack.append(current.expression)
                stack.append(current.this)
                continue
            converted = self.convert(current)
            items.extend(converted.items if isinstance(converted, kind) else (converted,))
        return tuple(items)

    def _is(self, node: exp.Is, negated: bool) -> tree.Expr:
        if not isinstance(node.expression, exp.Null):
            raise self.fail(node, "is not supported (only IS [NOT] NULL)")
        return tree.IsNull(self.value(node.this), negated)

    def _in(self, node: exp.In, negated: bool) -> tree.Expr:
        if node.args.get("query") is not None:
            raise self.fail(node, "uses a subquery, which is not supported")
        values = []
        for v in node.expressions:
            lit = self.value(v)
            if not isinstance(lit, tree.Literal):
                raise self.fail(v, "must be a literal in an IN list")
            values.append(lit)
        return tree.In(self.value(node.this), tuple(values), negated)

    def _like(self, node: exp.Like, negated: bool) -> tree.Expr:
        pattern = self.value(node.expression)
        if not isinstance(pattern, tree.Literal) or not isinstance(pattern.value, str):
            raise self.fail(node, "needs a string literal pattern")
        return tree.Like(self.value(node.this), pattern.value, negated)

    def value(self, node: exp.Expression) -> tree.Expr:
        if isinstance(node, exp.Paren):
            return self.value(node.this)
        if isinstance(node, exp.Column):
            return tree.Column(tuple(part.name for part in node.parts))
        if isinstance(node, exp.Dot):
            parts = []
            for part in node.flatten() if hasattr(node, "flatten") else []:
                if isinstance(part, exp.Column):
                    parts.extend(p.name for p in part.parts)
                elif isinstance(part, exp.Identifier):
                    parts.append(part.name)
                else:
                    raise self.fail(node)
            return tree.Column(tuple(parts))
        if isinstance(node, exp.Null):
            return tree.Literal(None)
        if isinstance(node, exp.Boolean):
            return tree.Literal(bool(node.this), PrimitiveType("boolean"))
        if isinstance(node, exp.Literal):
            if node.is_string:
                return tree.Literal(node.this)
            return tree.Literal(_number(node.this))
        if isinstance(node, exp.Neg):
            inner = self.value(node.this)
            if isinstance(inner, tree.Literal) and isinstance(inner.value, int | float | Decimal):
                return tree.Literal(-inner.value, inner.dtype)
            return tree.Func("negate", (inner,))
        if isinstance(node, exp.Cast | exp.TryCast):
            target = _sql_type(node.to)
            if target is None:
                raise self.fail(node, f"casts to an unsupported type {node.to.sql()!r}")
            return tree.Cast(self.value(node.this), target)
        for cls, op in _ARITHMETIC.items():
            if isinstance(node, cls):
                return tree.BinaryOp(op, self.value(node.this), self.value(node.expression))
        if isinstance(node, exp.Case):
            if node.this is not None:
                raise self.fail(node, "(CASE x WHEN ...) is not supported; use CASE WHEN x = ... THEN")
            branches = tuple(
                (self.convert(i.this), self.value(i.args["true"])) for i in node.args.get("ifs") or []
            )
            default = node.args.get("default")
            return tree.Case(branches, self.value(default) if default is not None else None)
        if isinstance(node, exp.Predicate | exp.Connector | exp.Not):
            return self.convert(node)  # a comparison used as a value, e.g. in SET flag = (x > 1)
        name = type(node).__name__
        if name == "TsOrDsToDate":
            return self.value(node.this)
        if name in _FUNCTIONS:
            ours, keys = _FUNCTIONS[name]
            args = [node.args.get(k) for k in keys]
            while args and args[-1] is None:
                args.pop()
            return tree.Func(ours, tuple(self._function_argument(a, node) for a in args))
        if name in _VARIADIC:
            first = [node.this] if node.args.get("this") is not None else []
            args = first + list(node.expressions)
            return tree.Func(_VARIADIC[name], tuple(self.value(a) for a in args))
        if isinstance(node, exp.Anonymous) and str(node.this).lower() in _ANONYMOUS:
            return tree.Func(str(node.this).lower(), tuple(self.value(a) for a in node.expressions))
        raise self.fail(node)

    def _function_argument(self, arg: exp.Expression, node: exp.Expression) -> tree.Expr:
        if isinstance(arg, exp.Predicate | exp.Connector | exp.Not):
            return self.convert(arg)
        return self.value(arg)


def _number(text: str) -> int | float | Decimal:
    lowered = text.lower()
    if lowered.isdigit():
        return int(text)
    if "e" in lowered:
        return float(text)
    # Keep decimal literals exact (1.1 must equal a decimal(2,1) 1.1); the binder may
    # turn them into floats when compared with float columns.
    return Decimal(text)


def _sql_type(node: exp.DataType) -> DataType | None:
    name = node.this.name if hasattr(node.this, "name") else str(node.this)
    if name == "DECIMAL":
        params = [
            int(e.this.this) if isinstance(e, exp.DataTypeParam) else int(e.name) for e in node.expressions
        ]
        precision = params[0] if params else 10
        scale = params[1] if len(params) > 1 else 0
        return DecimalType(precision, scale)
    return _SQL_TYPES.get(name)
