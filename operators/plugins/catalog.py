"""Which Delta tables the ops view shows, and which DAGs and tasks work on each.

Three sources, merged by the table's Asset URI (``deltaplane.operators.utils.runs.asset_uri``):

* the tables file (``config/tables.yaml``): each table, named, with its settings and the DAGs the
  factory builds for it, and the table its consumer writes (``<name>.consumer``);
* the DAGs Airflow has parsed (the newest serialized version of every DAG that is not stale):
  every task of a deltaplane operator names its table (``table_uri``; a consumer also its
  ``source_uri``) and its connection, before the DAG ever runs. A templated URI counts as the
  values Airflow rendered for the task's recent runs (its rendered-fields table);
* Asset events whose ``extra["payload"]`` names a ``table`` (the events of deltaplane's commits): tables
  that DAGs since changed or deleted wrote to.

A table that only Airflow knows of is named by its URI (its page: ``/table?uri=...``) and opened
with the connection its tasks use; the tables file's defaults stand for its settings. Its gate
history comes from the XComs of the quality-gate and stage tasks that name it, as a configured
table's comes from its ingest DAG's.

Nothing here raises for a bad source: a tables file that cannot be read, or an Airflow metadata
database that cannot be, is a notice beside the tables the other sources gave.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote

log = logging.getLogger(__name__)

CONSUMER_SUFFIX = ".consumer"  # a consumer target's page name: "<source>.consumer" (no config name has a dot)
# The factory's ingest DAG: (task, whether it is a stage)
FACTORY_GATE_TASKS = (("quality_gate", False), ("stage", True))
URI_FIELDS = ("table_uri", "source_uri")  # the fields of a deltaplane task that name tables
GATE_TYPES = frozenset({"DeltaQualityGateOperator"})  # tasks whose XCom is a gate result
STAGE_TYPES = frozenset({"DeltaStageOperator"})  # tasks whose XCom may report a rejected batch
MAINTENANCE_TYPES = frozenset(
    {"DeltaAutoOptimizeOperator", "DeltaCompactionOperator", "DeltaMaintenancePlanOperator"}
)
RENDERED_RUNS = 30  # rendered values read per templated task (Airflow keeps about that many)


@dataclass(frozen=True)
class GateTask:
    """A task whose XComs hold a table's gate results (a stage's: only its rejections)."""

    dag_id: str
    task_id: str
    stage: bool = False


@dataclass(frozen=True)
class Entry:
    """A table the view shows. ``name``: the tables file's name (or ``<name>.consumer``), or the
    URI for a table only Airflow knows of (``configured=False``); ``consumer_of``: the source
    table's name when the table is a configured consumer's target; ``maintained``: a DAG runs
    auto-optimize or compaction on it."""

    name: str
    config: Any  # TableConfig
    dags: tuple[str, ...]
    consumer_of: str | None = None
    configured: bool = True
    gate_tasks: tuple[GateTask, ...] = ()
    maintained: bool = True
    maintenance: Any = None  # the tables file's MaintenanceSection (defaults, job cap), if any

    @property
    def label(self) -> str:
        """What the list shows as the table's name: its name, or its URI's last part."""
        if self.configured:
            return self.name
        return self.config.uri.rstrip("/").rsplit("/", 1)[-1] or self.config.uri

    @property
    def link(self) -> str:
        """The table's page, under the view's root."""
        if self.configured:
            return "/tables/" + quote(self.name, safe="")
        return "/table?uri=" + quote(self.config.uri, safe="")


@dataclass(frozen=True)
class Touch:
    """A task, or an Asset event, that names a table."""

    uri: str
    dag_id: str | None
    task_id: str | None = None
    task_type: str | None = None
    conn_id: str | None = None
    from_event: bool = False


@dataclass
class Catalog:
    entries: dict[str, Entry] = field(default_factory=dict)  # by name, the list's order
    errors: dict[str, list[str]] = field(default_factory=dict)  # invalid tables of the tables file
    notices: list[str] = field(default_factory=list)  # a source that could not be read
    dag_tables: dict[str, list[str]] = field(default_factory=dict)  # DAG id -> names, its tab's tables
    latest_runs: dict[str, dict[str, Any]] = field(default_factory=dict)  # DAG id -> its newest run

    def configured(self, name: str) -> Entry | None:
        entry = self.entries.get(name)
        return entry if entry is not None and entry.configured else None

    def by_uri(self, uri: str) -> Entry | None:
        from deltaplane.operators.utils.runs import asset_uri

        wanted = _key(uri, asset_uri)
        return next((e for e in self.entries.values() if _key(e.config.uri, asset_uri) == wanted), None)

    def for_dag(self, dag_id: str) -> list[Entry]:
        """The tables of a DAG's tab: the table a factory DAG is built for; else the tables its
        tasks name now (or, when they name none, the tables its Asset events name)."""
        for entry in self.entries.values():
            if entry.configured and entry.consumer_of is None and dag_id in _factory_dags(entry.name):
                return [entry]
        return [self.entries[name] for name in self.dag_tables.get(dag_id, ())]


def _factory_dags(name: str) -> tuple[str, ...]:
    return tuple(f"deltaplane_{name}_{kind}" for kind in ("maintenance", "ingest", "consumer"))


def _key(uri: str, asset_uri) -> str:
    try:
        return asset_uri(uri)
    except (OSError, ValueError, RuntimeError):
        return uri


def load() -> Catalog:
    """Every table to show, from the tables file, the DAGs and the Asset events."""
    from deltaplane.operators.utils.runs import asset_uri

    catalog = Catalog()
    _configured(catalog)
    touches = _read_airflow(catalog.notices)
    by_key = {_key(e.config.uri, asset_uri): name for name, e in catalog.entries.items()}
    found: dict[str, Entry] = {}
    tabs: dict[str, list[str]] = {}
    event_tabs: dict[str, list[str]] = {}
    for touch in touches:
        key = _key(touch.uri, asset_uri)
        name = by_key.get(key)
        if name is None:
            entry = _discovered(touch, key if touch.uri in catalog.entries else touch.uri)
            if entry is None:
                continue
            name = by_key[key] = entry.name
            found[name] = entry
        pool = catalog.entries if name in catalog.entries else found
        pool[name] = _with_touch(pool[name], touch)
        if touch.dag_id is not None:
            names = (event_tabs if touch.from_event else tabs).setdefault(touch.dag_id, [])
            if name not in names:
                names.append(name)
    for name in sorted(found):
        catalog.entries[name] = found[name]
    catalog.dag_tables = {**event_tabs, **tabs}  # a DAG's tasks, when they name tables, decide its tab
    dag_ids = sorted({d for e in catalog.entries.values() for d in e.dags})
    catalog.latest_runs = _latest_runs(dag_ids, catalog.notices) if touches or dag_ids else {}
    return catalog


def _latest_runs(dag_ids: list[str], notices: list[str]) -> dict[str, dict[str, Any]]:
    """The newest run of each DAG (``state``, ``run_id``, ``when`` in ms): a table whose DAG's
    latest run failed is "failing" in the list. Nothing when Airflow cannot be read (the notice
    for that is ``_read_airflow``'s)."""
    if not dag_ids:
        return {}
    try:
        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session
        from sqlalchemy import func, select

        with create_session() as session:
            newest = (
                select(DagRun.dag_id, func.max(DagRun.id).label("id"))
                .where(DagRun.dag_id.in_(dag_ids))
                .group_by(DagRun.dag_id)
                .subquery()
            )
            rows = session.execute(
                select(DagRun.dag_id, DagRun.run_id, DagRun.state, DagRun.end_date, DagRun.start_date).join(
                    newest, DagRun.id == newest.c.id
                )
            ).all()
    except Exception:
        log.warning("ops view: cannot read the DAGs' latest runs", exc_info=True)
        return {}
    out = {}
    for dag_id, run_id, state, end, start in rows:
        when = end or start
        out[dag_id] = {
            "run_id": run_id,
            "state": str(getattr(state, "value", state)) if state is not None else None,
            "when": int(when.timestamp() * 1000) if when is not None else None,
        }
    return out


def _configured(catalog: Catalog) -> None:
    from deltaplane.operators.factory.config import ConfigError, TableConfig, config_path, read_config

    try:
        report = read_config()
    except ConfigError as e:
        catalog.notices.append(f"tables file {config_path()}: {e}")
        return
    catalog.errors = dict(report.errors)
    for name, config in report.config.tables.items():
        kinds = ["maintenance"] + ["ingest"] * bool(config.ingest) + ["consumer"] * bool(config.consumer)
        ingest = f"deltaplane_{name}_ingest"
        gates = tuple(GateTask(ingest, task, stage) for task, stage in FACTORY_GATE_TASKS)
        catalog.entries[name] = Entry(
            name,
            config,
            tuple(f"deltaplane_{name}_{kind}" for kind in kinds),
            gate_tasks=gates,
            maintenance=report.config.maintenance,
        )
    for name, config in report.config.tables.items():
        if config.consumer is not None:
            target = TableConfig(uri=config.consumer.target, conn_id=config.conn_id)
            catalog.entries[name + CONSUMER_SUFFIX] = Entry(
                name + CONSUMER_SUFFIX,
                target,
                (f"deltaplane_{name}_consumer",),
                consumer_of=name,
                maintained=False,  # the factory builds no maintenance DAG for a consumer's target
            )


def _discovered(touch: Touch, name: str) -> Entry | None:
    from deltaplane.operators.factory.config import TableConfig

    try:
        config = TableConfig(uri=touch.uri, conn_id=touch.conn_id)
    except ValueError:
        return None
    return Entry(name, config, (), configured=False, maintained=False)


def _with_touch(entry: Entry, touch: Touch) -> Entry:
    changes: dict[str, Any] = {}
    if touch.dag_id is not None and touch.dag_id not in entry.dags:
        changes["dags"] = (*entry.dags, touch.dag_id)
    if touch.task_id is not None and touch.dag_id is not None:
        if touch.task_type in GATE_TYPES or touch.task_type in STAGE_TYPES:
            gate = GateTask(touch.dag_id, touch.task_id, stage=touch.task_type in STAGE_TYPES)
            if gate not in entry.gate_tasks:
                changes["gate_tasks"] = (*entry.gate_tasks, gate)
        if touch.task_type in MAINTENANCE_TYPES and not entry.maintained:
            changes["maintained"] = True
    if not entry.configured and entry.config.conn_id is None and touch.conn_id:
        changes["config"] = entry.config.model_copy(update={"conn_id": touch.conn_id})
    return replace(entry, **changes) if changes else entry


# --- what Airflow knows ---------------------------------------------------------------------------


def _read_airflow(notices: list[str]) -> list[Touch]:
    """The tasks of the DAGs and the Asset events that name tables; nothing (and a notice) when
    Airflow's metadata database cannot be read."""
    try:
        from airflow.utils.session import create_session

        with create_session() as session:
            return [*dag_touches(session), *event_touches(session)]
    except Exception as e:  # no metadata database here: the tables file's tables still show
        log.warning("ops view: cannot read Airflow's DAGs and Asset events", exc_info=True)
        notices.append(f"Airflow's DAGs and Asset events could not be read: {type(e).__name__}: {e}")
        return []


def dag_touches(session) -> list[Touch]:
    """Every table the deltaplane tasks of the current DAGs name (templated names: as rendered
    for their recent runs)."""
    from airflow.models.dag import DagModel
    from airflow.models.serialized_dag import SerializedDagModel
    from sqlalchemy import select

    active = list(session.scalars(select(DagModel.dag_id).where(~DagModel.is_stale)))
    out: list[Touch] = []
    templated: list[tuple[Touch, str]] = []
    for row in SerializedDagModel.get_latest_serialized_dags(dag_ids=active, session=session):
        for touch, uri_field in _dag_version_touches(row):
            if "{{" in touch.uri:
                templated.append((touch, uri_field))
            else:
                out.append(touch)
    out += _rendered(session, templated)
    return out


_TOUCHES: dict[tuple[str, str], list[tuple[Touch, str]]] = {}  # by (DAG id, DAG hash): versions never change


def _dag_version_touches(row) -> list[tuple[Touch, str]]:
    key = (row.dag_id, row.dag_hash)
    if key not in _TOUCHES:
        try:
            tasks = row.dag.tasks
        except Exception:  # a DAG Airflow itself cannot deserialize: skip it, keep the others
            log.warning("ops view: cannot deserialize DAG %s", row.dag_id, exc_info=True)
            tasks = []
        if len(_TOUCHES) > 10_000:
            _TOUCHES.clear()
        _TOUCHES[key] = [t for task in tasks for t in _task_touches(row.dag_id, task)]
    return _TOUCHES[key]


def _deltaplane_task(task) -> bool:
    module = getattr(task, "_task_module", None) or ""
    if module.startswith("deltaplane."):
        return True
    outlets = getattr(task, "outlets", None) or ()
    return any(str(getattr(o, "name", "")).startswith("deltaplane-commits:") for o in outlets)


def _task_touches(dag_id: str, task) -> Iterable[tuple[Touch, str]]:
    if not _deltaplane_task(task):
        return
    partial = getattr(task, "partial_kwargs", None) or {}
    conn_id = getattr(task, "deltaplane_conn_id", None) or partial.get("deltaplane_conn_id")
    for uri_field in URI_FIELDS:
        uri = getattr(task, uri_field, None)
        if uri is None:
            uri = partial.get(uri_field)
        if isinstance(uri, str) and uri.strip():
            yield (
                Touch(
                    uri,
                    dag_id,
                    task.task_id,
                    task.task_type,
                    conn_id if isinstance(conn_id, str) else None,
                ),
                uri_field,
            )


def _rendered(session, templated: list[tuple[Touch, str]]) -> list[Touch]:
    """The values Airflow rendered for templated table URIs in the tasks' recent runs."""
    if not templated:
        return []
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as Rendered
    from sqlalchemy import and_, or_, select

    wanted = {(t.dag_id, t.task_id): [] for t, _ in templated}
    for t, uri_field in templated:
        wanted[(t.dag_id, t.task_id)].append((t, uri_field))
    query = select(Rendered.dag_id, Rendered.task_id, Rendered.rendered_fields).where(
        or_(*(and_(Rendered.dag_id == d, Rendered.task_id == k) for d, k in wanted))
    )
    out, seen = [], set()
    for dag_id, task_id, fields in session.execute(query.limit(RENDERED_RUNS * len(wanted))):
        if not isinstance(fields, dict):
            continue
        for touch, uri_field in wanted[(dag_id, task_id)]:
            uri = fields.get(uri_field)
            if isinstance(uri, str) and uri.strip() and "{{" not in uri and (touch, uri) not in seen:
                seen.add((touch, uri))
                out.append(replace(touch, uri=uri))
    return out


def event_touches(session) -> list[Touch]:
    """The table and source DAG of the newest Asset event per (asset, DAG) whose extra names a
    table: deltaplane commits' events."""
    from airflow.models.asset import AssetEvent
    from sqlalchemy import func, select

    newest = select(func.max(AssetEvent.id)).group_by(AssetEvent.asset_id, AssetEvent.source_dag_id)
    rows = session.execute(
        select(AssetEvent.source_dag_id, AssetEvent.extra).where(AssetEvent.id.in_(newest.scalar_subquery()))
    )
    out = []
    for dag_id, extra in rows:
        # Every deltaplane commit event has one shape, {"from_trigger", "payload": {"table", ...}}
        # (operators/utils/runs.py), whether a task's outlet or the watcher announced it.
        payload = extra.get("payload") if isinstance(extra, dict) else None
        table = payload.get("table") if isinstance(payload, dict) else None
        if isinstance(table, str) and table.strip():
            out.append(Touch(table, dag_id if isinstance(dag_id, str) else None, from_event=True))
    return out
