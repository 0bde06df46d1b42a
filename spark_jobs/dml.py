"""DELETE and UPDATE at scale with Spark: tasks find and change matching rows, the driver writes
the deletion vectors and commits.

    python -m deltaplane.spark_jobs.dml --table s3://lake/users --delete "user_id IN (17, 42)"
    python -m deltaplane.spark_jobs.dml --table /lake/users --update "country = 'UK'" --set "country='GB'"

The engine plans on the driver (candidate files by partition pruning and statistics, the
strategy: deletion vectors when the table enables them), each task takes about
``--task-bytes`` of candidate files and reads only what it needs (the predicate's columns for a
DV delete), writes survivors of rewritten files and updated rows, and returns new deletion
vectors as bitmaps. The driver writes all of them into one deletion-vector file and commits one
transaction at the plan's version, with the engine's conflict rules.
"""

from __future__ import annotations

import time

from deltaplane.engine import (
    DeltaTable,
    PortableSnapshot,
    app_transaction_scope,
    change_files,
    commit_metadata_scope,
    commit_row_level,
    plan_row_level,
)
from deltaplane.spark_jobs import job
from deltaplane.spark_jobs.options import parse_size

DEFAULT_TASK_BYTES = 256 << 20


def build_parser():
    p = job.parser(
        "dml", "DELETE or UPDATE rows of a Delta table with Spark (deletion vectors when enabled)."
    )
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--delete", metavar="PREDICATE", help="delete the rows matching this SQL predicate")
    action.add_argument("--update", metavar="PREDICATE", help="update the rows matching this SQL predicate")
    p.add_argument(
        "--set", action="append", metavar="COLUMN=EXPR", help="with --update: SET clause (repeatable)"
    )
    p.add_argument("--strategy", choices=("deletion_vectors", "copy_on_write"))
    p.add_argument(
        "--rewrite-threshold", type=float, help="rewrite a file when more than this fraction is deleted"
    )
    p.add_argument(
        "--task-bytes", default=str(DEFAULT_TASK_BYTES), help="candidate bytes per task, e.g. 256m"
    )
    p.add_argument(
        "--plan",
        metavar="LOCATION",
        help="carry out this plan (version, candidate files, strategy: spark_jobs.dml_plan), not a new one",
    )
    return p


def _change(item):
    files, plan = item
    return change_files(files, plan)


def main(args) -> dict:
    start = time.perf_counter()
    options = job.storage_options(args)
    updates = None
    if args.update is not None:
        updates = job.key_values(args.set, "--set")
        if not updates:
            raise job.JobError("--update needs at least one --set column=expression")
    elif args.set:
        raise job.JobError("--set goes with --update")
    table = DeltaTable(args.table, storage_options=options)
    skipped = job.already_done(table, job.work_key(args))
    if skipped is not None:
        return skipped
    if args.plan:  # the operator's plan, at its version: nothing is decided again here
        from deltaplane.spark_jobs.dml_plan import load_row_level_plan

        snapshot, plan = load_row_level_plan(
            args.table,
            args.plan,
            options,
            predicate=args.delete if args.delete is not None else args.update,
            updates=updates,
            strategy=args.strategy,
            threshold=args.rewrite_threshold,
        )
    else:
        snapshot = table.snapshot
        plan = plan_row_level(
            snapshot,
            predicate=args.delete if args.delete is not None else args.update,
            updates=updates,
            strategy=args.strategy,
            threshold=args.rewrite_threshold,
        )
    sets = []
    tasks = 0
    if not plan.partition_only and plan.candidates.num_rows:
        groups = PortableSnapshot.of(
            snapshot, plan.candidates, uri=args.table, storage_options=options
        ).split(parse_size(args.task_bytes, "--task-bytes") or DEFAULT_TASK_BYTES)
        tasks = len(groups)
        spark = job.spark_session(args, "dml")
        task_plan = plan.for_tasks()
        sets = job.run_tasks(spark, [(g, task_plan) for g in groups], _change)
    with commit_metadata_scope(job.commit_metadata(args)), app_transaction_scope(*job.app_transaction(args)):
        result = commit_row_level(snapshot.store, snapshot, plan, sets, seconds=time.perf_counter() - start)
    nothing = not result.committed and not result.skipped
    return {
        "operation": plan.operation,
        "version": None if nothing else result.version,  # None: no row changed, nothing committed
        "committed": result.committed,
        **(
            {
                "reason": f"nothing to commit: the {plan.operation} changed no row (table at version "
                f"{plan.read_version})"
            }
            if nothing
            else {}
        ),
        "strategy": plan.strategy,
        "candidateFiles": plan.candidates.num_rows,
        "tasks": tasks,
        "operationMetrics": result.operation_metrics,
    }


if __name__ == "__main__":
    raise SystemExit(job.run("dml", build_parser(), main))
