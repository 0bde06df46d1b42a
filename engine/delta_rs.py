"""delta-rs's spellings of deltaplane's arguments (``deltalake`` 1.6, delta-rs's Python package).

People bring delta-rs habits: ``write_deltalake(uri, data, configuration=...)``,
``DeltaTable.create(table_uri=...)``, ``commit_properties=CommitProperties(custom_metadata=...)``.
The public calls take delta-rs's name for an argument wherever it means the same as theirs, and
refuse the ones that mean something deltaplane does not do with a message naming what it does
instead: never Python's bare "got an unexpected keyword argument". :func:`delta_rs_names`
declares them per call, each delta-rs name mapped to

- a string (or :class:`Renamed`, with a conversion): our name for the same argument; giving
  both is an ``InvalidArgumentError``;
- :class:`Refused`: something deltaplane does differently. Values that describe what it does
  anyway (delta-rs's default, mostly) are accepted; any other value is an
  ``UnsupportedOperationError`` naming our way;
- :data:`EXECUTION`: a knob of delta-rs's own execution (spill memory, buffering, streaming)
  that does not change the result: accepted with any value, and ignored.

delta-rs objects (``CommitProperties``, ``WriterProperties``, ...) are read by their attributes:
the engine does not import ``deltalake``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from deltaplane.engine.errors import InvalidArgumentError, UnsupportedOperationError


@dataclass(frozen=True)
class Renamed:
    """delta-rs's name for our argument ``ours``; ``convert`` turns its value into ours."""

    ours: str
    convert: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class Refused:
    """A delta-rs argument for something deltaplane does differently (``instead`` says how).
    ``accepts(value)`` tells the values that ask for what deltaplane does anyway."""

    instead: str
    accepts: Callable[[Any], bool] = lambda value: value is None


@dataclass(frozen=True)
class _Execution:
    """A knob of delta-rs's own execution: the result is the same whatever its value."""


EXECUTION = _Execution()


def only(*values: Any) -> Callable[[Any], bool]:
    """``Refused.accepts`` for these values (compared by identity: ``True`` is not ``1``)."""
    return lambda value: any(value is v for v in values)


def delta_rs_names(**names: str | Renamed | Refused | _Execution):
    """Decorate a public call so it takes delta-rs's argument names (see the module docstring)."""
    specs = {theirs: Renamed(spec) if isinstance(spec, str) else spec for theirs, spec in names.items()}

    def decorate(func):
        parameters = inspect.signature(func).parameters.values()
        positional = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        call = func.__qualname__

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            for theirs in [name for name in kwargs if name in specs]:
                value = kwargs.pop(theirs)
                spec = specs[theirs]
                if isinstance(spec, Renamed):
                    if spec.ours in kwargs or spec.ours in positional[: len(args)]:
                        raise InvalidArgumentError(
                            f"{call}: {theirs} is delta-rs's name for {spec.ours}; give one of them"
                        )
                    kwargs[spec.ours] = value if spec.convert is None else spec.convert(value)
                elif isinstance(spec, Refused) and not spec.accepts(value):
                    raise UnsupportedOperationError(f"{call}({theirs}={_short(value)}): {spec.instead}")
            return func(*args, **kwargs)

        wrapper.delta_rs_names = specs  # what the call takes from delta-rs, for docs and tests
        return wrapper

    return decorate


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"<{type(value).__name__}>"


def commit_metadata_of(properties: Any) -> dict[str, Any] | None:
    """``commit_properties=CommitProperties(custom_metadata={...})`` is our ``commit_metadata``;
    its other fields ask for things deltaplane does its own way."""
    if properties is None:
        return None
    if not hasattr(properties, "custom_metadata"):
        raise InvalidArgumentError(
            "commit_properties takes delta-rs's CommitProperties; deltaplane's own argument is "
            f"commit_metadata={{...}} (a dict), got {type(properties).__name__}"
        )
    if getattr(properties, "app_transactions", None):
        raise UnsupportedOperationError(
            "CommitProperties(app_transactions=...): deltaplane records an application's "
            "transaction with app_id= and app_version= on a write (a version already recorded "
            "commits nothing); dt.transaction_version(app_id) reads it back"
        )
    if getattr(properties, "max_commit_retries", None) is not None:
        raise UnsupportedOperationError(
            "CommitProperties(max_commit_retries=...): deltaplane retries a commit that conflicts "
            "with no concurrent change by itself, and fails at once on a real conflict"
        )
    metadata = properties.custom_metadata
    if metadata is not None and not isinstance(metadata, Mapping):
        raise InvalidArgumentError(f"CommitProperties.custom_metadata must be a dict, got {metadata!r}")
    return None if metadata is None else dict(metadata)


def _default_hooks(properties: Any) -> bool:
    """``PostCommitHookProperties`` that ask for what every deltaplane commit does: a checkpoint
    every ``delta.checkpointInterval`` versions, the log cleaned only by ``cleanup_log()``."""
    return properties is None or (
        getattr(properties, "create_checkpoint", True) is True
        and getattr(properties, "cleanup_expired_logs", None) in (None, False)
    )


# The commit options every writing call of delta-rs takes.
COMMIT_OPTIONS: dict[str, Renamed | Refused] = {
    "commit_properties": Renamed("commit_metadata", commit_metadata_of),
    "post_commithook_properties": Refused(
        "every deltaplane commit writes a checkpoint each delta.checkpointInterval versions (a "
        "table property: dt.alter.set_table_properties) and leaves the log to dt.cleanup_log()",
        _default_hooks,
    ),
}
WRITER_PROPERTIES = Refused(
    "deltaplane writes its Parquet files itself (ZSTD, page checksums, row groups up to 128 MiB); "
    "target_file_size= sets the size of the files"
)
TYPE_MISMATCH = Refused(
    "deltaplane always refuses a value that does not fit its column (new values are cast to the "
    "column's type, never truncated)",
    only(True),
)


class DeltaRsOnly:
    """A class attribute for a name delta-rs has and deltaplane does not: reading it raises an
    ``AttributeError`` (so ``hasattr`` is false) that says what to use in deltaplane."""

    def __init__(self, instead: str):
        self.instead = instead
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        cls = owner if owner is not None else type(instance)  # DeltaTable, not the mixin defining it
        raise AttributeError(f"{cls.__name__}.{self.name} is delta-rs's, not deltaplane's: {self.instead}")


class DeltaRsVersion(int):
    """A table version: an ``int`` (``dt.version + 1``, JSON, ``%d``), also callable as
    delta-rs's ``dt.version()``, which returns it as a plain ``int``."""

    __slots__ = ()

    def __call__(self) -> int:
        return int(self)


class CalledLikeDeltaRs:
    """For values delta-rs returns from methods and deltaplane from attributes
    (``dt.metadata``, ``dt.protocol``): calling one returns it, so ``dt.metadata()`` works too."""

    __slots__ = ()

    def __call__(self):
        return self
