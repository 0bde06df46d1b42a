"""Ingest landing files (CSV, JSON lines, Parquet; globs) into a table with Spark.

    python -m deltaplane.spark_jobs.ingest --table s3://lake/trips --source 'landing/2026-11-22/*.csv' \\
        --partition-by pickup_date --app-id ingest.trips --app-version 20261122

``--stage MANIFEST`` writes the data files and a staged-commit manifest there, and commits
nothing (a quality gate reads the batch, then ``--commit-staged MANIFEST`` commits it or the
files are quarantined). The manifest also records the local source files the batch was read from
(``{"landing": {"files": [...]}}``, as the in-process stage records them), so a gate that rejects
the batch moves them to the quarantine with it. The job itself leaves the source files where they
are; the Airflow operator moves them out of the landing folder once the batch is staged.

Exactly once, like ``COPY INTO``: the commit records the work key of its source files (their
paths, sizes and modification times, with the mode and predicate), so loading the same files
again writes nothing and reports the version that holds them, while other files always land.
``--app-id``/``--app-version`` give the key explicitly; ``--reprocess`` loads the files again.
Sources are read by Spark, so they must be paths Spark can open (local or cluster file
systems); the table itself may be on S3.
"""

from __future__ import annotations

import json
import os
import uuid
from urllib.parse import unquote, urlsplit

from deltaplane.engine import DeltaTable, TableNotFoundError, WorkKey, read_manifest, write_manifest
from deltaplane.spark_jobs import job

FORMATS = ("csv", "json", "parquet")
RUN_KEY = "deltaplaneJobRun"


def build_parser():
    p = job.parser("ingest", "Load CSV/JSON/Parquet files into a Delta table (append or overwrite).")
    p.add_argument("--source", action="append", help="files to load: a path or glob (repeatable)")
    p.add_argument(
        "--format", choices=FORMATS, help="source format (default: from the first source's extension)"
    )
    p.add_argument("--schema", help="source schema as Spark DDL, e.g. 'id BIGINT, name STRING' (CSV/JSON)")
    p.add_argument("--no-header", action="store_true", help="CSV files have no header line")
    p.add_argument("--partition-by", help="comma-separated partition columns (a new table)")
    p.add_argument("--cluster-by", help="comma-separated liquid clustering columns (a new table)")
    p.add_argument(
        "--property",
        action="append",
        metavar="KEY=VALUE",
        help="a table property of a new table (repeatable); an existing table's must agree",
    )
    p.add_argument("--mode", choices=("append", "overwrite"), default="append")
    p.add_argument(
        "--replace-where", help="with --mode overwrite: replace only the rows matching this predicate"
    )
    p.add_argument("--merge-schema", action="store_true", help="add new source columns to the table")
    p.add_argument("--user-metadata", help="commitInfo.userMetadata")
    p.add_argument("--stage", metavar="MANIFEST", help="write the files and this manifest; commit nothing")
    p.add_argument("--commit-staged", metavar="MANIFEST", help="commit a staged manifest (no Spark needed)")
    p.add_argument(
        "--reprocess",
        action="store_true",
        help="load the files even if these same files were committed before (no work key)",
    )
    return p


