"""Log actions as frozen dataclasses.

Python code sees snake_case fields; the JSON of the log uses camelCase, and the conversion happens
only here, at the boundary. Fields this engine does not know are kept in ``extra`` and written back
unchanged, so rewriting an action (for example into a checkpoint) never drops what a newer writer
put there. Unknown action types are ignored by :func:`known_actions`, as the protocol requires.

The hot path (replaying millions of add/remove actions) does not build these objects: it parses
file actions straight into Arrow (``log/commits.py``). These classes serve the few non-file
actions of a snapshot and every place that handles single actions.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from deltaplane.engine.delta_rs import CalledLikeDeltaRs


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


class _JsonAction:
    """Shared JSON conversion: camelCase keys, nested actions, unknown keys kept in ``extra``."""

    NESTED: ClassVar[dict[str, type]] = {}

    @classmethod
    def _json_names(cls) -> dict[str, str]:
        return {_camel(f.name): f.name for f in dataclasses.fields(cls) if f.name != "extra"}

    @classmethod
    def from_json(cls, obj: dict[str, Any]):
        if not isinstance(obj, dict):
            raise TypeError(f"{cls.__name__} must be a JSON object, got {type(obj).__name__}")
        names = cls._json_names()
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in obj.items():
            attr = names.get(key)
            if attr is None:
                extra[key] = value
                continue
            nested = cls.NESTED.get(attr)
            if nested is not None and value is not None:
                value = nested.from_json(value)
            kwargs[attr] = value
        return cls(**kwargs, extra=extra)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if value is None:
                continue
            if isinstance(value, _JsonAction):
                value = value.to_json()
            out[_camel(f.name)] = value
        out.update(self.extra)  # type: ignore[attr-defined]
        return out


@dataclass(frozen=True)
class DeletionVectorDescriptor(_JsonAction):
    storage_type: str
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def unique_id(self) -> str:
        """``storageType + pathOrInlineDv [+ "@" + offset]``: half of a logical file's key."""
        base = self.storage_type + self.path_or_inline_dv
        return base if self.offset is None else f"{base}@{self.offset}"


