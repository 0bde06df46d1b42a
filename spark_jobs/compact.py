"""OPTIMIZE with Spark: the engine plans the bins, Spark tasks rewrite them, the driver commits
one transaction with ``dataChange=false``.

    spark-submit ... spark_jobs/compact.py --table s3://lake/trips --target-size 128m
    python -m deltaplane.spark_jobs.compact --table /lake/trips --zorder sourceIP,destIP
    python -m deltaplane.spark_jobs.compact --table /lake/trips --dry-run --write-plan /tmp/plan.json
    python -m deltaplane.spark_jobs.compact --table /lake/trips --plan /tmp/plan.json

With ``--plan`` the job plans nothing: it rewrites the bins of a plan made elsewhere (by
``--dry-run --write-plan``, or by the Airflow compaction operator, which hands over the plan it
made from an auto-optimize decision: its partitions and its deletion-vector purge) and commits
them at the plan's read version, rebased by the engine's conflict rules like any commit (the plan
file is the engine's: ``engine/plans.py``).

Each bin (files of one partition packed up to the target size; with Z-order, a whole
partition) is one task, running the engine's ``rewrite_bin``. A Z-order partition larger than
``--max-task-bytes`` is not sorted by one task: Spark sorts its rows on the engine's Z-order key
(the same rank normalization, computed over the whole partition) and cuts it into files, so
data skipping is as good as when one process does it.
"""

from __future__ import annotations

import time

from deltaplane.engine import (
    OPTIMIZE_PLAN,
    DeltaTable,
    app_transaction_scope,
    bin_tasks,
    commit_metadata_scope,
    commit_optimize,
    load_plan,
    optimize_metrics,
    plan_optimize,
    run_bin_task,
    save_plan,
)
from deltaplane.spark_jobs import job
from deltaplane.spark_jobs.options import parse_size

DEFAULT_MAX_TASK_BYTES = 1 << 30
DEFAULT_MIN_FILES = 2


# --- the job -----------------------------------------------------------------------------------


def build_parser():
    p = job.parser("compact", "Compact small files (bin-packing) or Z-order a table with Spark.")
    p.add_argument("--target-size", help="target file size, e.g. 128m (default: the table's or 1g)")
    p.add_argument("--zorder", help="comma-separated Z-order columns")
    p.add_argument("--filter", help="partition predicate: only these partitions")
    p.add_argument(
        "--min-files", type=int, help=f"bins with fewer files are left alone (default {DEFAULT_MIN_FILES})"
    )
    p.add_argument(
        "--max-task-bytes",
        default=str(DEFAULT_MAX_TASK_BYTES),
        help="larger Z-order partitions are sorted by Spark",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument(
        "--plan",
        metavar="LOCATION",
        help="rewrite exactly this plan (a file from --write-plan: path or URI) instead of planning",
    )
    p.add_argument("--write-plan", metavar="LOCATION", help="also write the plan there (path or URI)")
    return p


def _rewrite(task) -> tuple[list[dict], float]:
    """One bin rewritten in a Python worker: its adds, and the CPU seconds the worker spent."""
    cpu = time.process_time()
    adds = [a.to_json() for a in run_bin_task(task)]
    return adds, time.process_time() - cpu


def main(args) -> dict:
    from deltaplane.engine import Add

    start, driver_cpu = time.perf_counter(), time.process_time()
    options = job.storage_options(args)
    target = parse_size(args.target_size, "--target-size")
    max_task_bytes = parse_size(args.max_task_bytes, "--max-task-bytes") or DEFAULT_MAX_TASK_BYTES
    table = DeltaTable(args.table, storage_options=options)
    skipped = job.already_done(table, job.work_key(args))
    if skipped is not None:
        return skipped
    if args.plan:
        given = [
            flag
            for flag, value in (
                ("--target-size", args.target_size),
                ("--zorder", args.zorder),
                ("--filter", args.filter),
                ("--min-files", args.min_files),
            )
            if value is not None
        ]
        if given:
            raise job.JobError(f"--plan is a whole plan: {', '.join(given)} cannot change it", job.EXIT_USAGE)
        _, plan = load_plan(OPTIMIZE_PLAN, table.uri, args.plan, table.storage_options)
    else:
        zorder = [c.strip() for c in args.zorder.split(",") if c.strip()] if args.zorder else None
        plan = plan_optimize(
            table.snapshot,
            target_file_size=target,
            zorder_by=zorder,
            filter=args.filter,
            min_num_files=DEFAULT_MIN_FILES if args.min_files is None else args.min_files,
        )
    if args.write_plan:
        save_plan(plan, table.snapshot.store, args.write_plan)
    if args.dry_run or not plan.bins:
        return {"dryRun": bool(args.dry_run), "version": None, **plan.describe()}
    tasks = bin_tasks(plan, uri=args.table, storage_options=options)
    spark = job.spark_session(args, "compact")
    small = [t for t in tasks if not (t.zorder_by and t.bin.size > max_task_bytes)]
    large = [t for t in tasks if t.zorder_by and t.bin.size > max_task_bytes]
    adds: list[dict] = []
    # CPU of the Python processes that rewrote (driver and task workers); the JVM's distributed
    # sort of a large Z-order bin is counted by its wall time (one core's worth).
    cpu = 0.0
    if small:
        for group, seconds in job.run_tasks(spark, small, _rewrite):
            adds += group
            cpu += seconds
    if large:
        from deltaplane.spark_jobs.zorder import zorder_partition

        for task in large:
            began = time.perf_counter()
            adds += zorder_partition(spark, task)
            cpu += time.perf_counter() - began
    actions = [Add.from_json(a) for a in adds]
    cpu += time.process_time() - driver_cpu
    with commit_metadata_scope(job.commit_metadata(args)), app_transaction_scope(*job.app_transaction(args)):
        result = commit_optimize(
            table.snapshot.store, plan, actions, seconds=time.perf_counter() - start, cpu_seconds=cpu
        )
    metrics = optimize_metrics(plan, actions, result, time.perf_counter() - start).to_dict()
    metrics["sparkSortedPartitions"] = len(large)
    if args.plan:
        metrics["plan"] = args.plan
    return metrics


if __name__ == "__main__":
    raise SystemExit(job.run("compact", build_parser(), main))
