"""``config/tables.yaml``: the tables the platform runs, validated with pydantic.

Every table has a URI and, optionally, a connection, schedules, maintenance settings (target
file size, Z-order columns, retention, auto-optimize thresholds, manifests), an ingest source
with a quality suite, and a consumer. Errors name the file, the table and the key::

    config/tables.yaml: table 'trips': auto_optimize.min_small_files: Input should be greater than 0

``deltaplane config validate [PATH]`` checks a file from the command line (the verb is added to
the engine's CLI through the ``deltaplane.cli`` entry point).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

DEFAULT_PATH = Path(__file__).resolve().parent.parent / "config" / "tables.yaml"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class ConfigError(ValueError):
    """The tables configuration is invalid; the message names the file, the table and the key."""


def parse_size(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("a size is a number of bytes or a string such as 128MB")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("a size must be positive")
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a size (use bytes or e.g. 64MB, 1GB)")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[match.group(2).lower()]
    return int(float(match.group(1)) * scale)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Schedules(_Model):
    maintenance: str | None = "@daily"
    ingest: str | None = None


class AutoOptimize(_Model):
    min_small_files: int = Field(50, gt=0)
    small_file_size: int = 32 << 20
    max_deleted_rows_ratio: float = Field(0.2, ge=0.0, le=1.0)

    _size = field_validator("small_file_size", mode="before")(lambda cls, v: parse_size(v))


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
    on_failure: Literal["fail", "skip"] = "fail"
    expectations: list[Expectation] = Field(min_length=1)


class Ingest(_Model):
    landing: str  # a directory (or glob) of landing files
    format: Literal["csv", "json", "parquet"] = "parquet"
    schema_ddl: str | None = Field(None, alias="schema")
    staging: str | None = None  # where staged manifests go (default: <table>/_deltaplane/staging)
    engine: Literal["local", "spark"] = "local"


class Consumer(_Model):
    target: str  # the downstream table
    trigger: Literal["asset", "sensor"] = "asset"
    schedule: str | None = None  # the sensor-driven consumer's schedule


class TableConfig(_Model):
    uri: str
    conn_id: str | None = None
    description: str | None = None
    partition_by: list[str] = Field(default_factory=list)
    schedules: Schedules = Field(default_factory=Schedules)
    target_file_size: int | None = None
    zorder_by: list[str] = Field(default_factory=list)
    retention_hours: float | None = Field(None, ge=0)
    enforce_retention: bool = True
    vacuum_dry_run: bool = False
    checkpoint_cleanup_log: bool = True
    auto_optimize: AutoOptimize = Field(default_factory=AutoOptimize)
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

    @field_validator("tables")
    @classmethod
    def _names(cls, tables: dict[str, TableConfig]) -> dict[str, TableConfig]:
        for name in tables:
            if not _NAME.match(name):
                raise ValueError(f"table name {name!r} must be letters, digits and _ (it names DAGs)")
        return tables


def _explain(error: ValidationError, source: str) -> str:
    lines = []
    for e in error.errors():
        loc = [str(p) for p in e["loc"]]
        where = f"{source}: "
        if len(loc) >= 2 and loc[0] == "tables":
            where += f"table {loc[1]!r}: "
            loc = loc[2:]
        key = ".".join(loc) or "(top level)"
        lines.append(f"{where}{key}: {e['msg']}")
    return "\n".join(lines)


def resolve(uri: str, base: Path) -> str:
    """Relative local paths are relative to the config file's folder."""
    if "://" in uri or uri.startswith("/") or uri.startswith("file:"):
        return uri
    return str((base / uri).resolve())


def load_config(path: str | os.PathLike | None = None) -> PlatformConfig:
    """Read and validate the tables file (``$DELTAPLANE_CONFIG`` or ``config/tables.yaml``)."""
    import yaml

    path = Path(path or os.environ.get("DELTAPLANE_CONFIG") or DEFAULT_PATH)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with a 'tables' key")
    try:
        config = PlatformConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(_explain(e, str(path))) from None
    base = path.resolve().parent
    for table in config.tables.values():
        table.uri = resolve(table.uri, base)
        if table.ingest is not None:
            table.ingest.landing = resolve(table.ingest.landing, base)
            if table.ingest.staging:
                table.ingest.staging = resolve(table.ingest.staging, base)
        if table.consumer is not None:
            table.consumer.target = resolve(table.consumer.target, base)
    return config


def register_cli(sub) -> None:
    """``deltaplane config validate [PATH]`` (entry point ``deltaplane.cli``)."""
    p = sub.add_parser("config", help="the platform's tables configuration")
    verbs = p.add_subparsers(dest="config_command", required=True, metavar="VERB")
    v = verbs.add_parser("validate", help="check config/tables.yaml (or PATH)")
    v.add_argument("path", nargs="?", help="the file (default $DELTAPLANE_CONFIG or config/tables.yaml)")
    v.set_defaults(func=_cmd_validate)


def _cmd_validate(args) -> int:
    try:
        config = load_config(args.path)
    except ConfigError as e:
        for line in str(e).splitlines():
            print(f"deltaplane: error: {line}", file=sys.stderr)
        return 2
    for name, table in config.tables.items():
        parts = [table.uri]
        if table.ingest:
            parts.append(f"ingest from {table.ingest.landing}")
        if table.quality:
            parts.append(f"{len(table.quality.expectations)} expectations")
        if table.consumer:
            parts.append(f"consumer -> {table.consumer.target}")
        print(f"{name}: " + "; ".join(parts))
    print(f"ok: {len(config.tables)} table(s)")
    return 0
