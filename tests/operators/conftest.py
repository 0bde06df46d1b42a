"""A real Airflow for the operator tests: a temporary AIRFLOW_HOME with a SQLite metadata DB
(``airflow db migrate``), DAG files written into its dags folder, run with ``dag.test()``.

The environment is set when this conftest is imported (collection time), before any test
imports Airflow, because Airflow reads its configuration once, at import.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import shutil
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from deltaplane.devstack.stack import migrate_airflow_db

HOME = Path(tempfile.mkdtemp(prefix="deltaplane-airflow-"))
DAGS = HOME / "dags"
DAGS.mkdir()
os.environ.update(
    {
        "AIRFLOW_HOME": str(HOME),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
    }
)


@pytest.fixture(scope="session")
def airflow_db(tmp_path_factory):
    """HOME with its metadata DB migrated by ``airflow db migrate``, which runs once per test
    session (3-5 s): the first test worker to get here migrates its HOME and leaves a copy of its
    database and configuration in the session's temporary folder; the others copy those. A new
    database holds nothing of its home (the default pool, the log templates, the ``dags-folder``
    bundle's name); the configuration names it, and the copy names this HOME instead."""
    session = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        session = session.parent  # the workers' folders are in the session's
    migrated = session / "airflow-migrated"
    with open(session / "airflow-migrated.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (migrated / "home").exists():
            migrate_airflow_db(timeout=300)
            assert not (HOME / "airflow.db-wal").exists()  # the migration's writes are all in the file
            migrated.mkdir()
            for name in ("airflow.db", "airflow.cfg"):
                shutil.copy2(HOME / name, migrated / name)
            (migrated / "home").write_text(str(HOME))
        else:
            shutil.copy2(migrated / "airflow.db", HOME / "airflow.db")
            cfg = (migrated / "airflow.cfg").read_text().replace((migrated / "home").read_text(), str(HOME))
            (HOME / "airflow.cfg").write_text(cfg)
            (HOME / "airflow.cfg").chmod(0o600)  # as Airflow writes it
    return HOME


def run_dag(name: str, source: str, **test_kwargs):
    """Write ``source`` as ``<dags>/<name>.py`` (it must define ``dag``), import it, ``dag.test()``."""
    path = DAGS / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.dag.test(**test_kwargs)
    finally:
        path.unlink()  # later DAG files may define the same DAG ids


def dag_file(name: str, head: str, tasks: str, dag_args: str = "") -> str:
    """The source of a DAG file whose DAG ``name`` has no schedule (and ``dag_args``, more of its
    arguments, if given) and whose body is ``tasks``; ``head`` is what the file has before the DAG
    besides ``datetime``, ``pendulum``, ``DAG`` and ``task``: the operators' imports and the names
    the tasks share."""
    common = "import datetime\nimport pendulum\nfrom airflow.sdk import DAG, task\n"
    more = f", {dag_args}" if dag_args else ""
    dag = f"with DAG({name!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1){more}) as dag:"
    body = textwrap.indent(textwrap.dedent(tasks), "    ")
    return f"{common}{textwrap.dedent(head)}\n{dag}\n{body}"


def run_tasks(name: str, head: str, tasks: str, dag_args: str = "", **test_kwargs):
    """``run_dag`` of the DAG file ``dag_file`` writes."""
    return run_dag(name, dag_file(name, head, tasks, dag_args), **test_kwargs)


@contextlib.contextmanager
def once_deferred(table_uri: str, action, timeout: float = 300):
    """Run ``action`` in a thread as soon as a sensor has deferred its wait for ``table_uri`` to
    a ``DeltaCommitTrigger`` (Airflow stores the trigger when the task defers, also under
    ``dag.test()``), however long the run took to get there: not after a fixed sleep that a slow
    start overtakes. Yields a dict: ``acted`` once the action ran, ``error`` if it raised."""
    from airflow.models import import_all_models
    from airflow.models.crypto import get_fernet
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session
    from sqlalchemy.orm import configure_mappers

    from deltaplane.operators.triggers.commits import DeltaCommitTrigger

    classpath = f"{DeltaCommitTrigger.__module__}.{DeltaCommitTrigger.__name__}"
    stop, outcome = threading.Event(), {}

    def deferred() -> bool:
        with create_session() as session:
            triggers = session.query(Trigger).filter(Trigger.classpath == classpath).all()
            return any(t.kwargs.get("table_uri") == table_uri for t in triggers)

    # Every model imported and mapped here, first: a first query in the thread would configure
    # SQLAlchemy's mappers (importing Airflow's models) while the run imports them, and the two
    # locks deadlock.
    import_all_models()
    configure_mappers()
    get_fernet()
    deferred()

    def watch():
        deadline = time.monotonic() + timeout
        while not stop.is_set() and time.monotonic() < deadline:
            if deferred():
                try:
                    action()
                    outcome["acted"] = True
                except BaseException as e:
                    outcome["error"] = e
                return
            stop.wait(0.2)
        outcome["error"] = f"no DeltaCommitTrigger for {table_uri} was stored"

    thread = threading.Thread(target=watch, name=f"once-deferred-{table_uri}", daemon=True)
    thread.start()
    try:
        yield outcome
    finally:
        stop.set()
        thread.join(60)


def task_states(run) -> dict[str, str]:
    from airflow.models import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = session.query(TaskInstance).filter_by(dag_id=run.dag_id, run_id=run.run_id).all()
        return {ti.task_id: str(ti.state.value if hasattr(ti.state, "value") else ti.state) for ti in tis}


def xcom(run, task_id: str, key: str = "return_value"):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(XComModel)
            .filter_by(dag_id=run.dag_id, run_id=run.run_id, task_id=task_id, key=key)
            .one_or_none()
        )
        if row is None:
            return None
        value = row.value
        import json

        return json.loads(value) if isinstance(value, str | bytes) else value


def asset_events(uri: str) -> list[dict]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == uri)
            .order_by(AssetEvent.id)
            .all()
        )
        return [dict(r.extra or {}) for r in rows]
