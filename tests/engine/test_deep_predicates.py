"""Long and deep predicates: long flat chains work, too-deep nesting is a typed input error.

A 20,000-term OR or a 3,000-term AND (``a AND b AND ...``: sqlglot nests it one level per term)
must parse, skip files and filter rows; nesting deeper than the parser's limit (parentheses,
NOT, nested calls, CASE) is ``InvalidPredicateError`` naming the limit, never a
``RecursionError`` (which operators would retry as if it were a transient failure).
"""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table
from deltaplane.engine.errors import InvalidPredicateError
from deltaplane.engine.expressions.parser import MAX_NESTING, parse_expression, parse_predicate

ROWS = 30_000


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> str:
    """ids 0..29,999 in three files of 10,000."""
    uri = str(tmp_path_factory.mktemp("deep") / "t")
    for start in range(0, ROWS, 10_000):
        ids = pa.array(range(start, start + 10_000), pa.int64())
        write_table(uri, pa.table({"id": ids, "x": pa.compute.cast(ids, pa.float64())}), mode="append")
    return uri


def _ids(uri: str, predicate: str) -> list[int]:
    return sorted(DeltaTable(uri).to_arrow(filter=predicate).column("id").to_pylist())


def test_a_20000_term_or_chain_filters_rows_and_skips_files(table):
    wanted = list(range(5, 40_000, 2))[:20_000]  # half of them past the table's last id
    predicate = " OR ".join(f"id = {i}" for i in wanted)
    assert _ids(table, predicate) == [i for i in wanted if i < ROWS]
    assert len(DeltaTable(table).file_uris(filter=predicate)) == 3
    upper = " OR ".join(f"id = {i}" for i in range(ROWS, ROWS + 20_000))
    assert DeltaTable(table).file_uris(filter=upper) == []


def test_a_3000_term_and_chain_filters_rows(table):
    predicate = " AND ".join(f"id >= {i}" for i in range(3_000))
    assert _ids(table, predicate) == list(range(2_999, ROWS))
    mixed = " AND ".join(f"(x < {ROWS - i} OR id = {i})" for i in range(3_000))
    assert _ids(table, mixed) == [i for i in range(ROWS) if i < ROWS - 2_999 or i in (0,)]


def test_long_chains_delete_and_update(tmp_path):
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"id": pa.array(range(1_000), pa.int64()), "v": pa.array([0] * 1_000)}))
    evens = " OR ".join(f"id = {i}" for i in range(0, 20_000, 2))
    result = DeltaTable(uri).delete(evens)
    assert int(result.operation_metrics["numDeletedRows"]) == 500
    odds_below = " OR ".join(f"id = {i}" for i in range(1, 200, 2))
    DeltaTable(uri).update({"v": "1"}, predicate=odds_below)
    rows = DeltaTable(uri).to_arrow().sort_by("id").to_pylist()
    assert [r["id"] for r in rows] == list(range(1, 1_000, 2))
    assert [r["id"] for r in rows if r["v"] == 1] == list(range(1, 200, 2))


DEEP = {
    "10,000 nested parentheses": "(" * 10_000 + "id = 1" + ")" * 10_000,
    "3,000 nested ANDs": "".join(f"(id > {i} AND " for i in range(3_000)) + "id > 0" + ")" * 3_000,
    "10,000 NOTs": "NOT " * 10_000 + "id = 1",
    "1,000 nested calls": "abs(" * 1_000 + "id" + ")" * 1_000 + " = 1",
    "500 nested CASEs": "CASE WHEN id = 1 THEN " * 500 + "true" + " ELSE false END" * 500,
    "10,000 unary minuses": "id = " + "- " * 10_000 + "1",
}


@pytest.mark.parametrize("name", list(DEEP))
def test_too_deep_nesting_is_an_invalid_predicate_naming_the_limit(table, name):
    text = DEEP[name]
    for parse in (parse_predicate, parse_expression):
        with pytest.raises(InvalidPredicateError, match=re.escape(f"at most {MAX_NESTING}")):
            parse(text)
    with pytest.raises(InvalidPredicateError, match=re.escape(f"at most {MAX_NESTING}")):
        DeltaTable(table).to_arrow(filter=text)


