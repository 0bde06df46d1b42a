"""``config/tables.yaml``: the tables the platform runs, validated with pydantic.

Every table has a URI and, optionally, a connection, schedules, maintenance settings (target
file size, Z-order columns, retention, auto-optimize thresholds, manifests), an ingest source
with a quality suite, and a consumer. Errors name the file, the table and the key::

    config/tables.yaml: table 'trips': auto_optimize.min_small_files: Input should be greater than 0

A key written twice (which YAML parsers silently resolve by keeping the last) is an error naming
both lines: ``config/tables.yaml: table 'trips': defined twice (lines 2 and 40)``.

Each table is validated on its own. :func:`read_config` returns the valid tables and every
invalid table's errors (the DAG files build the valid tables' DAGs and report the rest as an
Airflow import error); :func:`load_config` is strict: any error is a ``ConfigError`` listing
all of them. Errors of the file itself (not YAML, no ``tables`` mapping, an unknown top-level
key, a table name written twice) are a ``ConfigError`` for both.

``deltaplane config validate [PATH]`` checks a file from the command line (the verb is added to
the engine's CLI through the ``deltaplane.cli`` entry point): every error, exit code 2.

Which file: the path given, else ``$DELTAPLANE_CONFIG``, else ``config/tables.yaml`` in the
current directory (:func:`config_path`). Never a file inside the installed package: an installed
wheel has no tables of its own. The DAG files in ``dags/`` pass their own default (the
repository's ``config/tables.yaml``, found relative to the DAG file) so the DAG processor's
current directory does not matter.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

DEFAULT_PATH = Path("config") / "tables.yaml"  # relative: to the current directory, when used
ENV_VAR = "DELTAPLANE_CONFIG"
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_TOP_LEVEL = ("tables", "maintenance")


class ConfigError(ValueError):
    """The tables configuration is invalid; the message names the file, the table and the key."""


def parse_size(value: Any) -> int:
    """A size in the configuration: bytes or a string such as ``128MB`` / ``128MiB``."""
    from deltaplane.engine import parse_size as parse

    return parse(value, "a size")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


HEALTH = "health"  # schedules.maintenance: run when the table's health says so


class Schedules(_Model):
    maintenance: str | None = "@daily"  # a cron string, "health", or null
    ingest: str | None = None


class AutoOptimize(_Model):
    min_small_files: int = Field(50, gt=0)
    small_file_size: int = 32 << 20
    max_deleted_rows_ratio: float = Field(0.2, ge=0.0, le=1.0)

    _size = field_validator("small_file_size", mode="before")(lambda cls, v: parse_size(v))


class MaintenanceSettings(_Model):
    """The health-driven maintenance policy (``deltaplane.engine.maintenance_plan``): a table's
    ``maintenance`` over the file's ``maintenance.defaults``, over ``auto_optimize``'s thresholds."""

    small_file_size: int | None = None
    min_small_files: int | None = Field(None, gt=0)
    max_deleted_rows_ratio: float | None = Field(None, ge=0.0, le=1.0)
    max_versions_since_checkpoint: int | None = Field(None, gt=0)
    min_vacuum_bytes: int | None = None
    max_bytes_rewritten_per_day: int | None = None
    max_cpu_seconds_per_day: float | None = Field(None, gt=0)
    max_manifest_commits_behind: int | None = Field(None, gt=0)
    min_unclustered_files: int | None = Field(None, gt=0)
    min_tier_files: int | None = Field(None, ge=2)
    kinds: (
        list[
            Literal["compaction", "dv_purge", "clustering", "checkpoint", "log_cleanup", "vacuum", "manifest"]
        ]
        | None
    ) = None
    # how the health-scheduled DAG (schedules.maintenance: health) runs, not the policy itself
    poll_seconds: float | None = Field(None, gt=0)
    yield_minutes: float | None = Field(None, ge=0)

    _sizes = field_validator(
        "small_file_size", "min_vacuum_bytes", "max_bytes_rewritten_per_day", mode="before"
    )(lambda cls, v: None if v is None else parse_size(v))


class MaintenanceSection(_Model):
    """The file's top-level ``maintenance``: defaults for every table and the global cap."""

    defaults: MaintenanceSettings = Field(default_factory=MaintenanceSettings)
    max_concurrent_jobs: int = Field(2, gt=0)
    # An Airflow pool the rewrites of every table's maintenance DAG run in (create it with
    # `airflow pools set <pool> <max_concurrent_jobs> ...`: a task in a pool that does not exist
    # is never scheduled); None: no pool, the cap is the CLI's and the ops view's only.
    pool: str | None = Field(None, min_length=1, max_length=256, pattern=r"^[A-Za-z0-9_.-]+$")


