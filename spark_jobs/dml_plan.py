"""A DELETE/UPDATE plan as a file, so the Spark job carries out the plan an operator made instead
of planning again.

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

import json
import uuid
from collections.abc import Mapping

from deltaplane.engine import DeltaTable, ObjectStore, RowLevelPlan
from deltaplane.spark_jobs import job

PLAN_FORMAT = "deltaplane.row-level-plan"
PLAN_FORMAT_VERSION = 1
PLAN_DIRECTORY = "_deltaplane/dml-plans"  # hidden from readers and VACUUM (a "_" path)


def plan_to_json(plan: RowLevelPlan, table_root: str) -> dict:
    """The plan without its snapshot: the table, the version read, the statement, the strategy
    and the candidate files by path (as the log names them)."""
    paths = plan.candidates.column("path").to_pylist() if plan.candidates is not None else None
    return {
        "format": PLAN_FORMAT,
        "formatVersion": PLAN_FORMAT_VERSION,
        "table": table_root,
        "readVersion": plan.read_version,
        "operation": plan.operation,
        "predicate": plan.predicate,
        "updates": plan.updates,
        "strategy": plan.strategy,
        "threshold": plan.threshold,
        "partitionOnly": plan.partition_only,
        "candidates": paths,
    }


def job_arguments(plan: RowLevelPlan) -> list[str]:
    """The ``spark_jobs.dml`` arguments that state the plan's statement (``--delete``/``--update``
    and ``--set``): the command line says what the job does; ``--plan`` pins how."""
    if plan.operation == "DELETE":
        return ["--delete", plan.predicate or "true"]
    args = ["--update", plan.predicate or "true"]
    for column, expr in (plan.updates or {}).items():
        args += ["--set", f"{column}={expr}"]
    return args


def save_row_level_plan(plan: RowLevelPlan, store: ObjectStore) -> str:
    """Write ``plan`` under the table's ``_deltaplane/dml-plans/`` (``store`` is the table's); the
    key written."""
    key = f"{PLAN_DIRECTORY}/{plan.read_version:020d}-{uuid.uuid4().hex}.json"
    store.put(key, json.dumps(plan_to_json(plan, store.root)).encode(), mode="create")
    return key


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
    """The snapshot at the plan's version and the plan at ``location``, checked against the
    statement on the job's command line; ``JobError`` (bad input) when they differ or the plan
    does not fit the table."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from deltaplane.engine import ObjectNotFoundError, open_store, resolve_location

    store, key = resolve_location(open_store(uri, storage_options), location)
    try:
        doc = json.loads(store.get(key))
    except ObjectNotFoundError:
        raise job.JobError(f"no DELETE/UPDATE plan at {location}") from None
    except ValueError as e:
        raise job.JobError(f"{location} is not JSON: {e}") from None
    if not isinstance(doc, Mapping) or doc.get("format") != PLAN_FORMAT:
        raise job.JobError(f'not a DELETE/UPDATE plan (no "format": "{PLAN_FORMAT}")')
    if doc.get("formatVersion") != PLAN_FORMAT_VERSION:
        raise job.JobError(f"DELETE/UPDATE plan format version {doc.get('formatVersion')!r} is not supported")
    try:
        operation = "DELETE" if updates is None else "UPDATE"
        said = {"operation": operation, "predicate": predicate, "updates": updates}
        planned = {"operation": doc["operation"], "predicate": doc["predicate"] or "true"}
        planned["updates"] = doc["updates"]
        said["predicate"] = predicate or "true"
        if said != planned:
            raise job.JobError(f"the plan at {location} is for {planned}, not {said}")
        for name, given, value in (
            ("--strategy", strategy, doc["strategy"]),
            ("--rewrite-threshold", threshold, doc["threshold"]),
        ):
            if given is not None and given != value:
                raise job.JobError(f"{name} {given} differs from the plan's {value}", job.EXIT_USAGE)
        snapshot = DeltaTable(uri, version=int(doc["readVersion"]), storage_options=storage_options).snapshot
        if snapshot.store.root != doc["table"]:
            raise job.JobError(f"the plan was made for {doc['table']}, not {snapshot.store.root}")
        candidates = None
        if doc["candidates"] is not None:
            paths = list(doc["candidates"])
            files = snapshot.files
            candidates = files.filter(pc.is_in(files.column("path"), value_set=pa.array(paths, pa.string())))
            if candidates.num_rows != len(set(paths)):
                held = set(candidates.column("path").to_pylist())
                missing = [p for p in paths if p not in held]
                raise job.JobError(
                    f"the plan names {len(missing)} file(s) that version {snapshot.version} of "
                    f"{snapshot.store.root} does not hold, e.g. {missing[0]}"
                )
        plan = RowLevelPlan(
            operation=doc["operation"],
            predicate=doc["predicate"],
            updates=doc["updates"],
            strategy=str(doc["strategy"]),
            threshold=float(doc["threshold"]),
            read_version=snapshot.version,
            partition_only=bool(doc["partitionOnly"]),
            candidates=candidates,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise job.JobError(f"malformed DELETE/UPDATE plan: {type(e).__name__}: {e}") from None
    return snapshot, plan
