"""What the table triggers share: the event triggers' shared-stream plumbing (an ``AssetWatcher``
trigger whose events a ``SharedStreamProducer`` makes in ack mode), the producers' rule for
reporting read errors, and the pieces every trigger uses (its class path, the storage options of
a connection in the triggerer, an error's one-line description)."""

from __future__ import annotations

import json
import logging
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent
from airflow.triggers.shared_stream import SharedStreamProducer

log = logging.getLogger(__name__)


def classpath(trigger) -> str:
    return f"{type(trigger).__module__}.{type(trigger).__qualname__}"


def storage_options(conn_id: str | None) -> dict[str, str]:
    from deltaplane.operators.hooks.delta import DeltaHook

    return DeltaHook(conn_id).settings.storage_options


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


# Errors that polling again cannot cure until someone acts: the table is gone, or the log was
# cleaned past the stream's position. Reported once as an error event, then polled quietly.
def lasting(error: BaseException) -> bool:
    from deltaplane.engine import CorruptLogError, TableNotFoundError

    return isinstance(error, TableNotFoundError | CorruptLogError)


class TableStreamTrigger(BaseEventTrigger):
    """An event trigger on one table (``table_uri``) whose events come from a shared stream: one
    stream per trigger configuration (``stream`` names the kind, the serialized arguments the
    configuration), made by ``producer(kwargs)``; ``event`` turns a raw stream item into the
    trigger's event (an error report by default, ``None`` for what is not announced)."""

    stream: str
    producer: type[SharedStreamProducer]  # made from the serialized arguments
    serialized: tuple[str, ...]  # the arguments ``serialize`` keeps, each an attribute
    table_uri: str

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return classpath(self), {name: getattr(self, name) for name in self.serialized}

    def event(self, raw: dict[str, Any]) -> TriggerEvent | None:
        if raw.get("error") is not None:
            return TriggerEvent({"status": "error", "table": self.table_uri, "message": raw["error"]})
        return None

    def shared_stream_key(self):
        """One stream per trigger configuration: the watermark is this stream's own."""
        return (self.stream, json.dumps(self.serialize()[1], sort_keys=True))

    @classmethod
    def create_shared_stream_producer(cls, kwargs: dict[str, Any]) -> SharedStreamProducer:
        return cls.producer(kwargs)

    async def filter_shared_stream(self, shared_stream):
        async for raw in shared_stream:  # the producer applied this trigger's configuration
            event = self.event(raw)
            if event is not None:
                yield event

    async def run(self):
        """Without a shared stream (a triggerer that runs ``run()``): the same events, but the
        watermark is never moved (nothing says what Airflow stored), so a restart repeats them."""
        async for raw, _ in self.producer(self.serialize()[1]).open_stream():
            event = self.event(raw)
            if event is not None:
                yield event


class ErrorReports:
    """A producer's read errors: transient ones are logged and retried at the next poll; a
    lasting one is announced once (``report`` is True), and again only when it changes or after a
    successful read (``clear``)."""

    def __init__(self, table_uri: str, doing: str):
        self.table_uri = table_uri
        self.doing = doing  # what failed, for the log: "reading the log", "measuring health"
        self.reported: str | None = None

    def report(self, error: BaseException) -> bool:
        """Whether ``error`` is a new lasting error to announce."""
        if not lasting(error):
            log.warning("%s: %s failed (%s); retrying", self.table_uri, self.doing, describe(error))
            return False
        log.error("%s: %s", self.table_uri, describe(error))
        if self.reported == describe(error):
            return False
        self.reported = describe(error)
        return True

    def item(self, error: BaseException, generation: int) -> tuple[dict, tuple] | None:
        """The stream item that announces ``error`` (an error event nobody stores), or ``None``
        when it is not announced (transient, or the lasting error already reported)."""
        return ({"error": describe(error)}, (generation, None)) if self.report(error) else None

    def clear(self) -> None:
        self.reported = None
