"""The data source's options, as Delta Spark names them, parsed and checked once.

Spark hands options over as case-insensitive strings. Storage options for the engine's object
store are the ``storage.<key>`` options (``storage.endpoint_url``, ``storage.aws_region``...);
without them the store uses the environment (``AWS_ENDPOINT_URL``, boto3's credential chain).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from deltaplane.engine import InvalidArgumentError
from deltaplane.engine import parse_size as parse_engine_size

STORAGE_PREFIX = "storage."
# Spark's defaults (spark.sql.files.maxPartitionBytes, spark.sql.files.openCostInBytes); the same
# numbers as deltaplane.engine.portable's, kept here so that parsing options imports no engine.
DEFAULT_PARTITION_BYTES = 128 * 1024 * 1024
DEFAULT_OPEN_COST_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_FILES_PER_TRIGGER = 1000  # Delta Spark's maxFilesPerTrigger default
# A Python data source task costs PySpark tens of milliseconds before it reads anything (256 empty
# tasks: 8 s on local[2]), where Spark's own file tasks cost almost nothing; so unless
# maxPartitionNum says otherwise a read makes at most this many tasks per core.
DEFAULT_TASKS_PER_CORE = 3


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _bool(options: dict[str, str], name: str, default: bool = False) -> bool:
    value = options.get(name.lower())
    if value is None:
        return default
    if value.strip().lower() in ("true", "1", "yes"):
        return True
    if value.strip().lower() in ("false", "0", "no"):
        return False
    raise InvalidArgumentError(f"option {name} must be true or false, got {value!r}")


def _int(options: dict[str, str], name: str, *, minimum: int = 0) -> int | None:
    value = options.get(name.lower())
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        raise InvalidArgumentError(f"option {name} must be an integer, got {value!r}") from None
    if number < minimum:
        raise InvalidArgumentError(f"option {name} must be at least {minimum}, got {number}")
    return number


def _size(options: dict[str, str], name: str, *, zero: bool = False) -> int | None:
    """A byte count option (``134217728``, ``128m``, ``128MiB``); ``None`` when not given;
    ``zero`` allows ``0``."""
    value = options.get(name.lower())
    if value is None or value == "":
        return None
    if zero and value.strip() == "0":
        return 0
    return parse_engine_size(value, f"option {name}")


def parse_size(text: str | None, what: str = "size") -> int | None:
    """A byte count given on a command line (``134217728``, ``128m``, ``1g``); ``None`` if absent."""
    return parse_engine_size(text, what) if text else None


def _path(options: dict[str, str]) -> str:
    path = options.get("path")
    if not path:
        raise InvalidArgumentError(
            "the deltaplane data source needs the table's location: .load(uri) or .save(uri)"
        )
    return path


def storage_options(options: Mapping[str, str]) -> dict[str, str]:
    return {k[len(STORAGE_PREFIX) :]: v for k, v in _lower(options).items() if k.startswith(STORAGE_PREFIX)}


@dataclass(frozen=True)
class TableOptions:
    uri: str
    storage_options: dict[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class ReadOptions(TableOptions):
    version: int | None = None
    timestamp: str | None = None
    max_partition_bytes: int = DEFAULT_PARTITION_BYTES
    open_cost_bytes: int = DEFAULT_OPEN_COST_BYTES
    min_partitions: int | None = None
    max_partitions: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        """A batch read's options. Tasks are planned as Spark plans a file scan:
        ``maxPartitionBytes`` (default 128m) is the most one task reads, ``openCostInBytes``
        (default 4m, may be 0) what opening one file is counted as, ``minPartitions`` the
        number of tasks a small table is still spread over (default: the session's default
        parallelism as ``register(spark)`` found it, else the planning machine's cores), and
        ``maxPartitionNum`` the most tasks (default: 3 per ``minPartitions``; more are packed
        again into about that many, as Spark's ``spark.sql.files.maxPartitionNum`` does)."""
        o = _lower(options)
        version = _int(o, "versionAsOf")
        timestamp = o.get("timestampasof") or None
        if version is not None and timestamp is not None:
            raise InvalidArgumentError("give versionAsOf or timestampAsOf, not both")
        max_bytes = _size(o, "maxPartitionBytes")
        open_cost = _size(o, "openCostInBytes", zero=True)
        return cls(
            uri=_path(o),
            storage_options=storage_options(o),
            version=version,
            timestamp=timestamp,
            max_partition_bytes=DEFAULT_PARTITION_BYTES if max_bytes is None else max_bytes,
            open_cost_bytes=DEFAULT_OPEN_COST_BYTES if open_cost is None else open_cost,
            min_partitions=_int(o, "minPartitions", minimum=1),
            max_partitions=_int(o, "maxPartitionNum", minimum=1),
        )

    def at_version(self, version: int) -> ReadOptions:
        """The same read pinned to ``version`` (a ``timestampAsOf`` already resolved to it)."""
        return replace(self, version=version, timestamp=None)

    def open(self):
        from deltaplane.engine import DeltaTable

        return DeltaTable(
            self.uri, version=self.version, timestamp=self.timestamp, storage_options=self.storage_options
        )


@dataclass(frozen=True)
class WriteOptions(TableOptions):
    replace_where: str | None = None
    partition_by: list[str] | None = None
    merge_schema: bool = False
    overwrite_schema: bool = False
    dynamic_partitions: bool = False
    app_id: str | None = None
    app_version: int | None = None
    user_metadata: str | None = None
    target_file_size: int | None = None
    commit_metadata: dict | None = None  # commitMetadata: a JSON object merged into commitInfo
    stage_manifest: str | None = None  # stageManifest: write the files, record them there, commit nothing
    # a new table's settings (an existing table's must agree): tableProperties (a JSON object), clusterBy
    properties: dict | None = None
    cluster_by: list[str] | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        o = _lower(options)
        partition_by, cluster_by = o.get("partitionby"), o.get("clusterby")
        mode = (o.get("partitionoverwritemode") or "static").lower()
        if mode not in ("static", "dynamic"):
            raise InvalidArgumentError(
                f"option partitionOverwriteMode must be static or dynamic, got {mode!r}"
            )
        app_id = o.get("txnappid") or None
        app_version = _int(o, "txnVersion")
        if (app_id is None) != (app_version is None):
            raise InvalidArgumentError("options txnAppId and txnVersion go together")
        return cls(
            uri=_path(o),
            storage_options=storage_options(o),
            replace_where=o.get("replacewhere") or None,
            partition_by=[c.strip() for c in partition_by.split(",") if c.strip()] if partition_by else None,
            merge_schema=_bool(o, "mergeSchema"),
            overwrite_schema=_bool(o, "overwriteSchema"),
            dynamic_partitions=mode == "dynamic",
            app_id=app_id,
            app_version=app_version,
            user_metadata=o.get("usermetadata"),
            target_file_size=_size(o, "targetFileSize"),
            commit_metadata=_json_object(o, "commitMetadata"),
            stage_manifest=o.get("stagemanifest") or None,
            properties=_json_object(o, "tableProperties"),
            cluster_by=[c.strip() for c in cluster_by.split(",") if c.strip()] if cluster_by else None,
        )


def _json_object(options: dict[str, str], name: str) -> dict | None:
    value = options.get(name.lower())
    if not value:
        return None
    try:
        parsed = json.loads(value)
    except ValueError as e:
        raise InvalidArgumentError(f"option {name} must be a JSON object: {e}") from None
    if not isinstance(parsed, dict):
        raise InvalidArgumentError(f"option {name} must be a JSON object, got {value!r}")
    return parsed


@dataclass(frozen=True)
class StreamOptions(TableOptions):
    starting_version: int | None = None  # None: the table's current state first, then new commits
    starting_latest: bool = False  # startingVersion=latest: only commits after the current version
    max_files: int | None = None
    max_bytes: int | None = None
    skip_change_commits: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> StreamOptions:
        """A streaming read's options. Admission control is Delta Spark's: ``maxFilesPerTrigger``
        (at least 1) and ``maxBytesPerTrigger`` bound each micro-batch, both apply when both are
        given, and with neither a micro-batch takes at most 1,000 files (Delta Spark's default;
        ``maxBytesPerTrigger`` alone sets no file limit)."""
        o = _lower(options)
        starting = o.get("startingversion")
        latest = starting is not None and starting.strip().lower() == "latest"
        max_files = _int(o, "maxFilesPerTrigger", minimum=1)
        max_bytes = _size(o, "maxBytesPerTrigger")
        if max_files is None and max_bytes is None:
            max_files = DEFAULT_MAX_FILES_PER_TRIGGER
        return cls(
            uri=_path(o),
            storage_options=storage_options(o),
            starting_version=None if latest else _int(o, "startingVersion"),
            starting_latest=latest,
            max_files=max_files,
            max_bytes=max_bytes,
            skip_change_commits=_bool(o, "skipChangeCommits"),
        )