class Expectation(_Model):
    expectation: str
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @field_validator("expectation")
    @classmethod
    def _known_form(cls, v: str) -> str:
        if not re.match(r"^(expect_[a-z0-9_]+|Expect[A-Za-z0-9]+)$", v):
            raise ValueError(f"{v!r} is not an expectation name (expect_... or Expect...)")
        return v


class Quality(_Model):
    """The quality gate of an ingest. A rejected batch is quarantined and fails the gate (no
    retries), whatever ``on_failure`` says: ``"skip"`` is kept so existing files stay valid, but
    no longer hides the rejection behind a green gate and a skipped commit.

    ``max_batch_rows`` / ``max_batch_bytes`` (staged Parquet bytes): the largest batch validated
    whole in memory; a larger one is validated ``chunk_rows`` rows at a time, which row-level
    expectations allow, and is rejected if an expectation needs whole columns (uniqueness, ...)."""

    on_failure: Literal["fail", "skip"] = "fail"
    expectations: list[Expectation] = Field(min_length=1)
    max_batch_rows: int = Field(1_000_000, gt=0)
    max_batch_bytes: int = 256 << 20
    chunk_rows: int = Field(500_000, gt=0)

    _bytes = field_validator("max_batch_bytes", mode="before")(lambda cls, v: parse_size(v))


class Ingest(_Model):
    landing: str  # a directory (or glob) of landing files
    format: Literal["csv", "json", "parquet"] = "parquet"
    # the table's columns as DDL ("id BIGINT NOT NULL, zip STRING"): the first batch creates the
    # table with them, and every batch is read in them (never types guessed from a first file)
    schema_ddl: str | None = Field(None, alias="schema")
    staging: str | None = None  # where staged manifests go (default: <table>/_deltaplane/staging)
    engine: Literal["local", "spark"] = "local"

    @field_validator("schema_ddl")
    @classmethod
    def _parses(cls, v: str | None) -> str | None:
        if v is not None:
            from deltaplane.engine import parse_ddl

            try:
                parse_ddl(v)
            except Exception as e:  # shown as the key's error, with the file and table
                raise ValueError(str(e)) from None
        return v


class Consumer(_Model):
    target: str  # the downstream table
    trigger: Literal["asset", "sensor"] = "asset"
    schedule: str | None = None  # the sensor-driven consumer's schedule


class TableConfig(_Model):
    uri: str
    conn_id: str | None = None
    description: str | None = None
    partition_by: list[str] = Field(default_factory=list)
    cluster_by: list[str] = Field(default_factory=list)  # liquid clustering of a table ingest creates
    properties: dict[str, str] = Field(default_factory=dict)  # table properties of a table ingest creates
    schedules: Schedules = Field(default_factory=Schedules)
    target_file_size: int | None = None
    zorder_by: list[str] = Field(default_factory=list)
    retention_hours: float | None = Field(None, ge=0)
    enforce_retention: bool = True
    vacuum_dry_run: bool = False
    checkpoint_cleanup_log: bool = True
    auto_optimize: AutoOptimize = Field(default_factory=AutoOptimize)
    maintenance: MaintenanceSettings = Field(default_factory=MaintenanceSettings)
    spark_threshold_bytes: int = 8 << 30
    manifest: bool = False
    ingest: Ingest | None = None
    quality: Quality | None = None
    consumer: Consumer | None = None

    _sizes = field_validator("target_file_size", mode="before")(
        lambda cls, v: None if v is None else parse_size(v)
    )
    # 0: every compaction and DML goes to Spark
    _threshold = field_validator("spark_threshold_bytes", mode="before")(
        lambda cls, v: 0 if v in (0, "0") else parse_size(v)
    )

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("uri must not be empty")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> TableConfig:
        if self.quality is not None and self.ingest is None:
            raise ValueError("quality needs an ingest section (it validates ingested batches)")
        if self.retention_hours is not None and self.retention_hours < 168 and self.enforce_retention:
            raise ValueError(
                f"retention_hours={self.retention_hours} is under the 7-day safety limit; "
                "set enforce_retention: false to allow it"
            )
        return self


class PlatformConfig(_Model):
    tables: dict[str, TableConfig]
    maintenance: MaintenanceSection = Field(default_factory=MaintenanceSection)

    @field_validator("tables")
    @classmethod
    def _names(cls, tables: dict[str, TableConfig]) -> dict[str, TableConfig]:
        for name in tables:
            if not _NAME.match(name):
                raise ValueError(f"table name {name!r} must be letters, digits and _ (it names DAGs)")
        return tables


