"""The ``deltaplane`` command line: the engine's verbs for people and scripts.

Every command takes ``--json`` for machine-readable output. A user error (a bad argument, a
missing table, unreachable storage, anything the engine raises on purpose) prints one line on
stderr and exits with status 2; an interrupt exits 130; a reader that closes the pipe early
(``deltaplane read T | head``) ends the command quietly. Anything else is a bug and shows a
traceback. Errors name the command's flags (``--no-enforce-retention``), never the keyword
arguments of the Python calls behind them: flag values are checked here, and the engine's
messages are reworded per verb (``cli_wording``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import sys
from decimal import Decimal
from typing import Any

import pyarrow as pa

from deltaplane.engine.describe import describe_snapshot
from deltaplane.engine.errors import DeltaError, InvalidArgumentError
from deltaplane.engine.table import DeltaTable
from deltaplane.engine.units import parse_size
from deltaplane.engine.version import ENGINE_VERSION


def _json_default(value: Any):
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _dump(obj: Any) -> str:
    return json.dumps(obj, default=_json_default, ensure_ascii=False)


def _storage_options(pairs: list[str] | None) -> dict[str, str]:
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidArgumentError(f"--storage-option expects KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


# --- the CLI's own argument checks: errors name the flag, never a Python keyword -----------------


def _integer(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < minimum:
        wanted = "a non-negative integer" if minimum == 0 else f"at least {minimum}"
        raise argparse.ArgumentTypeError(f"must be {wanted}, got {value}")
    return value


def _count(text: str) -> int:
    """A non-negative integer flag (versions, limits)."""
    return _integer(text, 0)


def _positive(text: str) -> int:
    return _integer(text, 1)


def _hours(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number of hours: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative number of hours, got {text!r}")
    return value


def _columns(text: str, flag: str) -> list[str]:
    """A comma-separated column list: no empty names, no name twice."""
    names = [c.strip() for c in text.split(",")]
    if any(not n for n in names):
        raise InvalidArgumentError(f"{flag} has an empty column name: {text!r}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidArgumentError(f"{flag} lists {', '.join(map(repr, twice))} more than once")
    return names


# Engine messages are written for Python callers and name keyword arguments; the same errors,
# raised for a command line, name the flags instead. Each verb lists the spellings its engine
# calls can produce (checked by tests/engine/test_cli_flags.py, which runs the CLI).
_COMMON_WORDING = [
    (re.compile(r"\bversion must be\b"), "--version must be"),
    (re.compile(r", a datetime, or milliseconds since the epoch"), " or milliseconds since the epoch"),
]
_WORDING = {
    "history": [(re.compile(r"\blimit must be\b"), "--limit must be")],
    "optimize": [
        (re.compile(r"\btarget_file_size must\b"), "--target-file-size must"),
        (re.compile(r"\bmin_num_files must\b"), "--min-num-files must"),
        (re.compile(r"\bin zorder_by\b"), "in --zorder-by"),
    ],
    "vacuum": [
        (re.compile(r"\b(?:pass )?enforce_retention=False\b"), "pass --no-enforce-retention"),
        (re.compile(r"\bUse a retention of at least ([^,]+?) hours"), r"Use --retention-hours \1 or more"),
        (re.compile(r"\bretention_hours must\b"), "--retention-hours must"),
    ],
    "restore": [(re.compile(r"\ba version to restore must\b"), "--to-version must")],
    "generate-manifest": [
        (
            re.compile(r"rewrite those files \(copy-on-write\) first"),
            "rewrite those files first (deltaplane optimize URI --purge)",
        )
    ],
}


def cli_wording(command: str | None, message: str) -> str:
    """``message`` with the Python keyword arguments of ``command``'s engine calls replaced by the
    command's flags (``enforce_retention=False`` -> ``--no-enforce-retention``)."""
    for pattern, flag in _WORDING.get(command or "", []) + _COMMON_WORDING:
        message = pattern.sub(flag, message)
    return message


def _open(args) -> DeltaTable:
    return DeltaTable(
        args.uri,
        version=getattr(args, "version", None),
        timestamp=getattr(args, "timestamp", None),
        storage_options=_storage_options(args.storage_option),
    )


