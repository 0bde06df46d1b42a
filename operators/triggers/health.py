"""``DeltaHealthEventTrigger``: a ``BaseEventTrigger`` for an ``AssetWatcher`` that fires when a
table needs maintenance, so a maintenance DAG scheduled on that Asset runs when the table's health
says so instead of on a cron string.

The producer (``HealthProducer``) keeps the table's health current in the triggerer
(``deltaplane.engine.health_tracker``: one full pass when the stream opens, then only the new
commits at each poll) and asks the planner (``deltaplane.engine.maintenance_plan``) what should run
under the trigger's policy. When something should, it announces one event, ``{"status":
"needs_maintenance", "table", "version", "decisions": [...], "reasons": [...]}``, and stays quiet
about that need: one announcement per need, not one per poll. A need is new again once
maintenance has run since the last announcement (an OPTIMIZE, a VACUUM, a checkpoint after it),
when a kind of work not announced before is wanted, or when ``reannounce_after`` seconds (an hour)
have passed with the need still there (a run that yielded to writers, or failed, is not the end of
it).

Like the commit trigger it runs in *ack mode*: the version of an announcement Airflow stored is
written beside the table (``deltaplane.engine.watermarks``, key ``health-<watermark_key>``), and an
announcement Airflow failed to store is made again. A triggerer killed at any point loses no
decision: on restart the producer reads that watermark, measures the table again and announces
the need again unless it was stored and nothing has been done about it since (then the run it
queued is still coming). Storage options come from the connection in the triggerer; a table that
cannot be read is reported once as ``{"status": "error"}`` and polled quietly.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from airflow.triggers.base import TriggerEvent
from airflow.triggers.shared_stream import AdvanceItem, SharedStreamProducer

from deltaplane.operators.triggers.streams import (
    ErrorReports,
    TableStreamTrigger,
    storage_options,
)
from deltaplane.operators.utils.arguments import location

log = logging.getLogger(__name__)


def _policy(values: dict[str, Any] | None):
    from deltaplane.engine import MaintenancePolicy

    return MaintenancePolicy.from_dict(values, owner="DeltaHealthEventTrigger")


class HealthProducer(SharedStreamProducer):
    """The health stream of one ``DeltaHealthEventTrigger`` configuration."""

    def __init__(self, kwargs: dict[str, Any]):
        self.table_uri = kwargs["table_uri"]
        self.conn_id = kwargs.get("deltaplane_conn_id")
        self.policy = _policy(kwargs.get("policy"))
        self.key = "health-" + (kwargs.get("watermark_key") or "maintenance")
        self.poke_interval = float(kwargs.get("poke_interval", 60.0))
        self.reannounce_after = float(kwargs.get("reannounce_after", 3600.0))
        self._announced_at = 0.0  # time.monotonic() of the last announcement (or of adopting one)
        self._options: dict[str, str] | None = None
        self._tracker = None
        self._announced: tuple[int, frozenset[str]] | None = None  # version, kinds (this process)
        self._stored: int | None = None  # the last announcement Airflow stored (the watermark)
        self._generation = 0
        self._errors = ErrorReports(self.table_uri, "measuring health")
        self._again = False  # an announcement Airflow did not store: make it again

    # --- the blocking parts, run in a thread -----------------------------------------------------

    def _open(self) -> None:
        from deltaplane.engine import HealthTracker, load_snapshot, open_store, read_watermark

        store = open_store(self.table_uri, self._options)
        self._tracker = HealthTracker.from_snapshot(
            load_snapshot(store), small_file_size=self.policy.small_file_size
        )
        self._stored = read_watermark(self.table_uri, self.key, self._options)

    def _look(self) -> dict[str, Any] | None:
        """Advance over the new commits; the announcement to make now, if any."""
        from deltaplane.engine import look, open_store, plan_table

        tracker = self._tracker
        store = open_store(self.table_uri, self._options)
        tracker.advance(store)
        seen = look(self.policy, tracker=tracker, store=store)
        wanted = [d for d in plan_table(self.table_uri, seen, self.policy) if d.run]
        if not wanted:
            # Whatever was announced has been answered, by a commit or not (manifests are not
            # commits): the next need is a new one, announced at once.
            self._announced = None
            self._stored = None
            return None
        kinds = frozenset(d.kind for d in wanted)
        last = self._announced
        if self._again:
            self._again = False
        elif last is None and self._stored is not None and not self._maintained_since(self._stored):
            # stored before a restart and nothing done since: its run is still coming
            self._announced = (self._stored, kinds)
            self._announced_at = time.monotonic()
            return None
        elif (
            last is not None
            and not self._maintained_since(last[0])
            and kinds <= last[1]
            and time.monotonic() - self._announced_at < self.reannounce_after
        ):
            return None
        self._announced = (tracker.version, kinds)
        self._announced_at = time.monotonic()
        return {
            "version": tracker.version,
            "decisions": [d.to_dict() for d in wanted],
            "reasons": [f"{d.kind}: {d.reason}" for d in wanted],
        }

    def _maintained_since(self, version: int) -> bool:
        t = self._tracker
        done = [
            t.last_optimize.version if t.last_optimize else None,
            t.last_vacuum.version if t.last_vacuum else None,
            t.last_checkpoint_version,
        ]
        return any(v is not None and v > version for v in done)

    # --- the stream ---------------------------------------------------------------------------

    async def open_stream(self):
        self._options = await asyncio.to_thread(storage_options, self.conn_id)
        while self._tracker is None:
            try:
                await asyncio.to_thread(self._open)
            except Exception as e:
                if (report := self._errors.item(e, self._generation)) is not None:
                    yield report
                await asyncio.sleep(self.poke_interval)
        while True:
            try:
                announce = await asyncio.to_thread(self._look)
            except Exception as e:
                announce = None
                if (report := self._errors.item(e, self._generation)) is not None:
                    yield report
            else:
                self._errors.clear()
            if announce is not None:
                log.info("%s needs maintenance: %s", self.table_uri, "; ".join(announce["reasons"]))
                yield {"announce": announce}, (self._generation, announce["version"])
            else:
                yield {"tick": True}, (self._generation, None)
            await asyncio.sleep(self.poke_interval)

    async def advance(self, batch: Sequence[AdvanceItem]) -> None:
        from deltaplane.engine import write_watermark

        stored = None
        for item in batch:
            generation, version = item.broker_payload
            if generation != self._generation or version is None:
                continue
            if not item.outcome.is_clean:
                log.warning(
                    "%s: the maintenance event at version %d was not stored; announcing it again",
                    self.table_uri,
                    version,
                )
                self._again = True  # the need is announced again at the next look
                self._generation += 1
                break
            stored = version
        if stored is not None:
            self._stored = stored
            await asyncio.to_thread(write_watermark, self.table_uri, self.key, stored, self._options)


class DeltaHealthEventTrigger(TableStreamTrigger):
    """Fires ``needs_maintenance`` events for ``table_uri`` (see the module docstring);
    ``policy`` holds ``MaintenancePolicy`` fields (checked when the DAG is parsed)."""

    stream = "deltaplane.health"
    producer = HealthProducer
    serialized = (
        "table_uri",
        "deltaplane_conn_id",
        "policy",
        "watermark_key",
        "poke_interval",
        "reannounce_after",
    )

    def __init__(
        self,
        *,
        table_uri: str,
        deltaplane_conn_id: str | None = None,
        policy: dict[str, Any] | None = None,
        watermark_key: str | None = None,
        poke_interval: float = 60.0,
        reannounce_after: float = 3600.0,
    ):
        super().__init__()
        self.table_uri = location(table_uri)
        self.deltaplane_conn_id = deltaplane_conn_id
        _policy(policy)  # a wrong key or value fails at parse time
        self.policy = {k: list(v) if isinstance(v, tuple) else v for k, v in (policy or {}).items()}
        self.watermark_key = watermark_key or "maintenance"
        self.poke_interval = float(poke_interval)
        self.reannounce_after = float(reannounce_after)

    def event(self, raw: dict[str, Any]) -> TriggerEvent | None:
        if raw.get("announce") is not None:
            return TriggerEvent({"status": "needs_maintenance", "table": self.table_uri, **raw["announce"]})
        return super().event(raw)
