"""Triggers that wait for a table's commits in the triggerer (no worker slot held).

* ``DeltaCommitTrigger``: what ``DeltaLogTailSensor`` defers to: polls ``find_new_commits``
  and fires once, with the result, when commits after its watermark match. It keeps no state:
  the sensor's task decides what to do with the result.
* ``DeltaCommitEventTrigger``: a ``BaseEventTrigger`` for ``AssetWatcher``: a DAG scheduled on
  the table's Asset runs for every new data commit (one ``TriggerEvent`` per matching commit).

The event trigger never loses a commit. Its position in the log (the watermark, kept beside the
table by ``deltaplane.operators.utils.watermarks``) moves only past commits whose events Airflow has
stored: it runs as an Airflow 3.3 shared stream in *ack mode*, where the triggerer tells the
producer (``CommitLogProducer``, the log tail) which events were persisted to the metadata database,
and only then does the producer write the watermark. A triggerer killed at any point restarts from
the last persisted position and announces the commits after it again: at least once, never lost (a
consumer that commits with a work key, as ``DeltaConsumeOperator`` does, makes the repeats
harmless). An event Airflow failed to persist makes the producer rewind and announce it again.

Both resolve storage options from the connection id in the triggerer (credentials are never
part of the serialized trigger) and run the blocking log reads in a thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Any

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent
from airflow.triggers.shared_stream import AdvanceItem, SharedStreamProducer

from deltaplane.operators.utils.conditions import CommitFilter, find_new_commits, scan_commits

log = logging.getLogger(__name__)

FILTER_ARGS = ("data_change_only", "kinds", "operations", "partition_filter")


def _classpath(trigger) -> str:
    return f"{type(trigger).__module__}.{type(trigger).__qualname__}"


def _commit_filter(owner: str, filters: dict[str, Any]) -> CommitFilter:
    unknown = set(filters) - set(FILTER_ARGS)
    if unknown:
        raise TypeError(
            f"{owner} got unexpected argument(s) {sorted(unknown)} (filters: {', '.join(FILTER_ARGS)})"
        )
    return CommitFilter.of(filters)


def _storage_options(conn_id: str | None) -> dict[str, str]:
    from deltaplane.operators.hooks.delta import DeltaHook

    return DeltaHook(conn_id).settings.storage_options


class DeltaCommitTrigger(BaseTrigger):
    def __init__(
        self,
        *,
        table_uri: str,
        after_version: int,
        deltaplane_conn_id: str | None = None,
        poke_interval: float = 30.0,
        **filters: Any,
    ):
        super().__init__()
        self.table_uri = table_uri
        self.after_version = int(after_version)
        self.deltaplane_conn_id = deltaplane_conn_id
        self.commit_filter = _commit_filter(type(self).__name__, filters)
        self.poke_interval = float(poke_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return _classpath(self), {
            "table_uri": self.table_uri,
            "after_version": self.after_version,
            "deltaplane_conn_id": self.deltaplane_conn_id,
            "poke_interval": self.poke_interval,
            **self.commit_filter.to_kwargs(),
        }

    def check(self) -> dict[str, Any]:
        return find_new_commits(
            self.table_uri,
            self.after_version,
            storage_options=_storage_options(self.deltaplane_conn_id),
            commit_filter=self.commit_filter,
        )

    async def run(self):
        while True:
            try:
                result = await asyncio.to_thread(self.check)
            except Exception as e:  # the task decides: execute_complete raises on an error event
                yield TriggerEvent({"status": "error", "message": f"{type(e).__name__}: {e}"})
                return
            if result["commits"]:
                yield TriggerEvent({"status": "success", **result})
                return
            await asyncio.sleep(self.poke_interval)


class DeltaCommitEventTrigger(BaseEventTrigger):
    """One event per new data commit of a table, for ``AssetWatcher``::

    table = Asset("s3://lake/trips", watchers=[AssetWatcher(name="trips_commits",
                  trigger=DeltaCommitEventTrigger(table_uri="s3://lake/trips", deltaplane_conn_id="lake"))])

    ``start_after``: the version to start after the first time (default: the latest, so only
    commits from now on); later starts resume from the persisted watermark (``watermark_key``).
    """

    def __init__(
        self,
        *,
        table_uri: str,
        deltaplane_conn_id: str | None = None,
        watermark_key: str | None = None,
        start_after: int | None = None,
        poke_interval: float = 30.0,
        **filters: Any,
    ):
        super().__init__()
        self.table_uri = table_uri
        self.deltaplane_conn_id = deltaplane_conn_id
        self.watermark_key = watermark_key or "asset-watcher"
        self.start_after = None if start_after is None else int(start_after)
        self.commit_filter = _commit_filter(type(self).__name__, filters)
        self.poke_interval = float(poke_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return _classpath(self), {
            "table_uri": self.table_uri,
            "deltaplane_conn_id": self.deltaplane_conn_id,
            "watermark_key": self.watermark_key,
            "start_after": self.start_after,
            "poke_interval": self.poke_interval,
            **self.commit_filter.to_kwargs(),
        }

    # --- ack mode: the producer tails the log, Airflow says what it stored -------------------

    def shared_stream_key(self):
        """One stream per trigger configuration: the watermark is this stream's own."""
        return ("deltaplane.commits", json.dumps(self.serialize()[1], sort_keys=True))

    @classmethod
    def create_shared_stream_producer(cls, kwargs: dict[str, Any]) -> CommitLogProducer:
        return CommitLogProducer(kwargs)

    async def filter_shared_stream(self, shared_stream):
        async for raw in shared_stream:  # the producer applied this trigger's filter
            if raw.get("summary") is not None:
                yield TriggerEvent({"table": self.table_uri, **raw["summary"]})

    async def run(self):
        """Without a shared stream (a triggerer that runs ``run()``): the same events, but the
        watermark is never moved (nothing says what Airflow stored), so a restart repeats them."""
        producer = CommitLogProducer(self.serialize()[1])
        async for raw, _ in producer.open_stream():
            if raw.get("summary") is not None:
                yield TriggerEvent({"table": self.table_uri, **raw["summary"]})