def cmd_describe(args) -> int:
    info = describe_snapshot(_open(args).snapshot)
    if args.json:
        print(_dump(info))
        return 0
    print(f"table        {info['uri']}")
    print(f"version      {info['version']} ({info['timestamp_iso']})")
    protocol = info["protocol"]
    reader, writer = protocol["min_reader_version"], protocol["min_writer_version"]
    print(f"protocol     reader {reader}, writer {writer}")
    reader_features = protocol["reader_features"] or []
    writer_only = [f for f in protocol["writer_features"] or [] if f not in reader_features]
    features = reader_features + writer_only
    if features:
        print(f"features     {', '.join(features)}")
    print(f"partitions   {', '.join(info['partition_columns']) or '(none)'}")
    rows = "unknown (files without stats)" if info["num_rows"] is None else f"{info['num_rows']:,}"
    print(f"files        {info['num_files']:,} ({info['size_bytes']:,} bytes), rows {rows}")
    if info["num_files_with_dvs"]:
        deleted, files = info["num_deleted_rows_in_dvs"], info["num_files_with_dvs"]
        print(f"deletions    {deleted:,} rows in {files:,} deletion vectors")
    print(f"tombstones   {info['num_tombstones']:,}")
    checkpoint = info["checkpoint_version"]
    print(f"checkpoint   {checkpoint if checkpoint is not None else '(none)'}")
    print("schema")
    for f in info["schema"]["fields"]:
        t = f["type"] if isinstance(f["type"], str) else f["type"]["type"]
        print(f"  {f['name']:<24} {t}{'' if f['nullable'] else ' NOT NULL'}")
    if info["properties"]:
        print("properties")
        for k, v in sorted(info["properties"].items()):
            print(f"  {k} = {v}")
    return 0


def cmd_history(args) -> int:
    entries = _open(args).history(limit=args.limit)
    if args.json:
        print(_dump(entries))
        return 0
    print(f"{'version':>8}  {'timestamp':<25} {'operation':<24} parameters")
    for e in entries:
        when = dt.datetime.fromtimestamp(e["timestamp"] / 1000, dt.UTC).isoformat(timespec="seconds")
        params = _dump(e.get("operationParameters", {}))
        print(f"{e['version']:>8}  {when:<25} {e.get('operation', ''):<24} {params[:80]}")
    return 0


def cmd_read(args) -> int:
    table = _open(args)
    columns = _columns(args.columns, "--columns") if args.columns else None
    if args.limit is not None and args.limit < 0:
        raise InvalidArgumentError(f"--limit must not be negative, got {args.limit}")
    reader = table.to_batches(columns=columns, filter=args.filter)
    batches, count = [], 0
    for batch in reader:
        if args.limit is not None and count + batch.num_rows >= args.limit:
            batch = batch.slice(0, args.limit - count)
        count += batch.num_rows
        if args.json:  # one object per line, streamed: a reader may stop early
            for row in batch.to_pylist():
                print(_dump(row))
        else:
            batches.append(batch)
        if args.limit is not None and count >= args.limit:
            break
    if args.json:
        return 0
    result = pa.Table.from_batches(batches, schema=reader.schema)
    _print_rows(result)
    print(f"({result.num_rows} row{'s' if result.num_rows != 1 else ''})", file=sys.stderr)
    return 0


def _print_rows(table: pa.Table, width: int = 30) -> None:
    def cell(v: Any) -> str:
        text = "NULL" if v is None else _dump(v) if isinstance(v, dict | list) else str(v)
        return text if len(text) <= width else text[: width - 1] + "…"

    rows = [[cell(v) for v in row.values()] for row in table.to_pylist()]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(table.column_names)]
    print("  ".join(c.ljust(w) for c, w in zip(table.column_names, widths, strict=True)))
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))


def _progress_logging() -> None:
    """Long maintenance commands report progress on stderr (stdout stays for results)."""
    import logging

    logging.basicConfig(level=logging.INFO, format="deltaplane: %(message)s", stream=sys.stderr)


def cmd_optimize(args) -> int:
    _progress_logging()
    table = _open(args)
    zorder = _columns(args.zorder_by, "--zorder-by") if args.zorder_by else None
    size = parse_size(args.target_file_size, "--target-file-size") if args.target_file_size else None
    result = table.optimize(
        target_file_size=size,
        zorder_by=zorder,
        filter=args.filter,
        dry_run=args.dry_run,
        min_num_files=args.min_num_files,
        purge=args.purge,
        max_concurrent_bins=args.max_concurrent_bins,
    )
    if args.dry_run:
        plan = result.describe()
        if args.json:
            print(_dump(plan))
            return 0
        print(
            f"would rewrite {plan['numFilesToRewrite']:,} files ({plan['numBytesToRewrite']:,} bytes) "
            f"in {plan['numBins']} bins over {plan['numPartitions']} partitions; "
            f"{plan['totalFilesSkipped']:,} of {plan['totalConsideredFiles']:,} files stay"
        )
        return 0
    metrics = result.to_dict()
    if args.json:
        print(_dump(metrics))
        return 0
    if result.version is None:
        print(f"nothing to optimize ({metrics['total_considered_files']:,} files considered)")
        return 0
    print(
        f"version {result.version}: {metrics['num_files_removed']:,} files "
        f"({metrics['bytes_removed']:,} bytes) -> {metrics['num_files_added']:,} files "
        f"({metrics['bytes_added']:,} bytes) in {metrics['partitions_optimized']} partitions, "
        f"{metrics['seconds']:.1f}s"
    )
    return 0


