"""OPTIMIZE with Spark: the engine plans the bins, Spark tasks rewrite them, the driver commits
one transaction with ``dataChange=false``.

    spark-submit ... spark_jobs/compact.py --table s3://lake/trips --target-size 128m
    python -m spark_jobs.compact --table /lake/trips --zorder sourceIP,destIP

Each bin (files of one partition packed up to the target size; with Z-order, a whole
partition) is one task, running the engine's ``rewrite_bin``. A Z-order partition larger than
``--max-task-bytes`` is not sorted by one task: Spark sorts its rows on the engine's Z-order key
(the same rank normalization, computed over the whole partition) and cuts it into files, so
data skipping is as good as when one process does it.
"""

from __future__ import annotations

import time

from engine import DeltaTable
from engine.commands.optimize import bin_tasks, commit_optimize, optimize_metrics, plan_optimize, run_bin_task
from engine.transaction import app_transaction_scope, commit_metadata_scope
from spark_jobs import job
from spark_jobs.options import parse_size

DEFAULT_MAX_TASK_BYTES = 1 << 30


def build_parser():
    p = job.parser("compact", "Compact small files (bin-packing) or Z-order a table with Spark.")
    p.add_argument("--target-size", help="target file size, e.g. 128m (default: the table's or 1g)")
    p.add_argument("--zorder", help="comma-separated Z-order columns")
    p.add_argument("--filter", help="partition predicate: only these partitions")
    p.add_argument("--min-files", type=int, default=2, help="bins with fewer files are left alone")
    p.add_argument(
        "--max-task-bytes",
        default=str(DEFAULT_MAX_TASK_BYTES),
        help="larger Z-order partitions are sorted by Spark",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    return p


def _rewrite(task) -> list[dict]:
    return [a.to_json() for a in run_bin_task(task)]


def main(args) -> dict:
    from engine.actions import Add

    start = time.perf_counter()
    options = job.storage_options(args)
    target = parse_size(args.target_size, "--target-size")
    max_task_bytes = parse_size(args.max_task_bytes, "--max-task-bytes") or DEFAULT_MAX_TASK_BYTES
    table = DeltaTable(args.table, storage_options=options)
    skipped = job.already_done(table, job.work_key(args))
    if skipped is not None:
        return skipped
    zorder = [c.strip() for c in args.zorder.split(",") if c.strip()] if args.zorder else None
    plan = plan_optimize(
        table.snapshot,
        target_file_size=target,
        zorder_by=zorder,
        filter=args.filter,
        min_num_files=args.min_files,
    )
    if args.dry_run or not plan.bins:
        return {"dryRun": bool(args.dry_run), "version": None, **plan.describe()}
    tasks = bin_tasks(plan, uri=args.table, storage_options=options)
    spark = job.spark_session(args, "compact")
    small = [t for t in tasks if not (t.zorder_by and t.bin.size > max_task_bytes)]
    large = [t for t in tasks if t.zorder_by and t.bin.size > max_task_bytes]
    adds: list[dict] = []
    if small:
        rdd = spark.sparkContext.parallelize(small, len(small))
        adds += [a for group in rdd.map(_rewrite).collect() for a in group]
    if large:
        from spark_jobs.zorder import zorder_partition

        for task in large:
            adds += zorder_partition(spark, task)
    actions = [Add.from_json(a) for a in adds]
    with commit_metadata_scope(job.commit_metadata(args)), app_transaction_scope(*job.app_transaction(args)):
        result = commit_optimize(table.snapshot.store, plan, actions)
    metrics = optimize_metrics(plan, actions, result, time.perf_counter() - start).to_dict()
    metrics["sparkSortedPartitions"] = len(large)
    return metrics


if __name__ == "__main__":
    raise SystemExit(job.run("compact", build_parser(), main))