def main(args) -> dict:
    options = job.storage_options(args)
    metadata = job.commit_metadata(args)
    if args.commit_staged:
        staged = read_manifest(args.commit_staged, options)
        if staged.spec.uri.rstrip("/") != args.table.rstrip("/"):
            raise job.JobError(f"{args.commit_staged} stages a write to {staged.spec.uri}, not {args.table}")
        result = staged.commit(commit_metadata=metadata)
        out = {
            "action": "commit-staged",
            "version": None if result.skipped else result.version,
            "skipped": result.skipped,
            "files": len(staged.adds),
            "rows": staged.num_rows,
            "bytes": staged.num_bytes,
        }
        if result.skipped and staged.spec.app_id is not None:
            table = DeltaTable(args.table, storage_options=options)
            out |= job.already_done(table, WorkKey(staged.spec.app_id, staged.spec.app_version)) or {}
        return out
    if not args.source:
        raise job.JobError("give --source (files to load) or --commit-staged")
    key = job.work_key(args)
    if any(s.startswith(("s3://", "s3a://")) for s in args.source):
        raise job.JobError(
            "Spark here has no S3 connector (hadoop-aws): land source files where Spark can read them "
            "(a local or cluster file system); the table itself may be on S3"
        )
    fmt = args.format or _format_of(args.source[0])
    spark = job.spark_session(args, "ingest")
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", str(not args.no_header).lower())
        if not args.schema:
            reader = reader.option("inferSchema", "true")
    if args.schema:
        reader = reader.schema(args.schema)
    df = reader.load(args.source)
    if key is None and not args.reprocess:
        files = source_identities(spark, df, args.source)
        key = WorkKey.named("files", {"files": files, "mode": args.mode, "replaceWhere": args.replace_where})
    if key is not None and not args.stage:  # a stage writes its (empty) manifest either way
        done = job.already_done(_table_or_none(args.table, options), key)
        if done is not None:
            return {"action": "write", "files": 0, "rows": 0, "bytes": 0, **done}
    token = str(uuid.uuid4())
    writer = df.write.format("deltaplane").mode(args.mode)
    settings = {f"storage.{k}": v for k, v in options.items()}
    settings["commitMetadata"] = json.dumps({**metadata, RUN_KEY: token})
    for name, value in (
        ("partitionBy", args.partition_by),
        ("clusterBy", args.cluster_by),
        ("tableProperties", json.dumps(_properties(args.property)) if args.property else None),
        ("replaceWhere", args.replace_where),
        ("mergeSchema", "true" if args.merge_schema else None),
        ("txnAppId", key.app_id if key is not None else None),
        ("txnVersion", key.version if key is not None else None),
        ("userMetadata", args.user_metadata),
        ("stageManifest", args.stage),
    ):
        if value is not None:
            settings[name] = str(value)
    writer.options(**settings).save(args.table)
    if args.stage:
        staged = read_manifest(args.stage, options)
        landing = sorted({p for p in map(local_path, df.inputFiles()) if p is not None})
        write_manifest(args.stage, staged, options, landing=landing)
        return {
            "action": "stage",
            "version": None,
            "manifest": args.stage,
            "files": len(staged.adds),
            "rows": staged.num_rows,
            "bytes": staged.num_bytes,
            "skipped": staged.spec.skip,
            "work": staged.spec.app_id,
            "landing_files": landing,
        }
    return {"action": "write", **_commit_of(args.table, options, token, key)}