def cmd_health(args) -> int:
    table = _open(args)
    size = parse_size(args.small_file_size, "--small-file-size") if args.small_file_size else None
    health = table.health(small_file_size=size)
    from deltaplane.engine.auto_optimize import AutoOptimizePolicy, decide_auto_optimize

    decision = decide_auto_optimize(health, AutoOptimizePolicy.for_table(table.snapshot))
    if args.json:
        print(_dump({**health.to_dict(), "auto_optimize": decision.to_dict()}))
        return 0
    rows = "unknown" if health.num_rows is None else f"{health.num_rows:,}"
    print(f"table        {health.uri} (version {health.version})")
    print(
        f"files        {health.num_files:,} ({health.size_bytes:,} bytes), {health.num_partitions} partitions"
    )
    deleted = f"{health.num_deleted_rows:,} hidden by deletion vectors ({health.deleted_rows_ratio:.1%})"
    print(f"rows         {rows}, {deleted}")
    print(f"small files  {health.num_small_files:,} under {health.small_file_size:,} bytes")
    lag = health.versions_since_checkpoint
    checkpoint = health.last_checkpoint_version
    print(f"checkpoint   {checkpoint if checkpoint is not None else '(none)'}, {lag} commits to replay")
    for label, event in (("optimize", health.last_optimize), ("vacuum", health.last_vacuum)):
        when = (
            f"version {event.version} at "
            f"{dt.datetime.fromtimestamp(event.timestamp / 1000, dt.UTC).isoformat(timespec='seconds')}"
            if event
            else "(never, in recent history)"
        )
        print(f"last {label:<7} {when}")
    print("file sizes")
    for bucket in health.file_size_histogram:
        if bucket["num_files"]:
            print(f"  >= {bucket['min_bytes']:>13,} bytes  {bucket['num_files']:>8,} files")
    where = ", ".join(name or "(table)" for name in decision.partition_names)
    print(f"auto-optimize: {'compact ' + where if decision.compact else 'nothing to do'}")
    for reason in decision.reasons:
        print(f"  {reason}")
    return 0


def cmd_vacuum(args) -> int:
    _progress_logging()
    files = _open(args).vacuum(
        retention_hours=args.retention_hours,
        dry_run=not args.execute,
        enforce_retention=not args.no_enforce_retention,
        mode=args.mode,
    )
    if args.json:
        metrics = files.metrics.to_dict() if files.metrics is not None else None
        print(
            _dump(
                {
                    "dry_run": not args.execute,
                    "plan": files.plan.describe(),
                    "metrics": metrics,
                    "files": files,
                }
            )
        )
        return 0
    for f in files:
        print(f)
    size = files.plan.size_of_data_to_delete
    verb = "deleted" if args.execute else "would delete (run with --execute to delete)"
    print(f"{verb} {len(files):,} files, {size:,} bytes", file=sys.stderr)
    return 0


def cmd_cleanup_log(args) -> int:
    _progress_logging()
    result = _open(args).cleanup_log(dry_run=args.dry_run)
    info = result.describe() if args.dry_run else result.to_dict()
    if args.json:
        print(_dump(info))
        return 0
    count = result.num_files if args.dry_run else result.num_deleted_files
    if result.skipped_reason or not count:
        why = result.skipped_reason or "no log files older than the retention precede a checkpoint"
        print(f"nothing deleted: {why}")
        return 0
    if args.dry_run:
        readable = result.checkpoint_version
        print(f"would delete {result.num_files:,} log files; earliest readable version {readable}")
    else:
        readable = result.earliest_version
        print(f"deleted {result.num_deleted_files:,} log files; earliest readable version {readable}")
    return 0


def cmd_generate_manifest(args) -> int:
    metrics = _open(args).generate_manifest()
    info = metrics.as_dict()
    if args.json:
        print(_dump(info))
        return 0
    written, stale = metrics.manifests_written, metrics.manifests_deleted
    print(f"wrote {written:,} manifests ({metrics.data_files:,} data files), deleted {stale:,} stale")
    return 0