def _explain(error: ValidationError, source: str, table: str | None = None) -> list[str]:
    """One line per pydantic error: ``<file>: table '<name>': <key>: <message>``."""
    lines = []
    for e in error.errors():
        loc = [str(p) for p in e["loc"]]
        where = f"{source}: "
        if table is not None:
            where += f"table {table!r}: "
        elif len(loc) >= 2 and loc[0] == "tables":
            where += f"table {loc[1]!r}: "
            loc = loc[2:]
        key = ".".join(loc) or "(top level)"
        lines.append(f"{where}{key}: {e['msg']}")
    return lines


def resolve(uri: str, base: Path) -> str:
    """Relative local paths are relative to the config file's folder."""
    if "://" in uri or uri.startswith("/") or uri.startswith("file:"):
        return uri
    return str((base / uri).resolve())


# --- YAML with duplicate keys detected --------------------------------------------------------

_MERGE_TAG = "tag:yaml.org,2002:merge"


def _unique_key_loader():
    """A ``yaml.SafeLoader`` subclass that records every mapping key written more than once.

    PyYAML keeps the last of two equal keys, so a second ``trips:`` silently replaces the first
    table. The check runs on the composed node tree (what the file says, before merge keys
    ``<<: *anchor`` are expanded: overriding a merged key is not a duplicate), and records the
    key path and the line of every occurrence in ``loader.duplicates``."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def __init__(self, stream):
            super().__init__(stream)
            self.duplicates: list[tuple[tuple[str, ...], list[int]]] = []

        def construct_document(self, node):
            self._find_duplicates(node, (), set())
            return super().construct_document(node)

        def _find_duplicates(self, node, where: tuple[str, ...], seen: set[int]) -> None:
            if id(node) in seen:  # an alias: checked where its anchor is
                return
            seen.add(id(node))
            if isinstance(node, yaml.SequenceNode):
                for i, item in enumerate(node.value):
                    self._find_duplicates(item, (*where, str(i)), seen)
            elif isinstance(node, yaml.MappingNode):
                lines: dict[Any, list[int]] = {}
                for key_node, value_node in node.value:
                    if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _MERGE_TAG:
                        key = self.construct_object(key_node)  # `trips` and "trips" are one key
                        with contextlib.suppress(TypeError):  # unhashable: PyYAML refuses it
                            lines.setdefault(key, []).append(key_node.start_mark.line + 1)
                        self._find_duplicates(value_node, (*where, str(key)), seen)
                    else:
                        self._find_duplicates(value_node, where, seen)
                for key, at in lines.items():
                    if len(at) > 1:
                        self.duplicates.append(((*where, str(key)), at))

    return UniqueKeyLoader


def _twice(lines: list[int]) -> str:
    times = "twice" if len(lines) == 2 else f"{len(lines)} times"
    at = ", ".join(map(str, lines[:-1])) + f" and {lines[-1]}"
    return f"defined {times} (lines {at})"


def config_path(path: str | os.PathLike | None = None, *, default: str | os.PathLike | None = None) -> Path:
    """The tables file to read: ``path`` if given, else ``$DELTAPLANE_CONFIG``, else ``default``
    (a DAG file's own), else ``config/tables.yaml`` in the current directory."""
    return _choose(path, default)[0]


def _choose(path, default) -> tuple[Path, str]:
    """The file and where its name came from (for the error when it is missing)."""
    if path is not None and str(path) != "":
        return Path(path), ""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env), f" (from ${ENV_VAR})"
    if default is not None:
        return Path(default), ""
    return Path.cwd() / DEFAULT_PATH, (
        f" (the default: ${ENV_VAR} is not set, so ./{DEFAULT_PATH.as_posix()} in the current "
        f"directory); pass the file's path or set ${ENV_VAR}"
    )


def _read_yaml(path: Path, origin: str = "") -> tuple[Any, list[tuple[tuple[str, ...], list[int]]]]:
    import yaml

    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file{origin}") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a tables file") from None
    loader = _unique_key_loader()(text)
    try:
        return loader.get_single_data(), loader.duplicates
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    finally:
        loader.dispose()


# --- loading ----------------------------------------------------------------------------------


