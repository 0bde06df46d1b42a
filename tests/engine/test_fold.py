"""Constant folding follows SQL's three-valued logic (engine/expressions/fold.py)."""

from __future__ import annotations

import pytest

from deltaplane.engine.expressions.fold import constant_truth, fold_constants
from deltaplane.engine.expressions.parser import parse_predicate

CASES = [
    # predicate, True (every row) / False (no row) / None (depends on the rows)
    ("1=1 OR id = 5", True),
    ("true AND true", True),
    ("NOT false", True),
    ("1 < 2", True),
    ("NULL IS NULL", True),
    ("'a' = 'a'", True),
    ("id IS NULL OR true", True),
    ("false", False),
    ("1 = 0 AND id = 5", False),
    ("NOT (1 = NULL)", False),  # NOT NULL is NULL: no row
    ("id = id", None),  # null where id is null
    ("id = 5 AND 1 = 1", None),
    ("id > 3 OR 1 = NULL", None),  # NULL OR x: never true where x is not
    ("1 / 0 = 1", None),  # fails on evaluation: left for the scan to report
]


@pytest.mark.parametrize("predicate, truth", CASES)
def test_constant_truth(predicate, truth):
    assert constant_truth(parse_predicate(predicate)) is truth


def test_folding_keeps_what_depends_on_the_rows():
    assert str(fold_constants(parse_predicate("id = 5 AND 1 = 1"))) == "(id = 5)"
    assert str(fold_constants(parse_predicate("1 = 0 OR id > 3 OR false"))) == "(id > 3)"
    assert str(fold_constants(parse_predicate("NOT (NOT (id = id))"))) == "(NOT (NOT (id = id)))"


def test_a_long_chain_folds():
    chain = " OR ".join(f"id = {i}" for i in range(20_000))
    assert constant_truth(parse_predicate(chain + " OR 1 = 1")) is True
    assert constant_truth(parse_predicate(chain)) is None
