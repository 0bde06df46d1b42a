"""An empty ``IN ()`` list is refused by the predicate parser, naming where it is.

A templated list that rendered empty (``id IN ({{ ids | join(',') }})``) used to parse: ``IN ()``
matched no row (an empty DELETE was committed) and ``NOT IN ()`` matched every row (a DELETE of
the whole table). Neither is what the author meant, so both are input errors now.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.errors import InvalidPredicateError
from deltaplane.engine.expressions.parser import parse_expression, parse_predicate
from deltaplane.engine.expressions.tree import In


@pytest.mark.parametrize(
    ("text", "position"),
    [
        ("id IN ()", 4),
        ("id NOT IN ()", 8),
        ("id in ( )", 4),
        ("NOT (id IN ())", 9),
        ("day = '2026-01-01' AND id IN ()", 27),
        ("id IN (1, 2) OR user_id NOT IN ()", 29),
    ],
)
def test_an_empty_in_list_is_refused_with_its_position(text, position):
    with pytest.raises(InvalidPredicateError) as caught:
        parse_predicate(text)
    message = str(caught.value)
    assert "empty IN list" in message and f"at character {position}" in message, message
    assert repr(text) in message  # the input is quoted, as every parser error does


def test_an_empty_in_list_in_an_expression_is_refused_too():
    with pytest.raises(InvalidPredicateError, match=r"empty IN list at character 5"):
        parse_expression("(id IN ())")


def test_in_lists_with_values_and_strings_that_look_empty_still_parse():
    assert isinstance(parse_predicate("id IN (1)"), In)
    assert parse_predicate("s = 'IN ()'") is not None  # inside a string literal: just text
    assert parse_predicate("s NOT IN ('')").negated


def test_delete_and_update_with_an_empty_in_list_commit_nothing(tmp_path):
    dt = DeltaTable.create(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("v", pa.string())]))
    dt.append(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]}))
    for call in (
        lambda t: t.delete("id IN ()"),
        lambda t: t.delete("id NOT IN ()"),
        lambda t: t.update({"v": "'x'"}, "id NOT IN ()"),
    ):
        with pytest.raises(InvalidPredicateError, match="empty IN list"):
            call(DeltaTable(str(tmp_path / "t")))
    after = DeltaTable(str(tmp_path / "t"))
    assert after.version == 1 and sorted(after.to_arrow()["id"].to_pylist()) == [1, 2, 3]


@pytest.mark.parametrize("text", ["id = 'abc", "id = `x", "a = 1 /* x"])
def test_text_that_does_not_tokenize_is_an_invalid_predicate_not_a_sqlglot_error(text):
    with pytest.raises(InvalidPredicateError, match="cannot parse predicate"):
        parse_predicate(text)
    with pytest.raises(InvalidPredicateError, match="cannot parse expression"):
        parse_expression(text)