@dataclass
class ConfigReport:
    """The tables file, validated table by table (see :func:`read_config`)."""

    path: Path
    config: PlatformConfig  # the valid tables only
    errors: dict[str, list[str]] = field(default_factory=dict)  # invalid table -> its error lines

    def error(self) -> ConfigError | None:
        """Every invalid table's errors as one ``ConfigError`` (None when every table is valid)."""
        lines = [line for table_lines in self.errors.values() for line in table_lines]
        return ConfigError("\n".join(lines)) if lines else None


def _validate_table(name: Any, body: Any, source: str) -> tuple[TableConfig | None, list[str]]:
    where = f"{source}: table {name!r}: "
    if not isinstance(name, str) or not _NAME.match(name):
        return None, [f"{where}table name must be letters, digits and _ (it names DAGs)"]
    if not isinstance(body, dict):
        shown = "null" if body is None else repr(body)
        return None, [f"{where}expected a mapping of settings (uri, schedules, ...), got {shown}"]
    try:
        return TableConfig.model_validate(body), []
    except ValidationError as e:
        return None, _explain(e, source, table=name)


def read_config(
    path: str | os.PathLike | None = None, *, default: str | os.PathLike | None = None
) -> ConfigReport:
    """Read the tables file (``path``, else ``$DELTAPLANE_CONFIG``, else ``default``, else
    ``config/tables.yaml`` in the current directory: :func:`config_path`) and validate each
    table on its own: the valid tables come back in ``.config``, the invalid ones' errors (each
    line naming the file, the table and the key) in ``.errors``.

    Errors of the file itself raise ``ConfigError``, with every error found: not YAML, no
    ``tables`` mapping, an unknown top-level key, a table name or top-level key written twice
    (which of the two is meant is anybody's guess). A key written twice inside a table makes
    that table invalid."""
    path, origin = _choose(path, default)
    source = str(path)
    raw, duplicates = _read_yaml(path, origin)
    fatal: list[str] = []
    in_table: dict[str, list[str]] = {}
    for key_path, lines in sorted(duplicates, key=lambda d: d[1]):  # in the file's order
        if len(key_path) == 2 and key_path[0] == "tables":
            fatal.append(f"{source}: table {key_path[1]!r}: {_twice(lines)}")
        elif len(key_path) > 2 and key_path[0] == "tables":
            table, key = key_path[1], ".".join(key_path[2:])
            in_table.setdefault(table, []).append(f"{source}: table {table!r}: {key}: {_twice(lines)}")
        else:
            fatal.append(f"{source}: {'.'.join(key_path)}: {_twice(lines)}")
    if not isinstance(raw, dict) or "tables" not in raw:
        raise ConfigError("\n".join([*fatal, f"{source}: expected a mapping with a 'tables' key"]))
    fatal += [f"{source}: {key}: Extra inputs are not permitted" for key in raw if key not in _TOP_LEVEL]
    maintenance = MaintenanceSection()
    if raw.get("maintenance") is not None:
        try:
            maintenance = MaintenanceSection.model_validate(raw["maintenance"])
        except ValidationError as e:
            fatal += [
                line.replace(f"{source}: ", f"{source}: maintenance.", 1) for line in _explain(e, source)
            ]
    tables = raw["tables"]
    if not isinstance(tables, dict):
        raise ConfigError(
            "\n".join([*fatal, f"{source}: tables: expected a mapping of table names to their settings"])
        )
    valid: dict[str, TableConfig] = {}
    errors: dict[str, list[str]] = {}
    base = path.resolve().parent
    for name, body in tables.items():
        table, problems = _validate_table(name, body, source)
        problems = in_table.get(str(name), []) + problems
        if problems:
            errors.setdefault(str(name), []).extend(problems)
            continue
        assert table is not None
        table.uri = resolve(table.uri, base)
        if table.ingest is not None:
            table.ingest.landing = resolve(table.ingest.landing, base)
            if table.ingest.staging:
                table.ingest.staging = resolve(table.ingest.staging, base)
        if table.consumer is not None:
            table.consumer.target = resolve(table.consumer.target, base)
        valid[name] = table
    if fatal:  # with the tables' own errors: the command line reports everything at once
        raise ConfigError("\n".join([*fatal, *(line for lines in errors.values() for line in lines)]))
    return ConfigReport(
        path=path, config=PlatformConfig(tables=valid, maintenance=maintenance), errors=errors
    )


def load_config(
    path: str | os.PathLike | None = None, *, default: str | os.PathLike | None = None
) -> PlatformConfig:
    """Read and validate the tables file (the same choice as :func:`read_config`); strict: any
    invalid table is a ``ConfigError`` listing every error (see :func:`read_config` for the valid
    tables despite invalid ones)."""
    report = read_config(path, default=default)
    error = report.error()
    if error is not None:
        raise error
    return report.config


