"""Strict parsing of ``_delta_log`` file names.

Only names that match the protocol exactly are log files; anything else in the directory (Hadoop
``.crc`` side files, temporary files, a 19-digit name) is not, and is ignored rather than
misread. Versions are zero-padded to 20 digits, so lexicographic listing order is version order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

LOG_DIR = "_delta_log"
LAST_CHECKPOINT = f"{LOG_DIR}/_last_checkpoint"
SIDECAR_DIR = f"{LOG_DIR}/_sidecars"


class LogFileKind(Enum):
    COMMIT = "commit"
    CHECKPOINT = "checkpoint"  # classic single file (V1 or V2 content)
    MULTIPART_CHECKPOINT = "multipart_checkpoint"
    V2_CHECKPOINT = "v2_checkpoint"  # UUID-named
    COMPACTION = "compaction"
    CHECKSUM = "checksum"


_PATTERNS: list[tuple[LogFileKind, re.Pattern[str]]] = [
    (LogFileKind.COMMIT, re.compile(r"^(\d{20})\.json$")),
    (LogFileKind.CHECKPOINT, re.compile(r"^(\d{20})\.checkpoint\.parquet$")),
    (
        LogFileKind.MULTIPART_CHECKPOINT,
        re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$"),
    ),
    (
        LogFileKind.V2_CHECKPOINT,
        re.compile(
            r"^(\d{20})\.checkpoint\.([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
            r"[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\.(json|parquet)$"
        ),
    ),
    (LogFileKind.COMPACTION, re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$")),
    (LogFileKind.CHECKSUM, re.compile(r"^(\d{20})\.crc$")),
]


@dataclass(frozen=True, slots=True)
class LogFile:
    """One parsed log file name, with the listing's size and modification time."""

    key: str  # full key relative to the table root, e.g. "_delta_log/000...0.json"
    kind: LogFileKind
    version: int
    size: int = 0
    last_modified: int = 0
    part: int | None = None
    num_parts: int | None = None
    end_version: int | None = None  # compactions: the last version covered
    uuid: str | None = None
    fmt: str | None = None  # "json" or "parquet" for checkpoints

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]


def parse_log_file_name(key: str, size: int = 0, last_modified: int = 0) -> LogFile | None:
    """A ``LogFile`` for a key under ``_delta_log/``, or ``None`` if it is not a log file."""
    name = key.rsplit("/", 1)[-1]
    if not name[:1].isdigit():
        return None
    for kind, pattern in _PATTERNS:
        m = pattern.match(name)
        if not m:
            continue
        version = int(m.group(1))
        if kind is LogFileKind.MULTIPART_CHECKPOINT:
            part, parts = int(m.group(2)), int(m.group(3))
            if not (1 <= part <= parts) or parts < 2:
                return None
            return LogFile(key, kind, version, size, last_modified, part=part, num_parts=parts, fmt="parquet")
        if kind is LogFileKind.V2_CHECKPOINT:
            return LogFile(key, kind, version, size, last_modified, uuid=m.group(2).lower(), fmt=m.group(3))
        if kind is LogFileKind.COMPACTION:
            end = int(m.group(2))
            if end <= version:
                return None
            return LogFile(key, kind, version, size, last_modified, end_version=end, fmt="json")
        fmt = "parquet" if kind is LogFileKind.CHECKPOINT else "json" if kind is LogFileKind.COMMIT else None
        return LogFile(key, kind, version, size, last_modified, fmt=fmt)
    return None


def commit_key(version: int) -> str:
    return f"{LOG_DIR}/{version:020d}.json"


def checkpoint_key(version: int) -> str:
    return f"{LOG_DIR}/{version:020d}.checkpoint.parquet"


def version_prefix(version: int) -> str:
    """The key every file of ``version`` starts with (useful as a listing start)."""
    return f"{LOG_DIR}/{version:020d}"