@dataclass(frozen=True)
class Protocol(_JsonAction, CalledLikeDeltaRs):  # dt.protocol() as delta-rs spells it
    min_reader_version: int
    min_writer_version: int
    reader_features: list[str] | None = None
    writer_features: list[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Format(_JsonAction):
    provider: str = "parquet"
    options: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Metadata(_JsonAction, CalledLikeDeltaRs):  # dt.metadata() as delta-rs spells it
    NESTED: ClassVar[dict[str, type]] = {"format": Format}

    id: str
    # Delta Spark tolerates a metaData without schemaString and reads it as an empty schema.
    schema_string: str | None = None
    partition_columns: list[str] = field(default_factory=list)
    configuration: dict[str, str] = field(default_factory=dict)
    format: Format = field(default_factory=Format)
    name: str | None = None
    description: str | None = None
    created_time: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Metadata:
        obj = dict(obj)
        # Older writers leave these null; the protocol treats absent as empty.
        if obj.get("partitionColumns") is None:
            obj["partitionColumns"] = []
        if obj.get("configuration") is None:
            obj["configuration"] = {}
        if obj.get("format") is None:
            obj["format"] = {"provider": "parquet", "options": {}}
        return super().from_json(obj)


@dataclass(frozen=True)
class Add(_JsonAction):
    NESTED: ClassVar[dict[str, type]] = {"deletion_vector": DeletionVectorDescriptor}

    path: str
    partition_values: dict[str, str | None]
    size: int
    modification_time: int
    data_change: bool
    stats: str | None = None
    tags: dict[str, str] | None = None
    deletion_vector: DeletionVectorDescriptor | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    clustering_provider: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Remove(_JsonAction):
    NESTED: ClassVar[dict[str, type]] = {"deletion_vector": DeletionVectorDescriptor}

    path: str
    data_change: bool
    deletion_timestamp: int | None = None
    extended_file_metadata: bool | None = None
    partition_values: dict[str, str | None] | None = None
    size: int | None = None
    stats: str | None = None
    tags: dict[str, str] | None = None
    deletion_vector: DeletionVectorDescriptor | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class AddCDCFile(_JsonAction):
    path: str
    partition_values: dict[str, str | None]
    size: int
    data_change: bool = False
    tags: dict[str, str] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Txn(_JsonAction):
    app_id: str
    version: int
    last_updated: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class DomainMetadata(_JsonAction):
    domain: str
    configuration: str
    removed: bool = False
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Sidecar(_JsonAction):
    path: str
    size_in_bytes: int
    modification_time: int
    tags: dict[str, str] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class CheckpointMetadata(_JsonAction):
    version: int
    tags: dict[str, str] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


def _long(value) -> int | None:
    """A commitInfo time as an int (ms), whatever JSON shape it came in: an integer, or a
    string or float holding one; anything else (text, bool, infinity, NaN) is ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number == number and abs(number) != float("inf") else None


@dataclass(frozen=True)
class CommitInfo:
    """commitInfo is free-form; the whole object is kept, with accessors for what we use."""

    values: dict[str, Any]

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> CommitInfo:
        if not isinstance(obj, dict):
            raise TypeError("commitInfo must be a JSON object")
        return cls(dict(obj))

    def to_json(self) -> dict[str, Any]:
        return dict(self.values)

    @property
    def timestamp(self) -> int | None:
        return _long(self.values.get("timestamp"))

    @property
    def in_commit_timestamp(self) -> int | None:
        """The in-commit timestamp (ms); ``None`` when missing or not a number a writer could
        have meant (a foreign shape: the readers fall back to the file's time)."""
        return _long(self.values.get("inCommitTimestamp"))

    @property
    def operation(self) -> str | None:
        """The operation's name; ``None`` when missing or not a string (a foreign writer's
        shape), so no reader has to check its type again."""
        operation = self.values.get("operation")
        return operation if isinstance(operation, str) else None

    @property
    def txn_id(self) -> str | None:
        return self.values.get("txnId")


Action = (
    Protocol
    | Metadata
    | Add
    | Remove
    | AddCDCFile
    | Txn
    | CommitInfo
    | DomainMetadata
    | Sidecar
    | CheckpointMetadata
)

ACTION_TYPES: dict[str, type] = {
    "protocol": Protocol,
    "metaData": Metadata,
    "add": Add,
    "remove": Remove,
    "cdc": AddCDCFile,
    "txn": Txn,
    "commitInfo": CommitInfo,
    "domainMetadata": DomainMetadata,
    "sidecar": Sidecar,
    "checkpointMetadata": CheckpointMetadata,
}
ACTION_KEYS: dict[type, str] = {cls: key for key, cls in ACTION_TYPES.items()}


FILE_ACTION_KEYS = ("add", "remove")


def row_tags(value) -> dict[str, str] | None:
    """The ``tags`` of a live-file row (Arrow's map: key/value pairs, or already a dict) as the
    action field, for re-adding a file as the log holds it."""
    if value is None:
        return None
    return dict(value)


def known_actions(obj: dict[str, Any]) -> list[tuple[str, Any]]:
    """The ``(key, body)`` pairs of the known actions on one log line (already JSON-decoded).

    The rule every parser of the log follows: **a line is the action(s) whose known key it
    has**. Unknown keys beside an action (``{"add": {...}, "someFutureKey": [...]}``) are
    ignored, as the protocol requires; unknown fields inside an action are the action's business
    (kept in ``extra``). A key whose value is JSON ``null`` is absent, as a null column is in a
    checkpoint. A line with only unknown keys is no action at all.

    A line with several known actions is not allowed by the protocol but is written by some
    tools: each of them counts, as if it stood on a line of its own, so that nothing a writer
    put in the log is silently dropped. delta-rs reads such lines the same way (one column per
    action type), except that from an add and a remove on one line it takes only the add; Delta
    Spark's ``SingleAction.unwrap`` keeps only the first of add, remove, metaData, txn,
    protocol, ... Pairs come in the order of the line. Raises ``ValueError`` when the line is
    not a JSON object.
    """
    if not isinstance(obj, dict):
        raise ValueError("a log line must be a JSON object")
    return [(k, v) for k, v in obj.items() if v is not None and k in ACTION_TYPES]


def action_to_json_line(action: Action) -> str:
    """Serialize one action as a log line (compact JSON, no trailing newline)."""
    key = ACTION_KEYS[type(action)]
    return json.dumps({key: action.to_json()}, separators=(",", ":"), ensure_ascii=False)
