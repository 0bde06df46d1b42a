"""Triggers that wait for a table's commits in the triggerer (no worker slot held).

* ``DeltaCommitTrigger``: what ``DeltaLogTailSensor`` defers to: polls ``find_new_commits``
  and fires once, with the result, when commits after its watermark match. It keeps no state:
  the sensor's task decides what to do with the result.
* ``DeltaCommitEventTrigger``: a ``BaseEventTrigger`` for ``AssetWatcher``: a DAG scheduled on
  the table's Asset runs for every new data commit (one ``TriggerEvent`` per matching commit that
  no deltaplane task announced through its outlet; the payload is ``runs.event_payload``, the
  outlet events' payload).

The event trigger never loses a commit. Its position in the log (the watermark, kept beside the
table by ``deltaplane.engine.watermarks``) moves only past commits whose events Airflow has
stored: it runs as an Airflow 3.3 shared stream in *ack mode*, where the triggerer tells the
producer (``CommitLogProducer``, the log tail) which events were persisted to the metadata database,
and only then does the producer write the watermark. A triggerer killed at any point restarts from
the last persisted position and announces the commits after it again: at least once, never lost (a
consumer that commits with a work key, as ``DeltaConsumeOperator`` does, makes the repeats
harmless). An event Airflow failed to persist makes the producer rewind and announce it again.

Both resolve storage options from the connection id in the triggerer (credentials are never
part of the serialized trigger) and run the blocking log reads in a thread, through the engine's
one incremental reader (``deltaplane.engine.tail``). Both report a table that cannot be followed
(gone, or its log cleaned past the watermark) as an event ``{"status": "error", "message"}``
instead of waiting forever or crashing in a loop; the sensor's trigger also ends with
``{"status": "timeout"}`` at the sensor's deadline. Their filter arguments are one definition,
``deltaplane.engine.commit_filter.FILTER_ARGS``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent
from airflow.triggers.shared_stream import AdvanceItem, SharedStreamProducer

from deltaplane.engine import DEFAULT_START, InvalidArgumentError, check_start
from deltaplane.operators.triggers.streams import (
    ErrorReports,
    TableStreamTrigger,
    classpath,
    describe,
    storage_options,
)
from deltaplane.operators.utils.arguments import location
from deltaplane.operators.utils.conditions import FILTER_ARGS, CommitFilter, take_filter

log = logging.getLogger(__name__)


class DeltaCommitTrigger(BaseTrigger):
    """Fires once: ``{"status": "success", "after_version", "latest_version", "commits"}`` when
    commits after ``after_version`` match the filter; ``{"status": "timeout", "message"}`` when
    ``deadline`` (epoch seconds, kept across triggerer restarts) passes first; ``{"status":
    "error", "message"}`` when reading the table fails (the table gone, the log cleaned past the
    watermark, storage refusing): the task decides (``execute_complete`` raises on the last two)."""

    def __init__(
        self,
        *,
        table_uri: str,
        after_version: int,
        deltaplane_conn_id: str | None = None,
        poke_interval: float = 30.0,
        deadline: float | None = None,
        **filters: Any,
    ):
        super().__init__()
        self.table_uri = location(table_uri)  # serialized as JSON: a pathlib.Path as its string
        self.after_version = int(after_version)
        self.deltaplane_conn_id = deltaplane_conn_id
        self.commit_filter = take_filter(type(self).__name__, filters, strict=True)
        self.poke_interval = float(poke_interval)
        self.deadline = None if deadline is None else float(deadline)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return classpath(self), {
            "table_uri": self.table_uri,
            "after_version": self.after_version,
            "deltaplane_conn_id": self.deltaplane_conn_id,
            "poke_interval": self.poke_interval,
            "deadline": self.deadline,
            **self.commit_filter.to_kwargs(),
        }

    def check(self) -> dict[str, Any]:
        from deltaplane.engine import find_new_commits

        return find_new_commits(
            self.table_uri,
            self.after_version,
            storage_options=storage_options(self.deltaplane_conn_id),
            commit_filter=self.commit_filter,
        )

    async def run(self):
        while True:
            try:
                result = await asyncio.to_thread(self.check)
            except Exception as e:  # the task decides: execute_complete raises on an error event
                log.warning("%s: reading the log failed: %s", self.table_uri, describe(e))
                yield TriggerEvent({"status": "error", "message": describe(e)})
                return
            if result["commits"]:
                yield TriggerEvent({"status": "success", **result})
                return
            wait = self.poke_interval
            if self.deadline is not None:
                left = self.deadline - time.time()
                if left <= 0:
                    yield TriggerEvent(
                        {
                            "status": "timeout",
                            "message": f"no matching commit after version {self.after_version} before the "
                            "sensor's timeout",
                            "after_version": self.after_version,
                        }
                    )
                    return
                wait = min(wait, left)
            await asyncio.sleep(wait)


class CommitLogProducer(SharedStreamProducer):
    """The log tail of one ``DeltaCommitEventTrigger`` stream.

    Yields one raw event per commit version (matching or not, so the watermark can move past
    OPTIMIZEs too), plus an idle tick per poll when nothing is new, so the subscriber moves past
    the last commit and Airflow can resolve it. ``advance`` writes the watermark to the last
    version of a batch that every subscriber resolved cleanly (its events stored); an unclean
    one rewinds the stream to announce that version again and ignores what was broadcast
    before the rewind.

    A table that disappears (or whose log was cleaned past the watermark) gives one error event
    (``{"status": "error", "message"}``) and the stream keeps polling without moving the
    watermark: a table restored in place is followed again, and the error is reported again
    only when it changes. Other read errors (storage hiccups) are retried at the next poll."""

    def __init__(self, kwargs: dict[str, Any]):
        self.table_uri = kwargs["table_uri"]
        self.conn_id = kwargs.get("deltaplane_conn_id")
        self.watermark_key = kwargs.get("watermark_key") or "asset-watcher"
        start = kwargs.get("start", DEFAULT_START)
        if kwargs.get("start_after") is not None:  # serialized by an earlier version
            start = int(kwargs["start_after"]) + 1
        self.start = check_start(start)
        self.poke_interval = float(kwargs.get("poke_interval", 30.0))
        self.commit_filter = CommitFilter.of({k: kwargs[k] for k in FILTER_ARGS if k in kwargs})
        self._generation = 0
        self._rewind_to: int | None = None
        self._options: dict[str, str] | None = None
        self._errors = ErrorReports(self.table_uri, "reading the log")

    def _start(self) -> int:
        from deltaplane.engine import open_store, read_watermark, start_after, write_watermark

        known = read_watermark(self.table_uri, self.watermark_key, self._options)
        if known is not None:
            return known
        start = start_after(open_store(self.table_uri, self._options), self.start)
        write_watermark(self.table_uri, self.watermark_key, start, self._options)
        return start

    def _scan(self, after: int) -> list[tuple[int, dict | None]]:
        """Each commit after ``after``: its summary when this stream announces it (it matches
        the filter and no task announced it through an outlet), else ``None``."""
        from deltaplane.engine import IncrementalScan, matching
        from deltaplane.operators.utils.runs import announced_by_a_task

        scan = IncrementalScan.of(self.table_uri, after, storage_options=self._options)
        return [
            (
                change.version,
                change.summary() if matched and not announced_by_a_task(change.commit_info) else None,
            )
            for change, matched in matching(scan, self.commit_filter)
        ]

    async def open_stream(self):
        self._options = await asyncio.to_thread(storage_options, self.conn_id)
        position = None
        while position is None:
            try:
                position = await asyncio.to_thread(self._start)
            except Exception as e:
                if (report := self._errors.item(e, self._generation)) is not None:
                    yield report
                await asyncio.sleep(self.poke_interval)
        log.info("%s: announcing commits after version %d (%s)", self.table_uri, position, self.watermark_key)
        while True:
            if self._rewind_to is not None:
                position, self._rewind_to = self._rewind_to, None
                self._generation += 1
            try:
                found = await asyncio.to_thread(self._scan, position)
            except Exception as e:
                found = []
                if (report := self._errors.item(e, self._generation)) is not None:
                    yield report
            else:
                self._errors.clear()
            for version, summary in found:
                yield {"version": version, "summary": summary}, (self._generation, version)
                position = version
                if self._rewind_to is not None:
                    break
            if not found:
                yield {"tick": True}, (self._generation, None)
                await asyncio.sleep(self.poke_interval)

    async def advance(self, batch: Sequence[AdvanceItem]) -> None:
        from deltaplane.engine import write_watermark

        done = None
        for item in batch:
            generation, version = item.broker_payload
            if generation != self._generation or self._rewind_to is not None:
                continue  # broadcast before a rewind: it will be announced again
            if version is None:
                continue  # an idle tick or an error report: nothing to store
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


class DeltaCommitEventTrigger(TableStreamTrigger):
    """One event per new data commit of a table, for ``AssetWatcher``::

    table = Asset("s3://lake/trips", watchers=[AssetWatcher(name="trips_commits",
                  trigger=DeltaCommitEventTrigger(table_uri="s3://lake/trips", deltaplane_conn_id="lake"))])

    ``start``: where the first start begins (``"earliest"``, the default, as for the log-tail
    sensor: every commit from version 0; ``"latest"``: only commits after the version current
    then; a version ``N``: from ``N`` on); later starts resume from the persisted watermark
    (``watermark_key``). ``start_after=N`` is the older spelling of ``start=N + 1``.

    Commits made by a deltaplane task that announces them through its outlet (its commitInfo's
    ``airflow.asset_event``) are not announced again: on a table's Asset, each data commit is
    one event, from the task that made it or else from this trigger.
    """

    # ack mode: the producer tails the log, Airflow says what it stored
    stream = "deltaplane.commits"
    producer = CommitLogProducer
    serialized = ("table_uri", "deltaplane_conn_id", "watermark_key", "start", "poke_interval")

    def __init__(
        self,
        *,
        table_uri: str,
        deltaplane_conn_id: str | None = None,
        watermark_key: str | None = None,
        start: str | int = DEFAULT_START,
        start_after: int | None = None,
        poke_interval: float = 30.0,
        **filters: Any,
    ):
        super().__init__()
        owner = type(self).__name__
        if start_after is not None:
            if start != DEFAULT_START:
                raise InvalidArgumentError(f"{owner}: give start or start_after, not both")
            start = check_start(int(start_after) + 1, owner=owner)
        self.table_uri = location(table_uri)  # serialized as JSON: a pathlib.Path as its string
        self.deltaplane_conn_id = deltaplane_conn_id
        self.watermark_key = watermark_key or "asset-watcher"
        self.start = check_start(start, owner=owner)
        self.commit_filter = take_filter(owner, filters, strict=True)
        self.poke_interval = float(poke_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        path, kwargs = super().serialize()
        return path, {**kwargs, **self.commit_filter.to_kwargs()}

    def event(self, raw: dict[str, Any]) -> TriggerEvent | None:
        """A matching commit's payload (``event_payload``, the payload of a task's outlet event
        too), or an error report."""
        if raw.get("summary") is not None:
            from deltaplane.operators.utils.runs import event_payload

            return TriggerEvent(event_payload(self.table_uri, raw["summary"]))
        return super().event(raw)