def test_nesting_up_to_the_limit_works(table):
    at_limit = "(" * (MAX_NESTING - 1) + "id = 7" + ")" * (MAX_NESTING - 1)
    assert _ids(table, at_limit) == [7]
    nested_or = "id = 1"
    for i in range(2, MAX_NESTING):
        nested_or = f"(id = {i} OR {nested_or})"
    assert _ids(table, nested_or) == list(range(1, MAX_NESTING))
    nots = "NOT " * (MAX_NESTING - 2) + "id = 3"  # an even number of NOTs
    assert _ids(table, nots) == [3]
    with pytest.raises(InvalidPredicateError, match=re.escape(f"at most {MAX_NESTING}")):
        parse_predicate("(" * (MAX_NESTING + 1) + "id = 7" + ")" * (MAX_NESTING + 1))


def test_deep_nesting_refused_on_a_deep_call_stack(table):
    """The limit holds wherever the caller is: 600 frames below, the deepest accepted predicate
    still parses (or is refused with the typed error, never a RecursionError)."""
    text = "(" * (MAX_NESTING - 1) + "id = 7" + ")" * (MAX_NESTING - 1)

    def nested(depth: int):
        if depth:
            return nested(depth - 1)
        try:
            return parse_predicate(text + " AND id >= 0")
        except InvalidPredicateError as e:
            return e

    result = nested(600)  # a RecursionError would propagate and fail the test
    assert isinstance(result, InvalidPredicateError | pa.lib.ArrowException) or result is not None


def test_a_huge_or_inside_a_function_is_refused_not_a_crash(table):
    """An OR inside a call cannot be evaluated in groups: past the limit it is an error (before,
    Arrow's recursion overflowed the C stack and the process died). IN lists of any length are
    one membership test."""
    from deltaplane.engine.expressions.arrow import MAX_EXPRESSION_NODES

    inside = "coalesce(" + " OR ".join(f"id > {i}" for i in range(20_000)) + ", false)"
    with pytest.raises(InvalidPredicateError, match=f"at most {MAX_EXPRESSION_NODES}"):
        DeltaTable(table).to_arrow(filter=inside)
    small = "coalesce(" + " OR ".join(f"id = {i}" for i in range(100)) + ", false)"
    assert _ids(table, small) == list(range(100))
    in_list = "id IN (" + ", ".join(str(i) for i in range(0, 60_000, 2)) + ")"
    assert _ids(table, in_list) == list(range(0, ROWS, 2))


def test_an_expression_tree_built_as_nested_pairs_binds_and_filters(table):
    """A tree built in Python one AND (or OR) at a time, 5,000 levels deep, is one chain."""
    from deltaplane.engine.expressions.tree import And, Column, Comparison, Literal, Not, Or

    conjunction = Comparison(">=", Column(("id",)), Literal(0))
    disjunction = Comparison("=", Column(("id",)), Literal(0))
    for i in range(1, 5_000):
        conjunction = And((conjunction, Comparison(">=", Column(("id",)), Literal(i))))
        disjunction = Or((disjunction, Comparison("=", Column(("id",)), Literal(i * 7))))
    assert _ids_expr(table, conjunction) == list(range(4_999, ROWS))
    assert _ids_expr(table, disjunction) == [i * 7 for i in range(5_000) if i * 7 < ROWS]
    deep_not = Comparison("=", Column(("id",)), Literal(3))
    for _ in range(5_000):
        deep_not = Not(deep_not)
    with pytest.raises(InvalidPredicateError, match="nests too deeply"):
        DeltaTable(table).to_arrow(filter=deep_not)


def _ids_expr(uri: str, expr) -> list[int]:
    return sorted(DeltaTable(uri).to_arrow(filter=expr).column("id").to_pylist())
