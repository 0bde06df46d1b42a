"""OPTIMIZE with Spark: the engine plans the bins, Spark tasks rewrite them, the driver commits
one transaction with ``dataChange=false``.

    spark-submit ... spark_jobs/compact.py --table s3://lake/trips --target-size 128m
    python -m deltaplane.spark_jobs.compact --table /lake/trips --zorder sourceIP,destIP
    python -m deltaplane.spark_jobs.compact --table /lake/trips --dry-run --write-plan /tmp/plan.json
    python -m deltaplane.spark_jobs.compact --table /lake/trips --plan /tmp/plan.json

With ``--plan`` the job plans nothing: it rewrites the bins of a plan made elsewhere (by
``--dry-run --write-plan``, or by the Airflow compaction operator, which hands over the plan it
made from an auto-optimize decision: its partitions and its deletion-vector purge) and commits
them at the plan's read version, rebased by the engine's conflict rules like any commit.

Each bin (files of one partition packed up to the target size; with Z-order, a whole
partition) is one task, running the engine's ``rewrite_bin``. A Z-order partition larger than
``--max-task-bytes`` is not sorted by one task: Spark sorts its rows on the engine's Z-order key
(the same rank normalization, computed over the whole partition) and cuts it into files, so
data skipping is as good as when one process does it.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping

from deltaplane.engine import (
    DeltaTable,
    ObjectStore,
    OptimizeBin,
    OptimizePlan,
    app_transaction_scope,
    bin_tasks,
    commit_metadata_scope,
    commit_optimize,
    optimize_metrics,
    plan_optimize,
    run_bin_task,
)
from deltaplane.spark_jobs import job
from deltaplane.spark_jobs.options import parse_size

DEFAULT_MAX_TASK_BYTES = 1 << 30
DEFAULT_MIN_FILES = 2
PLAN_FORMAT = "deltaplane.optimize-plan"
PLAN_FORMAT_VERSION = 1
PLAN_DIRECTORY = "_deltaplane/optimize-plans"  # hidden from readers and VACUUM (a "_" path)


# --- plans as files ----------------------------------------------------------------------------


def plan_to_json(plan: OptimizePlan) -> dict:
    """What a plan is, without its snapshot: the table, the version it was made at, and its bins
    (files by path, as the log names them)."""
    return {
        "format": PLAN_FORMAT,
        "formatVersion": PLAN_FORMAT_VERSION,
        "table": plan.table_root,
        "readVersion": plan.read_version,
        "targetFileSize": plan.target_file_size,
        "zOrderBy": list(plan.zorder_by),
        **({"clusterBy": list(plan.cluster_by), "isFull": plan.full} if plan.cluster_by else {}),
        "filter": plan.filter,
        "auto": plan.auto,
        "totalConsideredFiles": plan.total_considered_files,
        "totalFilesSkipped": plan.total_files_skipped,
        "bins": [
            {
                "partitionValues": [list(pair) for pair in b.partition_values],
                "paths": list(b.paths),
                "size": b.size,
                "numRecords": b.num_records,
                "deletedRows": b.deleted_rows,
            }
            for b in plan.bins
        ],
    }


def plan_from_json(doc: Mapping, uri: str, storage_options: Mapping[str, str] | None = None) -> OptimizePlan:
    """The plan ``doc`` describes, bound again to the table at ``uri`` at the plan's version;
    ``JobError`` (bad input) when it is not a plan, is for another table, or names files that
    version does not hold."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not isinstance(doc, Mapping) or doc.get("format") != PLAN_FORMAT:
        raise job.JobError(f'not an OPTIMIZE plan (no "format": "{PLAN_FORMAT}")')
    if doc.get("formatVersion") != PLAN_FORMAT_VERSION:
        raise job.JobError(f"OPTIMIZE plan format version {doc.get('formatVersion')!r} is not supported")
    try:
        snapshot = DeltaTable(uri, version=int(doc["readVersion"]), storage_options=storage_options).snapshot
        if snapshot.store.root != doc["table"]:
            raise job.JobError(f"the plan was made for {doc['table']}, not {snapshot.store.root}")
        bins = tuple(
            OptimizeBin(
                partition_values=tuple((str(k), v) for k, v in b["partitionValues"]),
                paths=tuple(b["paths"]),
                size=int(b["size"]),
                num_records=int(b["numRecords"]),
                deleted_rows=int(b["deletedRows"]),
            )
            for b in doc["bins"]
        )
        paths = sorted({p for b in bins for p in b.paths})
        files = snapshot.files
        files = files.filter(pc.is_in(files.column("path"), value_set=pa.array(paths, pa.string())))
        if files.num_rows != len(paths):
            held = set(files.column("path").to_pylist())
            missing = [p for p in paths if p not in held]
            raise job.JobError(
                f"the plan names {len(missing)} file(s) that version {snapshot.version} of "
                f"{snapshot.store.root} does not hold, e.g. {missing[0]}"
            )
        return OptimizePlan(
            table_root=snapshot.store.root,
            read_version=snapshot.version,
            target_file_size=int(doc["targetFileSize"]),
            zorder_by=tuple(doc.get("zOrderBy") or ()),
            filter=doc.get("filter"),
            bins=bins,
            total_considered_files=int(doc.get("totalConsideredFiles", len(paths))),
            total_files_skipped=int(doc.get("totalFilesSkipped", 0)),
            auto=bool(doc.get("auto", False)),
            snapshot=snapshot,
            files=files,
            cluster_by=tuple(doc.get("clusterBy") or ()),
            full=bool(doc.get("isFull", False)),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise job.JobError(f"malformed OPTIMIZE plan: {type(e).__name__}: {e}") from None


def _plan_location(store: ObjectStore, location: str) -> tuple[ObjectStore, str]:
    """The store and key of a plan file: a URI or an absolute path (the table's storage options
    apply under the table), or a path relative to the working directory."""
    from deltaplane.engine import resolve_location

    if "://" not in location and not location.startswith("/"):
        location = os.path.abspath(location)
    return resolve_location(store, location)


def save_plan(plan: OptimizePlan, store: ObjectStore, location: str | None = None) -> str:
    """Write ``plan`` as JSON: at ``location``, or under the table's ``_deltaplane/optimize-plans/``
    (``store`` is the table's); returns the key written, relative to the store it went to."""
    data = json.dumps(plan_to_json(plan), indent=1).encode()
    if location is None:
        key = f"{PLAN_DIRECTORY}/{plan.read_version:020d}-{uuid.uuid4().hex}.json"
        store.put(key, data, mode="create")
        return key
    target, key = _plan_location(store, location)
    target.put(key, data)
    return key


def load_plan(table: DeltaTable, location: str) -> OptimizePlan:
    from deltaplane.engine import ObjectNotFoundError

    store, key = _plan_location(table.snapshot.store, location)
    try:
        doc = json.loads(store.get(key))
    except ObjectNotFoundError:
        raise job.JobError(f"no OPTIMIZE plan at {location}") from None
    except ValueError as e:
        raise job.JobError(f"{location} is not JSON: {e}") from None
    return plan_from_json(doc, table.uri, table.storage_options)


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
        plan = load_plan(table, args.plan)
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
