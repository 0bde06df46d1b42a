"""What every job shares: common arguments, one JSON metrics line on stdout, exit codes.

A job prints exactly one line of JSON on stdout when it ends (``{"job": ..., "status": "ok",
...metrics}`` or ``"status": "failed"`` with the error), whatever happened, so the Airflow
layer and shell scripts can parse it; Spark's own logging goes to stderr. The exit code says
what kind of failure it was, so a caller knows whether retrying can help.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import deltaplane.engine as engine

EXIT_OK = 0
EXIT_FAILED = 1  # anything else (a bug, an unexpected Spark failure)
EXIT_USAGE = 2  # bad command line (argparse's own code)
EXIT_INPUT = 3  # bad input: data, schema, constraint, predicate or argument values; retrying will not help
EXIT_CONFLICT = 4  # a concurrent commit conflicted; retrying may succeed
EXIT_TABLE = 5  # the table or its storage: missing, unreadable, unsupported, unreachable
EXIT_NAMES = {
    EXIT_OK: "ok",
    EXIT_FAILED: "failed",
    EXIT_USAGE: "usage",
    EXIT_INPUT: "bad input",
    EXIT_CONFLICT: "commit conflict",
    EXIT_TABLE: "table or storage",
}
NOT_RETRYABLE = frozenset({EXIT_USAGE, EXIT_INPUT})  # the same input fails the same way

# Object-store options as a JSON object: how ``deltaplane.spark_jobs.submit`` (and so Airflow) hands them to
# a job. An environment is readable only by its user and root; a command line is shown by ``ps``
# to every user and copied by Spark into its logs and event logs.
STORAGE_OPTIONS_ENV = "DELTAPLANE_STORAGE_OPTIONS"

_INPUT = engine.INPUT_ERRORS
_CONFLICT = (engine.CommitConflictError,)
_TABLE = (
    engine.TableNotFoundError,
    engine.StorageError,
    engine.ProtocolError,
    engine.CorruptLogError,
    engine.VersionNotFoundError,
    engine.DataFileError,
    engine.CommitOutcomeUnknownError,
)


class JobError(Exception):
    """A failure the job explains itself (with its exit code)."""

    def __init__(self, message: str, code: int = EXIT_INPUT):
        super().__init__(message)
        self.code = code


def key_values(items: list[str] | None, what: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            shown = "" if what == "--storage-option" else f", got {item!r}"  # may be a secret
            raise JobError(f"{what} must be key=value{shown}", EXIT_USAGE)
        out[key.strip()] = value
    return out


def parser(name: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"deltaplane.spark_jobs.{name}", description=description)
    p.add_argument("--table", required=True, help="the Delta table's URI (a path, file:, s3://)")
    p.add_argument("--master", help="Spark master URL (default: spark-submit's, $SPARK_MASTER or local[2])")
    p.add_argument(
        "--remote",
        metavar="URL",
        help="run on a Spark Connect server, e.g. sc://127.0.0.1:15002 (default: $SPARK_REMOTE if set)",
    )
    p.add_argument("--conf", action="append", metavar="KEY=VALUE", help="Spark configuration (repeatable)")
    p.add_argument(
        "--storage-option",
        action="append",
        metavar="KEY=VALUE",
        help="object store option, e.g. endpoint_url=http://127.0.0.1:8333 (repeatable); keep secrets "
        f"out of command lines: put them in ${STORAGE_OPTIONS_ENV} as a JSON object",
    )
    p.add_argument("--commit-metadata", help="JSON object merged into the commit's commitInfo")
    p.add_argument(
        "--app-id", help="idempotency: application id recorded with the commit (with --app-version)"
    )
    p.add_argument("--app-version", type=int, help="idempotency: a version already recorded commits nothing")
    return p


def work_key(args):
    """The ``deltaplane.engine.work.WorkKey`` given with ``--app-id``/``--app-version`` (``None``: none)."""
    from deltaplane.engine import WorkKey

    if (args.app_id is None) != (args.app_version is None):
        raise JobError("--app-id and --app-version go together", EXIT_USAGE)
    return None if args.app_id is None else WorkKey(args.app_id, args.app_version)


def app_transaction(args) -> tuple[str | None, int | None]:
    key = work_key(args)
    return key.as_txn() if key is not None else (None, None)


def already_done(table, key) -> dict | None:
    """The metrics of a job whose work the table (``None``: none yet) already holds
    (``deltaplane.engine.work.find_applied``, the same check the Airflow operators make): the version
    holding it, else ``None``."""
    from deltaplane.engine import find_applied

    applied = find_applied(table.snapshot, key) if table is not None else None
    if applied is None:
        return None
    return {"version": applied.version, "skipped": True, "reason": applied.describe()}


def commit_metadata(args) -> dict[str, Any]:
    if not args.commit_metadata:
        return {}
    try:
        value = json.loads(args.commit_metadata)
    except ValueError as e:
        raise JobError(f"--commit-metadata must be a JSON object: {e}", EXIT_USAGE) from None
    if not isinstance(value, dict):
        raise JobError("--commit-metadata must be a JSON object", EXIT_USAGE)
    return value


def classify(error: BaseException) -> tuple[int, str]:
    """Exit code and error name for an exception, also one raised in a Spark task (which reaches
    the driver as a Spark exception whose text holds the Python traceback)."""
    if isinstance(error, JobError):
        return error.code, "JobError"
    for kinds, code in ((_CONFLICT, EXIT_CONFLICT), (_INPUT, EXIT_INPUT), (_TABLE, EXIT_TABLE)):
        if isinstance(error, kinds):
            return code, type(error).__name__
    text = str(error)
    for name in re.findall(r"engine\.errors\.(\w+)", text) or re.findall(r"\b(\w+Error): ", text):
        kind = getattr(engine, name, None)
        if isinstance(kind, type) and issubclass(kind, engine.DeltaError):
            for kinds, code in ((_CONFLICT, EXIT_CONFLICT), (_INPUT, EXIT_INPUT), (_TABLE, EXIT_TABLE)):
                if issubclass(kind, kinds):
                    return code, name
    if isinstance(error, engine.DeltaError):
        return EXIT_FAILED, type(error).__name__
    return EXIT_FAILED, type(error).__name__


def _message(error: BaseException) -> str:
    """The useful line of an error: for a Spark failure, the Python exception raised in the task."""
    text = str(error)
    found = re.findall(r"(?m)^((?:deltaplane\.engine\.errors\.)?\w+Error: .+)$", text)
    return (found[-1] if found else text.strip().splitlines()[0] if text.strip() else repr(error))[:2000]


def run(name: str, argparser: argparse.ArgumentParser, main: Callable[[Any], dict], argv=None) -> int:
    """Parse, run ``main(args)`` (which returns metrics), print the JSON line, return the code."""
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = argparser.parse_args(argv)
    start = time.perf_counter()
    out: dict[str, Any] = {"job": name, "table": args.table}
    try:
        metrics = main(args)
        out |= {"status": "ok", **metrics}
        code = EXIT_OK
    except Exception as e:  # every failure ends in the JSON line and a meaningful exit code
        code, kind = classify(e)
        out |= {"status": "failed", "error": kind, "message": _message(e)}
        if code == EXIT_FAILED:  # unexpected: the whole story; otherwise the message says it
            traceback.print_exc(file=sys.stderr)
        else:
            print(f"{kind}: {out['message']}", file=sys.stderr)
    out["exitCode"] = code
    out["seconds"] = round(time.perf_counter() - start, 3)
    print(json.dumps(out, default=str), flush=True)
    return code


def spark_session(args, name: str):
    from deltaplane.spark_jobs.session import get_spark

    if args.remote and args.master:
        raise JobError("give --master or --remote (a Spark Connect server), not both", EXIT_USAGE)
    return get_spark(
        args.master, app_name=f"deltaplane-{name}", conf=key_values(args.conf, "--conf"), remote=args.remote
    )


def run_tasks(spark, items: list, fn: Callable[[Any], Any]) -> list:
    """``fn(item)`` for every item, each item in a Spark task of its own; the results in item order.

    DataFrame API only, so it runs on a Spark Connect session (which has no ``SparkContext``) as on
    a classic one. ``spark.range`` with one partition per item gives every item a task of its own
    (a range is split evenly); the items (pickled) reach the tasks through a broadcast join, which
    keeps the range's partitioning, so each executor receives the items once rather than every
    task receiving all of them in its closure. Items and results are pickled, as an RDD would.
    """
    import pickle

    import pyarrow as pa
    from pyspark.sql import functions as F

    if not items:
        return []
    payload = spark.createDataFrame(
        [(i, pickle.dumps(item)) for i, item in enumerate(items)], "task long, item binary"
    )
    ids = spark.range(0, len(items), 1, len(items)).withColumnRenamed("id", "task")
    out_schema = pa.schema([("task", pa.int64()), ("result", pa.binary())])

    def run(batches):
        for batch in batches:
            tasks = batch.column("task").to_pylist()
            blobs = batch.column("item").to_pylist()
            for task, blob in zip(tasks, blobs, strict=True):
                result = pickle.dumps(fn(pickle.loads(blob)))
                yield pa.RecordBatch.from_arrays(
                    [pa.array([task], pa.int64()), pa.array([result], pa.binary())], schema=out_schema
                )

    rows = ids.join(F.broadcast(payload), "task").mapInArrow(run, "task long, result binary").collect()
    if len(rows) != len(items):
        raise JobError(f"{len(items)} Spark tasks were run, {len(rows)} results came back", EXIT_FAILED)
    return [pickle.loads(r["result"]) for r in sorted(rows, key=lambda r: r["task"])]


def storage_options(args) -> dict[str, str]:
    """The object-store options: the JSON object in ``$DELTAPLANE_STORAGE_OPTIONS`` (how
    ``deltaplane.spark_jobs.submit`` passes them), then ``--storage-option`` flags, which win."""
    options: dict[str, str] = {}
    text = os.environ.get(STORAGE_OPTIONS_ENV)
    if text:
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise JobError(f"${STORAGE_OPTIONS_ENV} must hold a JSON object of storage options", EXIT_USAGE)
        options = {str(k): str(v) for k, v in value.items()}
    return options | key_values(args.storage_option, "--storage-option")