def _properties(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise job.JobError(f"--property takes KEY=VALUE, got {pair!r}")
        out[key.strip()] = value
    return out


def local_path(source: str) -> str | None:
    """The local file system path of a source (a plain path or a ``file:`` URI, as
    ``DataFrame.inputFiles()`` gives them, percent-encoded); ``None`` for other file systems."""
    parts = urlsplit(source)
    if parts.scheme == "file":
        return unquote(parts.path)
    if parts.scheme and len(parts.scheme) > 1:  # hdfs:, s3a:...; a one-letter scheme is a drive
        return None
    return os.path.abspath(source)


def local_matches(sources: list[str]) -> list[str]:
    """The local files Spark reads for ``sources`` (paths, globs, folders; ``file:`` URIs):
    glob matches and the files under matched folders, leaving out names starting with ``_`` or
    ``.`` as Spark does (so ``<landing>/_processed/`` is never read again). Sources on other file
    systems are left out."""
    import glob

    def hidden(name: str) -> bool:
        return name.startswith(("_", "."))

    found: set[str] = set()
    for source in sources:
        path = local_path(source)
        if path is None:
            continue
        for match in (m for pattern in _braces(path) for m in glob.glob(pattern)):
            if os.path.isfile(match):
                if not hidden(os.path.basename(match)):
                    found.add(os.path.abspath(match))
                continue
            for folder, dirs, files in os.walk(match):
                dirs[:] = [d for d in dirs if not hidden(d)]
                found.update(os.path.abspath(os.path.join(folder, f)) for f in files if not hidden(f))
    return sorted(found)


def source_identities(spark, df, sources: list[str] | None = None) -> list[list]:
    """``deltaplane.engine.work.file_identities`` of the files Spark reads for ``df`` (size and modification
    time from the file system Spark reads them with).

    Files are named as ``df.inputFiles()`` names them, on a classic session and on Spark Connect
    alike, so the same files make the same work key either way. A classic session asks the
    driver's Hadoop file system; a Connect session has no JVM to ask, so it lists ``sources``
    (``df``'s own paths and globs) with Spark's ``binaryFile`` source, which reports every file's
    length and modification time without reading it.
    """
    from deltaplane.engine import file_identities

    inputs = df.inputFiles()
    if _is_connect(spark):
        out = _listed_identities(spark, inputs, sources or inputs)
    else:
        jvm = spark.sparkContext._jvm
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        out = []
        for uri in inputs:
            path = jvm.org.apache.hadoop.fs.Path(jvm.java.net.URI(uri))  # a URI: "a%20b" is "a b"
            status = path.getFileSystem(conf).getFileStatus(path)
            out.append((uri, status.getLen(), status.getModificationTime()))
    if not out:
        raise job.JobError("the sources matched no files")
    return file_identities(out)


def _is_connect(spark) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _listed_identities(spark, inputs: list[str], sources: list[str]) -> list[tuple[str, int, int]]:
    """``(uri, size, modification ms)`` of every file of ``inputs`` (URIs, as ``inputFiles()``
    gives them), listed through the ``binaryFile`` source (which names files by Hadoop path,
    not encoded)."""
    from pyspark.sql import functions as F

    listed = (
        spark.read.format("binaryFile")
        .load(sources)
        .select("path", "length", F.unix_millis("modificationTime").alias("modified"))
        .collect()
    )
    found = {_hadoop_path_key(r["path"]): (int(r["length"]), int(r["modified"])) for r in listed}
    out = []
    for uri in inputs:
        status = found.get(_uri_key(uri))
        if status is None:
            raise job.JobError(f"cannot find the size and modification time of {uri}", job.EXIT_TABLE)
        out.append((uri, *status))
    return out


def _uri_key(uri: str) -> tuple[str, str, str]:
    """A file URI (percent-encoded) as (scheme, authority, decoded path)."""
    parts = urlsplit(uri)
    return parts.scheme.lower(), parts.netloc, unquote(parts.path)


def _hadoop_path_key(path: str) -> tuple[str, str, str]:
    """A Hadoop ``Path`` string (``scheme:[//authority]/path``, not encoded: ``#``, ``%`` and
    ``?`` are part of the name) as (scheme, authority, path)."""
    scheme, sep, rest = path.partition(":")
    if not sep or "/" in scheme:
        return "", "", path
    authority = ""
    if rest.startswith("//"):
        authority, slash, tail = rest[2:].partition("/")
        rest = slash + tail
    return scheme.lower(), authority, rest


def _braces(pattern: str) -> list[str]:
    """Hadoop's glob alternatives expanded (``a.{csv,txt}`` -> ``a.csv``, ``a.txt``; nested too),
    which Python's ``glob`` does not know."""
    depth, start = 0, None
    for i, char in enumerate(pattern):
        if char == "{":
            if depth == 0:
                start = i
            depth += 1
        elif char == "}" and depth:
            depth -= 1
            if depth == 0:
                inner, parts, level, begin = pattern[start + 1 : i], [], 0, 0
                for j, c in enumerate(inner):
                    level += (c == "{") - (c == "}")
                    if c == "," and level == 0:
                        parts.append(inner[begin:j])
                        begin = j + 1
                parts.append(inner[begin:])
                head, tail = pattern[:start], pattern[i + 1 :]
                return [out for part in parts for out in _braces(head + part + tail)]
    return [pattern]


def _table_or_none(uri: str, options: dict):
    try:
        return DeltaTable(uri, storage_options=options)
    except TableNotFoundError:
        return None


def _format_of(source: str) -> str:
    name = source.lower().rstrip("/*")
    for fmt, suffixes in (
        ("csv", (".csv",)),
        ("json", (".json", ".jsonl", ".ndjson")),
        ("parquet", (".parquet",)),
    ):
        if name.endswith(suffixes):
            return fmt
    raise job.JobError(f"cannot tell the format of {source!r}: give --format ({', '.join(FORMATS)})")


def _commit_of(uri: str, options: dict, token: str, key) -> dict:
    """The commit this run made (found by its run token), or the one that already held its work."""
    table = DeltaTable(uri, storage_options=options)
    for info in table.history(50):
        if info.get(RUN_KEY) == token:
            metrics = info.get("operationMetrics", {})
            return {
                "version": info["version"],
                "skipped": False,
                "files": int(metrics.get("numFiles", 0)),
                "rows": int(metrics.get("numOutputRows", 0)),
                "bytes": int(metrics.get("numOutputBytes", 0)),
            }
    done = job.already_done(table, key) or {"version": None, "skipped": True}
    return {"files": 0, "rows": 0, "bytes": 0, **done}


if __name__ == "__main__":
    raise SystemExit(job.run("ingest", build_parser(), main))
