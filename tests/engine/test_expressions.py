"""Predicates: SQL parsing, binding to a schema, and row filtering in Arrow.

The property test checks the whole chain (parse -> bind -> Arrow filter) against a plain-Python
three-valued evaluator on random predicates and random rows with nulls.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltaplane.engine.errors import InvalidPredicateError
from deltaplane.engine.expressions.arrow import to_arrow_expression
from deltaplane.engine.expressions.bind import bind
from deltaplane.engine.expressions.parser import parse_predicate
from deltaplane.engine.expressions.tree import (
    And,
    Column,
    Comparison,
    In,
    IsNull,
    Literal,
    Not,
    Or,
    columns,
    negation_normal_form,
)
from deltaplane.engine.schema import DecimalType, PrimitiveType, from_arrow_schema, parse_schema
from tests.reference import evaluate, sql_predicates

SCHEMA = pa.schema(
    [
        ("i", pa.int64()),
        ("s", pa.string()),
        ("d", pa.float64()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("flag", pa.bool_()),
        ("dec", pa.decimal128(10, 2)),
        ("nested", pa.struct([("x", pa.int32()), ("y", pa.string())])),
    ]
)
DELTA = from_arrow_schema(SCHEMA)


def test_parse_shapes():
    e = parse_predicate("id > 5 AND date = '2026-01-01'")
    assert e == And(
        (
            Comparison(">", Column(("id",)), Literal(5)),
            Comparison("=", Column(("date",)), Literal("2026-01-01")),
        )
    )
    assert parse_predicate("a IS NOT NULL") == IsNull(Column(("a",)), negated=True)
    assert parse_predicate("a NOT IN (1, 2)") == In(Column(("a",)), (Literal(1), Literal(2)), negated=True)
    assert parse_predicate("x BETWEEN 1 AND 3") == And(
        (Comparison(">=", Column(("x",)), Literal(1)), Comparison("<=", Column(("x",)), Literal(3)))
    )
    assert parse_predicate("NOT (a = 1 OR b <> 2)") == Not(
        Or((Comparison("=", Column(("a",)), Literal(1)), Comparison("!=", Column(("b",)), Literal(2))))
    )
    assert parse_predicate("`weird col` = -1.5") == Comparison(
        "=", Column(("weird col",)), Literal(Decimal("-1.5"))
    )
    assert parse_predicate("s.a.b < 1e3") == Comparison("<", Column(("s", "a", "b")), Literal(1000.0))
    assert parse_predicate("d = DATE '2021-01-01'").right.dtype == PrimitiveType("date")


@pytest.mark.parametrize(
    "bad", ["", "   ", "id >", "id IN (SELECT 1)", "id = other_fn(3)", "frobnicate(a) > 2", "x LIKE y"]
)
def test_unsupported_or_malformed_predicates(bad):
    with pytest.raises(InvalidPredicateError):
        parse_predicate(bad)


def test_bind_resolves_names_and_types_literals():
    e = bind(
        parse_predicate("I > 5 AND day = '2026-01-02' AND ts >= '2026-01-02 10:00:00' AND nested.X = 3"),
        DELTA,
    )
    parts = e.items
    assert parts[0].left == Column(("i",), PrimitiveType("long"))
    assert parts[1].right == Literal(dt.date(2026, 1, 2), PrimitiveType("date"))
    assert parts[2].right.value == dt.datetime(2026, 1, 2, 10, tzinfo=dt.UTC)
    assert parts[3].left.path == ("nested", "x")
    assert bind(parse_predicate("dec = 1.255"), DELTA).right.dtype == DecimalType(11, 3)
    assert bind(parse_predicate("i = 2.5"), DELTA).right.dtype == PrimitiveType("double")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nope = 1", "unknown column 'nope'"),
        ("nested.zz = 1", "no field 'zz'"),
        ("i.x = 1", "not a struct"),
        ("day = 'tomorrow'", "cannot be compared"),
        ("flag = 'maybe'", "cannot be compared"),
        ("i LIKE 'a%'", "LIKE needs a string"),
    ],
)
def test_bind_errors_name_the_problem(text, message):
    with pytest.raises(InvalidPredicateError, match=message):
        bind(parse_predicate(text), DELTA)


def test_negation_normal_form_pushes_not_to_leaves():
    e = negation_normal_form(parse_predicate("NOT (a < 1 AND (b IS NULL OR c IN (1)))"))
    assert e == Or(
        (
            Comparison(">=", Column(("a",)), Literal(1)),
            And((IsNull(Column(("b",)), True), In(Column(("c",)), (Literal(1),), True))),
        )
    )
    assert [c.path for c in columns(e)] == [("a",), ("b",), ("c",)]


# --- property: Arrow filtering == SQL three-valued logic -----------------------------------------

ROW = st.fixed_dictionaries(
    {
        "i": st.one_of(st.none(), st.integers(-3, 3)),
        "s": st.one_of(st.none(), st.sampled_from(["", "a", "ab", "b", "ba", "a%"])),
        "d": st.one_of(st.none(), st.sampled_from([-1.5, 0.0, 2.25])),
        "flag": st.one_of(st.none(), st.booleans()),
    }
)
ATOM = st.one_of(
    st.builds(
        lambda op, v: f"i {op} {v}",
        st.sampled_from(["=", "!=", "<", "<=", ">", ">=", "<=>"]),
        st.integers(-3, 3),
    ),
    st.builds(
        lambda op, v: f"s {op} '{v}'",
        st.sampled_from(["=", "<>", "<", ">="]),
        st.sampled_from(["", "a", "b"]),
    ),
    st.builds(
        lambda op, v: f"d {op} {v}", st.sampled_from(["<", ">=", "="]), st.sampled_from(["0", "-1.5", "2.25"])
    ),
    st.builds(
        lambda c, n: f"{c} IS {n}NULL", st.sampled_from(["i", "s", "flag"]), st.sampled_from(["", "NOT "])
    ),
    st.builds(
        lambda n, vs: f"i {n}IN ({', '.join(vs)})",
        st.sampled_from(["", "NOT "]),
        st.lists(st.sampled_from(["0", "1", "-2", "NULL"]), min_size=1, max_size=3),
    ),
    st.builds(
        lambda n, p: f"s {n}LIKE '{p}'",
        st.sampled_from(["", "NOT "]),
        st.sampled_from(["a%", "%b", "_", "a\\%"]),
    ),
    st.sampled_from(["flag", "NOT flag", "i <=> NULL", "i = NULL", "TRUE", "FALSE"]),
)
PREDICATE = sql_predicates(ATOM, max_leaves=6)
PROP_SCHEMA = pa.schema([("i", pa.int64()), ("s", pa.string()), ("d", pa.float64()), ("flag", pa.bool_())])


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(ROW, min_size=1, max_size=12), text=PREDICATE)
def test_arrow_filter_matches_sql_semantics(rows, text):
    table = pa.Table.from_pylist(rows, schema=PROP_SCHEMA)
    expr = bind(parse_predicate(text), from_arrow_schema(PROP_SCHEMA))
    got = table.filter(to_arrow_expression(expr)).to_pylist()
    want = [r for r in rows if evaluate(expr, r) is True]
    assert got == want, text


def test_schema_parse_helper_is_consistent():
    # The delta schema used above round-trips through JSON (guards the fixture itself).
    assert parse_schema(DELTA.to_json_string()) == DELTA


VALUES = pa.table(
    {
        "value": pa.array([1, 7, None], pa.int64()),
        "name": ["ab", None, "c"],
        "x": [1.25, -2.5, 3.0],
        "a": pa.array([5, -7, 3], pa.int32()),
    }
)


@pytest.mark.parametrize(
    ("text", "delta_type", "expected"),
    [
        ("value * 2 + 1", "long", [3, 15, None]),
        ("value / 2", "double", [0.5, 3.5, None]),  # SQL division is not integer division
        ("a % 3", "integer", [2, -1, 0]),  # the sign follows the dividend, as in Spark
        ("upper(name)", "string", ["AB", None, "C"]),
        ("coalesce(value, 0)", "long", [1, 7, 0]),
        (
            "CASE WHEN value > 3 THEN 'big' WHEN value IS NULL THEN 'none' ELSE 'small' END",
            "string",
            ["small", "big", "none"],
        ),
        ("name || '!'", "string", ["ab!", None, "c!"]),
        ("round(x, 1)", "double", [1.3, -2.5, 3.0]),  # HALF_UP, not banker's rounding
        ("if(value > 3, 1, 0)", "long", [0, 1, 0]),  # a null condition takes the else branch
        ("-value", "long", [-1, -7, None]),
        ("substring(name, 1, 1)", "string", ["a", None, "c"]),
        ("greatest(value, a)", "long", [5, 7, 3]),
        ("nullif(a, 3)", "integer", [5, -7, None]),
        ("length(name)", "integer", [2, None, 1]),
        ("CAST(value AS DOUBLE) * 1.5", "double", [1.5, 10.5, None]),
    ],
)
def test_scalar_expressions(text, delta_type, expected):
    from deltaplane.engine.expressions.arrow import evaluate
    from deltaplane.engine.expressions.parser import parse_expression

    bound = bind(parse_expression(text), from_arrow_schema(VALUES.schema))
    assert bound.dtype.to_json() == delta_type
    assert evaluate(VALUES, bound).to_pylist() == expected


def test_overflow_and_division_by_zero_are_errors_not_wrong_values():
    from deltaplane.engine.expressions.arrow import evaluate
    from deltaplane.engine.expressions.parser import parse_expression

    big = pa.table({"v": pa.array([2**62], pa.int64()), "z": pa.array([0], pa.int64())})
    schema = from_arrow_schema(big.schema)
    with pytest.raises(InvalidPredicateError, match="overflow"):
        evaluate(big, bind(parse_expression("v * 4"), schema))
    with pytest.raises(InvalidPredicateError, match="divide by zero"):
        evaluate(big, bind(parse_expression("v / z"), schema))