def register_cli(sub) -> None:
    """``deltaplane config validate [PATH]`` (entry point ``deltaplane.cli``)."""
    tables_file_verb(
        sub,
        "config",
        "the platform's tables configuration",
        "validate",
        help="check a tables file (PATH, else $DELTAPLANE_CONFIG, else ./config/tables.yaml)",
        description="Validate a tables file: PATH if given, else $DELTAPLANE_CONFIG, else "
        "config/tables.yaml in the current directory. Every error is printed; exit code 2.",
        func=_cmd_validate,
    )


def tables_file_verb(sub, command: str, command_help: str, verb: str, *, help: str, description: str, func):
    """``deltaplane COMMAND VERB [PATH]``: a verb that reads a tables file, found as
    ``read_config`` finds it; returns the verb's parser for its own options."""
    p = sub.add_parser(command, help=command_help)
    verbs = p.add_subparsers(dest=f"{command}_command", required=True, metavar="VERB")
    v = verbs.add_parser(verb, help=help, description=description)
    v.add_argument(
        "path",
        nargs="?",
        help="the tables file (default: $DELTAPLANE_CONFIG, else config/tables.yaml in the current "
        "directory)",
    )
    v.set_defaults(func=func)
    return v


def cli_report(path: str | None) -> ConfigReport | None:
    """``read_config`` for a command-line verb: the file's own errors printed (``None`` then;
    the verb exits 2)."""
    try:
        return read_config(path)
    except ConfigError as e:
        print_errors(str(e).splitlines())
        return None


def print_errors(lines) -> None:
    for line in lines:
        print(f"deltaplane: error: {line}", file=sys.stderr)


def _cmd_validate(args) -> int:
    report = cli_report(args.path)
    if report is None:
        return 2
    config = report.config
    for name, table in config.tables.items():
        parts = [table.uri]
        if table.ingest:
            parts.append(f"ingest from {table.ingest.landing}")
        if table.quality:
            parts.append(f"{len(table.quality.expectations)} expectations")
        if table.consumer:
            parts.append(f"consumer -> {table.consumer.target}")
        print(f"{name}: " + "; ".join(parts))
    if report.errors:
        print_errors(line for lines in report.errors.values() for line in lines)
        counts = f"{len(report.errors)} of {len(config.tables) + len(report.errors)} table(s)"
        print(f"deltaplane: error: {counts} invalid: {', '.join(report.errors)}", file=sys.stderr)
        return 2
    print(f"ok: {len(config.tables)} table(s)")
    return 0


SCHEDULING = {"poll_seconds": 60.0, "yield_minutes": 10.0}  # settings of the health DAG, defaults


def maintenance_scheduling(table: TableConfig, section: MaintenanceSection | None = None) -> dict[str, float]:
    """``poll_seconds`` (how often the health trigger looks at the log) and ``yield_minutes``
    (how recent a DML keeps maintenance out of its partitions) of ``table``."""
    section = section or MaintenanceSection()
    out = dict(SCHEDULING)
    for layer in (section.defaults, table.maintenance):
        out.update({k: getattr(layer, k) for k in SCHEDULING if getattr(layer, k) is not None})
    return out


def maintenance_policy(table: TableConfig, section: MaintenanceSection | None = None):
    """The ``MaintenancePolicy`` of ``table``: its ``maintenance`` over the file's defaults, over
    the thresholds ``auto_optimize`` already sets, with its retention, target size and Spark
    threshold."""
    from deltaplane.engine import DEFAULT_KINDS, MaintenancePolicy

    section = section or MaintenanceSection()
    chosen: dict[str, Any] = {
        "small_file_size": table.auto_optimize.small_file_size,
        "min_small_files": table.auto_optimize.min_small_files,
        "max_deleted_rows_ratio": table.auto_optimize.max_deleted_rows_ratio,
    }
    for layer in (section.defaults, table.maintenance):
        chosen.update({k: v for k, v in layer.model_dump().items() if v is not None})
    kinds = chosen.pop("kinds", None)
    for key in SCHEDULING:
        chosen.pop(key, None)
    return MaintenancePolicy(
        **chosen,
        enabled=tuple(kinds)
        if kinds is not None
        else (*DEFAULT_KINDS, *(["manifest"] if table.manifest else [])),
        retention_hours=table.retention_hours if table.retention_hours is not None else 168.0,
        target_file_size=table.target_file_size or (128 << 20),
        spark_threshold_bytes=table.spark_threshold_bytes,
    )