def cmd_restore(args) -> int:
    table = _open(args)
    result = table.restore(version=args.to_version, timestamp=args.to_timestamp, dry_run=args.dry_run)
    if args.dry_run:
        info = result.describe()
        print(_dump(info) if args.json else "\n".join(f"{k}: {v}" for k, v in info.items()))
        return 0
    if args.json:
        print(_dump({"version": result.version, "skipped": result.skipped, **result.operation_metrics}))
        return 0
    if result.skipped:
        print(f"already at that state (version {result.version}): nothing committed")
        return 0
    m = result.operation_metrics
    print(
        f"version {result.version}: restored {m.get('numRestoredFiles')} files, removed "
        f"{m.get('numRemovedFiles')}; {m.get('numOfFilesAfterRestore')} files after the restore"
    )
    return 0


def cmd_repair(args) -> int:
    _progress_logging()
    table = _open(args)
    plan = table.repair(dry_run=True, include_missing_deletion_vectors=args.include_missing_deletion_vectors)
    result = None
    if args.execute and plan.files_to_remove:
        result = table.repair(
            dry_run=False, include_missing_deletion_vectors=args.include_missing_deletion_vectors
        )
    if args.json:
        info = plan.describe()
        info["version"] = None if result is None else result.version
        print(_dump(info))
        return 0
    for path in plan.missing_files:
        print(f"missing data file: {path}")
    for path in plan.missing_deletion_vectors:
        print(f"missing deletion vector of: {path}")
    if result is not None:
        print(f"version {result.version}: removed {len(plan.files_to_remove):,} entries", file=sys.stderr)
    elif plan.files_to_remove:
        print(f"would remove {len(plan.files_to_remove):,} entries (run with --execute)", file=sys.stderr)
    else:
        print("nothing to repair: every live file is present", file=sys.stderr)
    return 0