class CommitLogProducer(SharedStreamProducer):
    """The log tail of one ``DeltaCommitEventTrigger`` stream.

    Yields one raw event per commit version (matching or not, so the watermark can move past
    OPTIMIZEs too), plus an idle tick per poll when nothing is new, so the subscriber moves past
    the last commit and Airflow can resolve it. ``advance`` writes the watermark to the last
    version of a batch that every subscriber resolved cleanly (its events stored); an unclean
    one rewinds the stream to announce that version again and ignores what was broadcast
    before the rewind."""

    def __init__(self, kwargs: dict[str, Any]):
        self.table_uri = kwargs["table_uri"]
        self.conn_id = kwargs.get("deltaplane_conn_id")
        self.watermark_key = kwargs.get("watermark_key") or "asset-watcher"
        self.start_after = kwargs.get("start_after")
        self.poke_interval = float(kwargs.get("poke_interval", 30.0))
        self.commit_filter = CommitFilter.of(kwargs)
        self._generation = 0
        self._rewind_to: int | None = None
        self._options: dict[str, str] | None = None

    def _start(self) -> int:
        from deltaplane.engine.log.segment import list_log
        from deltaplane.engine.storage import open_store
        from deltaplane.operators.utils.watermarks import read_watermark, write_watermark

        known = read_watermark(self.table_uri, self.watermark_key, self._options)
        if known is not None:
            return known
        if self.start_after is not None:
            start = int(self.start_after)
        else:  # first start: announce commits from now on
            latest = list_log(open_store(self.table_uri, self._options), 0).max_version
            start = -1 if latest is None else latest
        write_watermark(self.table_uri, self.watermark_key, start, self._options)
        return start

    def _scan(self, after: int) -> list[tuple[int, dict | None]]:
        return list(scan_commits(self.table_uri, after, self.commit_filter, storage_options=self._options))

    async def open_stream(self):
        self._options = await asyncio.to_thread(_storage_options, self.conn_id)
        position = await asyncio.to_thread(self._start)
        log.info("%s: announcing commits after version %d (%s)", self.table_uri, position, self.watermark_key)
        while True:
            if self._rewind_to is not None:
                position, self._rewind_to = self._rewind_to, None
                self._generation += 1
            try:
                found = await asyncio.to_thread(self._scan, position)
            except Exception as e:  # a transient storage error: try again at the next poll
                from deltaplane.engine.errors import MissingLogVersionError

                if isinstance(e, MissingLogVersionError):
                    raise  # the log was cleaned past this position: commits are gone for good
                log.warning("%s: reading the log failed (%s); retrying", self.table_uri, e)
                found = []
            for version, summary in found:
                yield {"version": version, "summary": summary}, (self._generation, version)
                position = version
                if self._rewind_to is not None:
                    break
            if not found:
                yield {"tick": True}, (self._generation, None)
                await asyncio.sleep(self.poke_interval)

    async def advance(self, batch: Sequence[AdvanceItem]) -> None:
        from deltaplane.operators.utils.watermarks import write_watermark

        done = None
        for item in batch:
            generation, version = item.broker_payload
            if generation != self._generation or self._rewind_to is not None:
                continue  # broadcast before a rewind: it will be announced again
            if version is None:
                continue  # an idle tick: nothing to store
            if not item.outcome.is_clean:
                log.warning(
                    "%s: the event for version %d was not stored (%s); announcing it again",
                    self.table_uri,
                    version,
                    item.outcome,
                )
                self._rewind_to = version - 1
                break
            done = version
        if done is not None:
            await asyncio.to_thread(write_watermark, self.table_uri, self.watermark_key, done, self._options)
