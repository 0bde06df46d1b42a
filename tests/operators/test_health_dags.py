"""``schedules.maintenance: health``: the factory's maintenance DAG scheduled on the table's health
Asset (a ``DeltaHealthEventTrigger`` watcher), run with ``dag.test()``: the plan decides with a
reason per kind, leaves partitions a recent DML changed to the writers, and the tasks after it do
exactly what it decided (and succeed with its reason otherwise)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from tests.operators.conftest import run_dag, task_states, xcom
from tests.operators.test_dags import dag_file, write_config

pytestmark = pytest.mark.airflow

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])


def config_for(
    tmp_path,
    *,
    yield_minutes: float = 10,
    extra: str = "",
    budget: str | None = None,
    cpu_budget: float | None = None,
):
    return write_config(
        tmp_path,
        f"""
        maintenance:
          defaults: {{min_vacuum_bytes: 1GB}}
        tables:
          events:
            uri: lake/events
            schedules: {{maintenance: health}}
            retention_hours: 0
            enforce_retention: false
            maintenance:
              min_small_files: 3
              max_versions_since_checkpoint: 5
              yield_minutes: {yield_minutes}
              poll_seconds: 5
              max_bytes_rewritten_per_day: {budget or "null"}
              max_cpu_seconds_per_day: {cpu_budget or "null"}
            {extra}
        """,
    )


def small_appends(uri: str, batches: int) -> list[int]:
    """Each batch one small file in each of partitions a and b; the ids written."""
    t = DeltaTable(uri)
    ids = []
    for b in range(batches):
        rows = [10 * b + i for i in range(4)]
        t.append(pa.table({"id": rows, "p": ["a", "b", "a", "b"]}, schema=SCHEMA))
        ids += rows
    return ids


def files_in(uri: str, part: str) -> int:
    return sum(
        1 for f in DeltaTable(uri).get_add_actions(flatten=True).to_pylist() if f["partition.p"] == part
    )


def make_table(tmp_path) -> str:
    uri = str(tmp_path / "lake" / "events")
    DeltaTable.create(uri, SCHEMA, partition_by=["p"], properties={"delta.enableDeletionVectors": "true"})
    return uri


def test_the_health_dag_is_scheduled_on_the_health_asset_with_the_tables_policy(tmp_path):
    from deltaplane.operators.factory.config import load_config
    from deltaplane.operators.factory.dags import build_dags
    from deltaplane.operators.triggers.health import DeltaHealthEventTrigger

    config = load_config(config_for(tmp_path))
    dags = build_dags(config)
    dag = dags["deltaplane_events_maintenance"]
    (asset,) = dag.timetable.asset_condition.objects
    assert asset.uri == f"file://{tmp_path}/lake/events/_deltaplane/health"
    (watcher,) = asset.watchers
    trigger = watcher.trigger
    assert isinstance(trigger, DeltaHealthEventTrigger)
    assert trigger.policy["min_small_files"] == 3 and trigger.policy["max_versions_since_checkpoint"] == 5
    assert trigger.policy["min_vacuum_bytes"] == 1 << 30 and trigger.poke_interval == 5
    assert trigger.watermark_key == "deltaplane_events_maintenance"
    assert [t.task_id for t in dag.topological_sort()] == ["plan", "compact", "checkpoint", "vacuum"]
    plan = dag.get_task("plan")
    assert plan.policy == trigger.policy and plan.yield_minutes == 10
    assert dag.default_args["retry_exponential_backoff"] is True
    # the poll and yield settings are the DAG's, not the policy's
    assert "poll_seconds" not in trigger.policy and "yield_minutes" not in trigger.policy


def test_a_cron_table_keeps_its_cron_maintenance_dag(tmp_path):
    from deltaplane.operators.factory.config import load_config
    from deltaplane.operators.factory.dags import build_dags

    path = write_config(
        tmp_path,
        """
        tables:
          events:
            uri: lake/events
            schedules: {maintenance: "@hourly"}
        """,
    )
    dag = build_dags(load_config(path))["deltaplane_events_maintenance"]
    assert [t.task_id for t in dag.topological_sort()] == ["auto_optimize", "compact", "checkpoint", "vacuum"]


def test_the_plan_leaves_a_busy_partition_to_its_writer_and_the_tasks_follow_it(airflow_db, tmp_path):
    uri = make_table(tmp_path)
    ids = small_appends(uri, 4)  # 4 small files in each partition, 5 commits
    DeltaTable(uri).delete("id = 1")  # a user's DELETE in partition b, just now
    expected = sorted(i for i in ids if i != 1)
    config = config_for(tmp_path)

    run = run_dag("health_maintain", dag_file("deltaplane_events_maintenance", config))
    assert set(task_states(run).values()) == {"success"}, task_states(run)
    plan = xcom(run, "plan")
    assert plan["run"] == ["compaction", "checkpoint"], plan["reasons"]
    compaction = next(d for d in plan["decisions"] if d["kind"] == "compaction")
    assert compaction["partitions"] == [{"p": "a"}]
    assert "left to concurrent DML (DELETE v5" in compaction["reason"]
    vacuum = next(d for d in plan["decisions"] if d["kind"] == "vacuum")
    assert not vacuum["run"]
    compact = xcom(run, "compact")
    assert compact["num_files_removed"] == 4 and compact["num_files_added"] == 1
    assert files_in(uri, "a") == 1 and files_in(uri, "b") == 4  # b left alone
    assert xcom(run, "checkpoint")["checkpoint"]["version"] == 6
    skipped = xcom(run, "vacuum")
    assert skipped["nothing_to_do"] and skipped["reason"].startswith("plan: vacuum not needed: ")
    assert sorted(r["id"] for r in DeltaTable(uri).to_arrow().to_pylist()) == expected
    ops = [h["operation"] for h in DeltaTable(uri).history(2)]
    assert ops == ["OPTIMIZE", "DELETE"]  # the checkpoint commits nothing; no VACUUM

    # Run again (a second event, a clear, a rerun): partition a is done, b still yields.
    again = run_dag("health_maintain_again", dag_file("deltaplane_events_maintenance", config))
    assert set(task_states(again).values()) == {"success"}
    plan = xcom(again, "plan")
    assert "compaction" not in plan["run"], plan["reasons"]
    assert xcom(again, "compact")["nothing_to_do"] and DeltaTable(uri).version == 6
    assert sorted(r["id"] for r in DeltaTable(uri).to_arrow().to_pylist()) == expected


def test_without_yielding_the_busy_partition_is_compacted_too(airflow_db, tmp_path):
    uri = make_table(tmp_path)
    ids = small_appends(uri, 4)
    DeltaTable(uri).delete("id = 1")
    config = config_for(tmp_path, yield_minutes=0)
    run = run_dag("health_no_yield", dag_file("deltaplane_events_maintenance", config))
    assert set(task_states(run).values()) == {"success"}, task_states(run)
    compaction = next(d for d in xcom(run, "plan")["decisions"] if d["kind"] == "compaction")
    assert sorted(p["p"] for p in compaction["partitions"]) == ["a", "b"]
    assert files_in(uri, "a") == 1 and files_in(uri, "b") == 1
    assert sorted(r["id"] for r in DeltaTable(uri).to_arrow().to_pylist()) == sorted(i for i in ids if i != 1)


def test_a_spent_daily_budget_skips_the_rewrite_and_says_so(airflow_db, tmp_path):
    uri = make_table(tmp_path)
    small_appends(uri, 4)
    DeltaTable(uri).optimize()  # today's rewrite: more than the budget below
    ids = small_appends(uri, 4)
    config = config_for(tmp_path, budget="1KB")
    run = run_dag("health_budget", dag_file("deltaplane_events_maintenance", config))
    assert set(task_states(run).values()) == {"success"}, task_states(run)
    plan = xcom(run, "plan")
    compaction = next(d for d in plan["decisions"] if d["kind"] == "compaction")
    assert not compaction["run"] and compaction["reason"].startswith("over budget: "), compaction
    assert plan["rewritten_today"] > 1024 and "compaction" not in plan["run"]
    assert xcom(run, "compact")["nothing_to_do"]
    assert "OPTIMIZE" not in [h["operation"] for h in DeltaTable(uri).history(3)]
    assert len(ids) == 16


def test_a_spent_cpu_budget_skips_the_rewrite_and_says_so(airflow_db, tmp_path):
    """The day's CPU, as the OPTIMIZE commits recorded it (``cpuTimeMs``), against
    ``max_cpu_seconds_per_day``; the next rewrite's CPU estimated at the table's own rate."""
    import json

    uri = make_table(tmp_path)
    small_appends(uri, 4)
    done = DeltaTable(uri).optimize()  # today's rewrite
    ids = small_appends(uri, 4)
    commit = Path(uri) / "_delta_log" / f"{done.version:020d}.json"
    recorded = next(
        json.loads(line)["commitInfo"]["operationMetrics"]["cpuTimeMs"]
        for line in commit.read_text().splitlines()
        if '"commitInfo"' in line
    )
    budget = int(recorded) / 1000 * 1.5  # half of today's use left: less than the same rewrite again
    run = run_dag(
        "health_cpu_budget",
        dag_file("deltaplane_events_maintenance", config_for(tmp_path, cpu_budget=budget)),
    )
    assert set(task_states(run).values()) == {"success"}, task_states(run)
    plan = xcom(run, "plan")
    compaction = next(d for d in plan["decisions"] if d["kind"] == "compaction")
    assert not compaction["run"] and compaction["reason"].startswith("over budget: "), compaction
    assert "CPU-s spent today" in compaction["reason"] and f"> {budget:g} CPU-s a day" in compaction["reason"]
    spent = plan["spent_today"]
    assert spent["rewrites"] == 1 and spent["cpu_seconds"] == round(int(recorded) / 1000, 3)
    assert xcom(run, "compact")["nothing_to_do"] and len(ids) == 16


def test_manifests_are_regenerated_when_behind_even_after_the_plan_looked(airflow_db, tmp_path):
    """``manifest: true`` puts the ``manifest`` kind in the table's policy: the plan decides on
    how far the manifests are behind, and the manifest task looks again when it runs (the
    compaction before it in the same run moved files); with nothing new it does nothing."""
    from deltaplane.engine.commands.manifest import manifest_lag
    from deltaplane.engine.storage import LocalStore

    uri = str(tmp_path / "lake" / "events")
    DeltaTable.create(uri, SCHEMA, partition_by=["p"])  # no DVs: a manifest cannot express them
    small_appends(uri, 4)
    DeltaTable(uri).generate_manifest()  # current before the run
    config = config_for(tmp_path, extra="manifest: true")
    run = run_dag("health_manifest", dag_file("deltaplane_events_maintenance", config))
    assert set(task_states(run).values()) == {"success"}, task_states(run)
    plan = xcom(run, "plan")
    manifest = next(d for d in plan["decisions"] if d["kind"] == "manifest")
    assert not manifest["run"] and "0 commit(s) behind" in manifest["reason"], manifest
    assert "compaction" in plan["run"] and xcom(run, "compact")["num_files_removed"] == 8
    written = xcom(run, "manifest")
    assert not written.get("nothing_to_do") and written["manifest"]["version"] == DeltaTable(uri).version
    live = sorted(Path(u.removeprefix("file://")).name for u in DeltaTable(uri).file_uris())
    listed = sorted(
        Path(line.removeprefix("file:")).name
        for f in (Path(uri) / "_symlink_format_manifest").rglob("manifest")
        for line in f.read_text().splitlines()
    )
    assert listed == live and len(live) == 2
    assert manifest_lag(LocalStore(uri), DeltaTable(uri).version).commits_behind == 0

    again = run_dag("health_manifest_again", dag_file("deltaplane_events_maintenance", config))
    assert set(task_states(again).values()) == {"success"}, task_states(again)
    skipped = xcom(again, "manifest")
    assert skipped["nothing_to_do"] and skipped["reason"].startswith("plan: manifest not needed: ")


def test_the_rewrites_run_in_the_configured_pool(tmp_path):
    from deltaplane.operators.factory.config import ConfigError, load_config
    from deltaplane.operators.factory.dags import build_dags

    path = config_for(tmp_path)
    path.write_text(
        path.read_text().replace(
            "maintenance:\n  defaults:", "maintenance:\n  pool: dp_maint\n  defaults:", 1
        )
    )
    dag = build_dags(load_config(path))["deltaplane_events_maintenance"]
    assert dag.get_task("compact").pool == "dp_maint"
    assert dag.get_task("plan").pool == "default_pool" and dag.get_task("vacuum").pool == "default_pool"
    path.write_text(path.read_text().replace("pool: dp_maint", "pool: 'no pool; rm -rf /'"))
    with pytest.raises(ConfigError, match=r"maintenance\.pool"):
        load_config(path)


def test_a_liquid_clustered_table_is_clustered_by_the_dag(airflow_db, tmp_path):
    uri = str(tmp_path / "lake" / "events")
    t = DeltaTable.create(uri, SCHEMA, cluster_by=["id"])
    for i in range(4):
        t.append(pa.table({"id": [i, 10 + i], "p": ["a", "b"]}, schema=SCHEMA))
    config = config_for(tmp_path, extra="")
    config.write_text(config.read_text().replace("min_small_files: 3", "min_unclustered_files: 3"))
    run = run_dag("health_liquid", dag_file("deltaplane_events_maintenance", config))
    assert set(task_states(run).values()) == {"success"}, task_states(run)
    plan = xcom(run, "plan")
    assert "clustering" in plan["run"] and "compaction" not in plan["run"], plan["reasons"]
    compact = xcom(run, "compact")
    assert compact["kind"] == "clustering" and compact["num_files_removed"] == 4
    health = DeltaTable(uri).health()
    assert health.clustered and health.num_unclustered_files == 0
    assert sorted(r["id"] for r in DeltaTable(uri).to_arrow().to_pylist()) == sorted(
        [*range(4), *range(10, 14)]
    )


def test_expired_log_files_are_cleaned_by_the_checkpoint_task_alone(airflow_db, tmp_path):
    import os
    import time

    uri = make_table(tmp_path)
    small_appends(uri, 2)
    DeltaTable(uri).checkpoint()
    small_appends(uri, 1)
    when = time.time() - 45 * 86400  # a table that has lived 45 days, its log never cleaned
    for f in (tmp_path / "lake" / "events" / "_delta_log").iterdir():
        os.utime(f, (when, when))
    config = config_for(tmp_path)
    run = run_dag("health_log", dag_file("deltaplane_events_maintenance", config))
    assert set(task_states(run).values()) == {"success"}, task_states(run)
    plan = xcom(run, "plan")
    assert plan["run"] == ["compaction", "log_cleanup"], plan["reasons"]  # no checkpoint due
    checkpoint = xcom(run, "checkpoint")
    assert checkpoint["reason"].startswith("log cleanup only; plan: checkpoint not needed")
    assert "checkpoint" not in checkpoint and checkpoint["log_cleanup"]["files"]
    left = sorted(f.name for f in (tmp_path / "lake" / "events" / "_delta_log").glob("*.json"))
    assert left[0] == f"{2:020d}.json"  # the commits before the checkpoint's are gone
    assert DeltaTable(uri).count() == 12