def cmd_demo(args) -> int:
    from deltaplane.engine.demo import run_demo

    return run_demo(args.path, as_json=args.json)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the usage is one ``--help`` away."""

    def error(self, message: str):
        raise _UsageError(f"{message} (see '{self.prog} --help')")


class _UsageError(Exception):
    pass


_DESCRIPTION = """\
Delta Lake tables from the command line: inspect (describe, history, read, health), maintain
(optimize, vacuum, cleanup-log, generate-manifest) and recover (restore, repair) tables on a local
disk or S3. Every command prints JSON with --json; errors print one line and exit with 2."""


def build_parser() -> argparse.ArgumentParser:
    """The ``deltaplane`` command line: every verb and its flags.

    Long because it is a declaration, one ``add_argument`` per flag of every verb in the order
    ``--help`` shows them: the CLI's reference in one place.
    """
    parser = _Parser(
        prog="deltaplane", description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"deltaplane {ENGINE_VERSION}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(p: argparse.ArgumentParser, *, time_travel: bool) -> None:
        p.add_argument(
            "uri", help="table location: a path, file:///path, s3://bucket/prefix or memory://name"
        )
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.add_argument(
            "--storage-option",
            action="append",
            metavar="KEY=VALUE",
            help="object store option, repeatable (S3: endpoint_url, aws_access_key_id, "
            "aws_secret_access_key, aws_region)",
        )
        if time_travel:
            group = p.add_mutually_exclusive_group()
            group.add_argument("--version", type=_count, help="read this version")
            group.add_argument(
                "--timestamp",
                help="read the version current at this time (ISO-8601, UTC if no zone)",
            )

    p = sub.add_parser("describe", help="summary of a table: version, schema, files, protocol")
    common(p, time_travel=True)
    p.set_defaults(func=cmd_describe)

    p = sub.add_parser("history", help="commits, newest first")
    common(p, time_travel=False)
    p.add_argument("--limit", type=_count, help="at most this many commits")
    p.set_defaults(func=cmd_history)

    p = sub.add_parser("read", help="print rows")
    common(p, time_travel=True)
    p.add_argument("--filter", help="SQL predicate, e.g. \"id > 5 AND date = '2026-01-01'\"")
    p.add_argument("--columns", help="comma-separated columns to print")
    p.add_argument("--limit", type=int, help="at most this many rows")
    p.set_defaults(func=cmd_read)

    p = sub.add_parser("optimize", help="compact small files (or Z-order) without changing rows")
    common(p, time_travel=False)
    p.add_argument("--target-file-size", help="e.g. 128MB or 1GB (default: delta.targetFileSize, else 1GB)")
    p.add_argument("--zorder-by", help="comma-separated columns to Z-order by")
    p.add_argument("--filter", help="partition predicate, e.g. \"date >= '2026-01-01'\"")
    p.add_argument(
        "--min-num-files", type=_positive, default=2, help="rewrite a bin only with this many files"
    )
    p.add_argument("--purge", action="store_true", help="rewrite every file that has a deletion vector")
    p.add_argument(
        "--max-concurrent-bins", type=_positive, help="bins rewritten at once (default: CPU count)"
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.set_defaults(func=cmd_optimize)

    p = sub.add_parser("health", help="small files, deletion vectors, checkpoint lag, last maintenance")
    common(p, time_travel=True)
    p.add_argument("--small-file-size", help="files under this size count as small (default 128MB)")
    p.set_defaults(func=cmd_health)

    p = sub.add_parser(
        "vacuum", help="delete files no version within the retention needs (lists unless --execute)"
    )
    common(p, time_travel=False)
    p.add_argument(
        "--retention-hours", type=_hours, help="default: delta.deletedFileRetentionDuration (7 days)"
    )
    p.add_argument(
        "--mode", choices=["full", "lite"], default="full", help="lite: from the log only, no listing"
    )
    p.add_argument(
        "--no-enforce-retention", action="store_true", help="allow a retention shorter than the table's"
    )
    p.add_argument("--execute", action="store_true", help="delete (default: only list what would go)")
    p.set_defaults(func=cmd_vacuum)

    p = sub.add_parser(
        "cleanup-log", help="delete commits and checkpoints older than delta.logRetentionDuration"
    )
    common(p, time_travel=False)
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.set_defaults(func=cmd_cleanup_log)

    p = sub.add_parser("generate-manifest", help="write symlink manifests for Presto/Trino/Athena")
    common(p, time_travel=False)
    p.set_defaults(func=cmd_generate_manifest)

    p = sub.add_parser("restore", help="make an earlier version current again (a new commit)")
    common(p, time_travel=False)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-version", type=_count, help="the version to restore")
    target.add_argument("--to-timestamp", help="restore the version current at this time (ISO-8601)")
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.set_defaults(func=cmd_restore)

    p = sub.add_parser(
        "repair", help="remove log entries for data files that are gone (FSCK; lists unless --execute)"
    )
    common(p, time_travel=False)
    p.add_argument("--execute", action="store_true", help="commit the removals (default: only list them)")
    p.add_argument(
        "--include-missing-deletion-vectors",
        action="store_true",
        help="also remove files whose deletion vector file is gone (drops all their rows)",
    )
    p.set_defaults(func=cmd_repair)

    # Verbs contributed by installed layers above the engine (the platform's ``config``),
    # declared as entry points so the engine never imports them.
    from importlib.metadata import entry_points

    for plugin in entry_points(group="deltaplane.cli"):
        try:
            plugin.load()(sub)
        except Exception as e:  # a broken add-on must not take the engine's verbs down with it
            print(f"deltaplane: ignoring command {plugin.name!r}: {e}", file=sys.stderr)

    p = sub.add_parser("demo", help="create a demo table, read it back and describe it")
    p.add_argument("path", nargs="?", default="./demo-table", help="folder for the demo table")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_demo)
    return parser


def _fail(message: str, status: int = 2) -> int:
    """One line on stderr, whatever the message holds."""
    line = " ".join(str(message).split())
    print(f"deltaplane: error: {line}", file=sys.stderr)
    return status


def main(argv: list[str | os.PathLike[str]] | None = None) -> int:
    """Run one command; ``argv`` (default ``sys.argv[1:]``) may hold ``os.PathLike`` items, as
    ``subprocess`` arguments may."""
    args = None
    try:
        if argv is not None:
            argv = [os.fspath(a) if isinstance(a, os.PathLike) else a for a in argv]
        args = build_parser().parse_args(argv)
        return args.func(args)
    except _UsageError as e:
        return _fail(str(e))
    except BrokenPipeError:
        # The reader closed the pipe (``| head``): stop quietly, and keep Python from complaining
        # about the unflushable stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except (DeltaError, ValueError) as e:  # ValueError: malformed arguments, e.g. a timestamp
        return _fail(cli_wording(getattr(args, "command", None), str(e)))
    except OSError as e:  # the machine, not the table: a full disk, a closed terminal
        return _fail(f"{e.strerror or e}" + (f": {e.filename}" if getattr(e, "filename", None) else ""))


if __name__ == "__main__":
    sys.exit(main())
