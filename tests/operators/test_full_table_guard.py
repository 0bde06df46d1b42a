"""``allow_full_table`` cannot be bypassed by a predicate that is true for every row.

The guard folds constants with the engine's own expression machinery (SQL's three-valued
logic) when the DAG is parsed and again after templates render: ``1=1 OR id = 5`` is the whole
table, ``id = id`` is not (it is null, so not true, where ``id`` is null).
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from tests.operators.conftest import run_dag, task_states
from tests.operators.test_composition import construct, tries

ALWAYS_TRUE = [
    "1=1 OR id = 5",
    "id = 5 OR 1 = 1",
    "true AND true",
    "NOT false",
    "NOT (1 = 0)",
    "1 < 2",
    "id = 5 OR NOT (1 = 0)",
    "'a' = 'a'",
    "2 BETWEEN 1 AND 3",
    "coalesce(NULL, true)",
    "(id > 3 AND false) OR TRUE",
    "CASE WHEN 1 = 1 THEN true ELSE false END",
    "id IN (1, 2) OR 1 IN (1)",
]
DEPENDS_ON_ROWS = [
    "id = id",  # null where id is null
    "id = 5 AND 1 = 1",
    "1 = 0 OR id > 3",
    "id > 3 OR 1 = NULL",  # NULL OR x is never true where x is not
]


@pytest.mark.parametrize("operation", ["delete", "update"])
@pytest.mark.parametrize("predicate", ALWAYS_TRUE)
def test_always_true_predicates_need_allow_full_table_when_the_dag_is_parsed(operation, predicate):
    updates = {"v": "'x'"} if operation == "update" else None
    with pytest.raises(ValueError, match="allow_full_table") as caught:
        construct("DeltaDMLOperator", operation=operation, predicate=predicate, updates=updates)
    assert "true for every row" in str(caught.value)
    allowed = construct(
        "DeltaDMLOperator", operation=operation, predicate=predicate, updates=updates, allow_full_table=True
    )
    assert allowed.predicate == predicate


@pytest.mark.parametrize("predicate", DEPENDS_ON_ROWS)
def test_predicates_that_depend_on_the_rows_are_accepted(predicate):
    assert construct("DeltaDMLOperator", operation="delete", predicate=predicate).predicate == predicate


def test_after_rendering_an_always_true_predicate_fails_without_retries(airflow_db, tmp_path):
    """Templated predicates are checked once rendered: the always-true ones fail, once, and
    commit nothing; ``id = id`` deletes the rows whose id is not null, exactly."""
    table = tmp_path / "users"
    ids = [1, 2, None, 4]
    DeltaTable.create(str(table), pa.schema([("id", pa.int64()), ("v", pa.string())])).append(
        pa.table({"id": pa.array(ids, pa.int64()), "v": ["a", "b", "c", "d"]})
    )
    run = run_dag(
        "full_table_guard",
        f"""
        import datetime as dt
        import pendulum
        from airflow.sdk import DAG
        from deltaplane.operators.operators.dml import DeltaDMLOperator

        T = {str(table)!r}
        args = dict(retries=2, retry_delay=dt.timedelta(seconds=0))
        params = {{"bypass": "1=1 OR id = 5", "negated": "NOT (1 = 0)", "self": "id = id"}}
        with DAG("full_table_guard", schedule=None, start_date=pendulum.datetime(2026, 1, 1),
                 default_args=args, params=params) as dag:
            bypass = DeltaDMLOperator(task_id="bypass", table_uri=T, operation="delete",
                                      predicate="{{{{ params.bypass }}}}")
            negated = DeltaDMLOperator(task_id="negated", table_uri=T, operation="update",
                                       predicate="{{{{ params.negated }}}}", updates={{"v": "'x'"}})
            self_equal = DeltaDMLOperator(task_id="self_equal", table_uri=T, operation="delete",
                                          predicate="{{{{ params.self }}}}")
            bypass >> negated >> self_equal
        """,
    )
    states = task_states(run)
    assert states["bypass"] == "failed" and states["negated"] in ("failed", "upstream_failed"), states
    assert tries(run, "bypass")[1] == 1  # an input error: not retried
    after = DeltaTable(str(table))
    assert after.version == 1 and after.count() == 4  # nothing committed

    run = run_dag(
        "self_equal",
        f"""
        import pendulum
        from airflow.sdk import DAG
        from deltaplane.operators.operators.dml import DeltaDMLOperator

        with DAG("self_equal", schedule=None, start_date=pendulum.datetime(2026, 1, 1),
                 params={{"self": "id = id", "negated": "NOT (1 = 0)"}}) as dag:
            negated = DeltaDMLOperator(task_id="negated", table_uri={str(table)!r}, operation="update",
                                       predicate="{{{{ params.negated }}}}", updates={{"v": "'x'"}})
            DeltaDMLOperator(task_id="self_equal", table_uri={str(table)!r}, operation="delete",
                             predicate="{{{{ params.self }}}}")
        """,
    )
    assert task_states(run) == {"negated": "failed", "self_equal": "success"}
    assert DeltaTable(str(table)).to_arrow().to_pylist() == [{"id": None, "v": "c"}]
