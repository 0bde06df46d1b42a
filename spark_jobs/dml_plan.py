"""A DELETE/UPDATE plan as a file (``engine/plans.py``), so the Spark job carries out the plan an
operator made instead of planning again: the job's side (its command line, checked against the
plan).

The Airflow DML operator plans (``engine.commands.dml.plan_row_level``: the version it read, the
candidate files the predicate can touch, the strategy and rewrite threshold from the table's
properties at that version) to decide whether the work is big enough for Spark; it then writes
that plan beside the table (``_deltaplane/dml-plans/``) and runs ``spark_jobs.dml --plan``. The job
loads the table *at the plan's version*, takes the plan's candidate files from it (refusing, with
a bad-input error, a plan for another table, another statement, or naming files that version does
not hold) and commits at that version with the engine's conflict rules. So commits that land
between the operator's plan and the job change nothing the job does: they are either compatible
(the commit is rebased over them) or a conflict (exit code 4, retried, and the retry plans anew).
"""

from __future__ import annotations

from collections.abc import Mapping

from deltaplane.engine import ROW_LEVEL_PLAN, RowLevelPlan, load_plan
from deltaplane.spark_jobs import job


def job_arguments(plan: RowLevelPlan) -> list[str]:
    """The ``spark_jobs.dml`` arguments that state the plan's statement (``--delete``/``--update``
    and ``--set``): the command line says what the job does; ``--plan`` pins how."""
    if plan.operation == "DELETE":
        return ["--delete", plan.predicate or "true"]
    args = ["--update", plan.predicate or "true"]
    for column, expr in (plan.updates or {}).items():
        args += ["--set", f"{column}={expr}"]
    return args


def load_row_level_plan(
    uri: str,
    location: str,
    storage_options: Mapping[str, str] | None,
    *,
    predicate: str | None,
    updates: dict[str, str] | None,
    strategy: str | None = None,
    threshold: float | None = None,
):
    """The snapshot at the plan's version and the plan at ``location`` (``engine/plans.py``),
    checked against the statement on the job's command line; ``JobError`` (bad input) when they
    differ, a ``PlanError`` (bad input too) when the plan does not fit the table."""
    snapshot, plan = load_plan(ROW_LEVEL_PLAN, uri, location, storage_options)
    operation = "DELETE" if updates is None else "UPDATE"
    said = {"operation": operation, "predicate": predicate or "true", "updates": updates}
    planned = {"operation": plan.operation, "predicate": plan.predicate or "true", "updates": plan.updates}
    if said != planned:
        raise job.JobError(f"the plan at {location} is for {planned}, not {said}")
    for name, given, value in (
        ("--strategy", strategy, plan.strategy),
        ("--rewrite-threshold", threshold, plan.threshold),
    ):
        if given is not None and given != value:
            raise job.JobError(f"{name} {given} differs from the plan's {value}", job.EXIT_USAGE)
    return snapshot, plan
