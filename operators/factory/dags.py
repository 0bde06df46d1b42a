"""DAGs from ``config/tables.yaml``: per table, a maintenance DAG, an ingest DAG and a consumer DAG.

Building them reads only the configuration: no table is opened at parse time, and operators
import the engine only when they run, so a DAG file that calls ``build_dags()`` parses fast.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, Asset, AssetWatcher

from deltaplane.operators.factory.config import (
    HEALTH,
    MaintenanceSection,
    PlatformConfig,
    TableConfig,
    maintenance_policy,
    maintenance_scheduling,
    read_config,
)
from deltaplane.operators.operators.base import health_asset, table_asset
from deltaplane.operators.operators.commit import DeltaCommitOperator
from deltaplane.operators.operators.consume import DeltaConsumeOperator
from deltaplane.operators.operators.ingest import DeltaStageOperator, batch_id
from deltaplane.operators.operators.maintenance import (
    DeltaAutoOptimizeOperator,
    DeltaCheckpointOperator,
    DeltaCompactionOperator,
    DeltaMaintenancePlanOperator,
    DeltaManifestOperator,
    DeltaVacuumOperator,
)
from deltaplane.operators.operators.quality import DeltaQualityGateOperator
from deltaplane.operators.operators.spark import DeltaSparkJobOperator
from deltaplane.operators.sensors.log_tail import DeltaLogTailSensor, DeltaWatermarkOperator
from deltaplane.operators.triggers.commits import DeltaCommitEventTrigger
from deltaplane.operators.triggers.health import DeltaHealthEventTrigger
from deltaplane.operators.utils.runs import asset_uri

START = pendulum.datetime(2026, 1, 1, tz="UTC")
MANIFEST = "{{ ti.xcom_pull(task_ids='stage')['manifest'] }}"
_MANIFEST_DOC = "; **manifest** rewrites the symlink manifests"


def _gate_doc(table: TableConfig) -> str:
    if table.quality is None:
        return ""
    return (
        f"checked by the **quality gate** ({len(table.quality.expectations)} Great Expectations; a failing "
        "batch is quarantined under `_quarantine/` and never committed), "
    )


def _common(name: str, table: TableConfig, kind: str) -> dict[str, Any]:
    return {
        "dag_id": f"deltaplane_{name}_{kind}",
        "start_date": START,
        "catchup": False,
        "max_active_runs": 1,
        "tags": ["deltaplane", name, kind],
        "default_args": {"retries": 2, "retry_delay": pendulum.duration(minutes=1)},
        "user_defined_filters": {"batch_id": batch_id},
    }


def _after_decision(decide, table: TableConfig, conn: dict, *, follow_plan: bool = False, pool=None) -> None:
    """``decide >> compact >> checkpoint >> vacuum (>> manifest)``: the compaction follows the
    decision task; with ``follow_plan`` (a ``DeltaMaintenancePlanOperator``) checkpoint and vacuum
    follow it too, and the rewrites run in ``pool`` when one is configured."""
    follow = {"decision_task_id": decide.task_id} if follow_plan else {}
    compact = DeltaCompactionOperator(
        task_id="compact",
        table_uri=table.uri,
        decision_task_id=decide.task_id,
        target_file_size=table.target_file_size,
        zorder_by=table.zorder_by,
        spark_threshold_bytes=table.spark_threshold_bytes,
        **({"pool": pool} if pool else {}),
        **conn,
    )
    checkpoint = DeltaCheckpointOperator(
        task_id="checkpoint", table_uri=table.uri, cleanup_log=table.checkpoint_cleanup_log, **follow, **conn
    )
    vacuum = DeltaVacuumOperator(
        task_id="vacuum",
        table_uri=table.uri,
        dry_run=table.vacuum_dry_run,
        retention_hours=table.retention_hours,
        enforce_retention=table.enforce_retention,
        **follow,
        **conn,
    )
    decide >> compact >> checkpoint >> vacuum
    if table.manifest:
        vacuum >> DeltaManifestOperator(task_id="manifest", table_uri=table.uri, **follow, **conn)


def maintenance_dag(name: str, table: TableConfig, section: MaintenanceSection | None = None) -> DAG:
    if table.schedules.maintenance == HEALTH:
        return health_maintenance_dag(name, table, section)
    conn = {"deltaplane_conn_id": table.conn_id}
    with DAG(
        schedule=table.schedules.maintenance,
        doc_md=f"""### Maintenance of `{name}`

{table.description or ""}

Table: `{table.uri}`. **auto_optimize** asks the engine's health policy whether any partition
has at least {table.auto_optimize.min_small_files} files under {table.auto_optimize.small_file_size >> 20} MiB
or more than {table.auto_optimize.max_deleted_rows_ratio:.0%} of its rows hidden by deletion vectors; if not,
**compact** succeeds with nothing to do (its XCom says why). **compact** rewrites the chosen partitions
({"Z-order by " + ", ".join(table.zorder_by) if table.zorder_by else "bin-packing"}, `dataChange=false`;
Spark above {table.spark_threshold_bytes >> 20} MiB, running exactly the plan made from the decision).
**checkpoint** writes a checkpoint and
cleans up expired log files; **vacuum** deletes unreferenced files older than the retention
({"dry run" if table.vacuum_dry_run else "for real"}){_MANIFEST_DOC if table.manifest else ""}.
""",
        **_common(name, table, "maintenance"),
    ) as dag:
        decide = DeltaAutoOptimizeOperator(
            task_id="auto_optimize",
            table_uri=table.uri,
            min_small_files=table.auto_optimize.min_small_files,
            small_file_size=table.auto_optimize.small_file_size,
            max_deleted_rows_ratio=table.auto_optimize.max_deleted_rows_ratio,
            zorder_by=table.zorder_by,
            **conn,
        )
        _after_decision(decide, table, conn)
    return dag


def health_maintenance_dag(name: str, table: TableConfig, section: MaintenanceSection | None = None) -> DAG:
    """The maintenance DAG of ``schedules.maintenance: health``: scheduled on the table's health
    Asset, which a ``DeltaHealthEventTrigger`` (in the triggerer) fires when the policy says some
    maintenance is due; the run plans again and does only what the plan says."""
    conn = {"deltaplane_conn_id": table.conn_id}
    policy = maintenance_policy(table, section)
    scheduling = maintenance_scheduling(table, section)
    common = _common(name, table, "maintenance")
    dag_id = common["dag_id"]
    # A rewrite that lost to a user's DML is tried again later, backing off (the user's write won).
    common["default_args"] = {
        "retries": 4,
        "retry_delay": pendulum.duration(minutes=1),
        "retry_exponential_backoff": True,
        "max_retry_delay": pendulum.duration(minutes=30),
    }
    watcher = AssetWatcher(
        name=f"{dag_id}_watcher",
        trigger=DeltaHealthEventTrigger(
            table_uri=table.uri,
            policy=policy.to_dict(),
            watermark_key=dag_id,
            poke_interval=scheduling["poll_seconds"],
            **conn,
        ),
    )
    kinds = ", ".join(policy.enabled)
    with DAG(
        schedule=[health_asset(table.uri, watchers=[watcher])],
        doc_md=f"""### Maintenance of `{name}`, driven by its health

{table.description or ""}

Table: `{table.uri}`. No cron string: a health trigger in the triggerer follows the table's log
(every {scheduling["poll_seconds"]:g} s, reading only the new commits) and fires this DAG when the
policy wants one of: {kinds} (`deltaplane maintenance plan` prints the same decisions).
**plan** decides again, with a one-line reason per kind, leaving out partitions a DELETE, UPDATE
or MERGE changed in the last {scheduling["yield_minutes"]:g} minutes; **compact** rewrites only what
the plan chose (small files, rows hidden by deletion vectors; Spark above
{table.spark_threshold_bytes >> 20} MiB); **checkpoint** and **vacuum** run only when the plan says
so (retention {policy.retention_hours:g} h{", dry run" if table.vacuum_dry_run else ""}), and otherwise
succeed with the plan's reason. A rewrite that loses to a user's write is retried with backoff;
the user's write is never failed by it.
""",
        **common,
    ) as dag:
        plan = DeltaMaintenancePlanOperator(
            task_id="plan",
            table_uri=table.uri,
            policy=policy.to_dict(),
            yield_minutes=scheduling["yield_minutes"],
            **conn,
        )
        pool = section.pool if section is not None else None
        _after_decision(plan, table, conn, follow_plan=True, pool=pool)
    return dag


def ingest_dag(name: str, table: TableConfig) -> DAG:
    ingest = table.ingest
    assert ingest is not None
    staging = ingest.staging or f"{table.uri.rstrip('/')}/_deltaplane/staging"
    conn = {"deltaplane_conn_id": table.conn_id}
    with DAG(
        schedule=table.schedules.ingest,
        doc_md=f"""### Ingest into `{name}`

Landing files (`{ingest.landing}`, {ingest.format}) are **staged** as one batch (data files
written, nothing committed; {"with Spark" if ingest.engine == "spark" else "in-process"}),
{_gate_doc(table)}
then **committed** in one transaction, which emits an event on the table's Asset.
Retries never commit a batch twice. A **rejected** batch (files the table cannot take, found by
the stage; or failed expectations, found by the gate) is moved to `_quarantine/<batch>/` with a
`rejection.json`, and the task that rejected it FAILS without retries: red in the grid, the
commit not run, the run failed; the next run is not blocked.
""",
        **_common(name, table, "ingest"),
    ) as dag:
        manifest_path = f"{staging}/{{{{ run_id | batch_id }}}}.json"
        if ingest.engine == "spark":
            args = [
                "--source",
                f"{ingest.landing}/*.{ingest.format}",
                "--format",
                ingest.format,
                "--stage",
                manifest_path,
            ]
            if ingest.schema_ddl:
                args += ["--schema", ingest.schema_ddl]
            if table.partition_by:
                args += ["--partition-by", ",".join(table.partition_by)]
            if table.cluster_by:
                args += ["--cluster-by", ",".join(table.cluster_by)]
            for key, value in table.properties.items():
                args += ["--property", f"{key}={value}"]
            stage = DeltaSparkJobOperator(
                task_id="stage", table_uri=table.uri, job="ingest", job_args=args, **conn
            )
        else:
            stage = DeltaStageOperator(
                task_id="stage",
                table_uri=table.uri,
                landing=ingest.landing,
                staging=staging,
                source_format=ingest.format,
                partition_by=table.partition_by or None,
                target_file_size=table.target_file_size,
                schema=ingest.schema_ddl,
                cluster_by=table.cluster_by or None,
                properties=table.properties or None,
                **conn,
            )
        commit = DeltaCommitOperator(task_id="commit", table_uri=table.uri, staged_manifest=MANIFEST, **conn)
        if table.quality is not None:
            gate = DeltaQualityGateOperator(
                task_id="quality_gate",
                table_uri=table.uri,
                staged_manifest=MANIFEST,
                expectations=[e.model_dump() for e in table.quality.expectations],
                on_failure=table.quality.on_failure,
                max_batch_rows=table.quality.max_batch_rows,
                max_batch_bytes=table.quality.max_batch_bytes,
                chunk_rows=table.quality.chunk_rows,
                **conn,
            )
            stage >> gate >> commit
        else:
            stage >> commit
    return dag


def consumer_dag(name: str, table: TableConfig) -> DAG:
    consumer = table.consumer
    assert consumer is not None
    conn = {"deltaplane_conn_id": table.conn_id}
    dag_id = f"deltaplane_{name}_consumer"
    if consumer.trigger == "asset":
        uri = asset_uri(table.uri)
        watcher = AssetWatcher(
            name=f"{dag_id}_watcher",
            trigger=DeltaCommitEventTrigger(table_uri=table.uri, watermark_key=dag_id, **conn),
        )
        schedule: Any = [Asset(name=uri, uri=uri, watchers=[watcher])]
        how = "runs on every new data commit of the table's Asset (an `AssetWatcher` on the log, no polling)"
    else:
        schedule = consumer.schedule or "@hourly"
        how = f"runs `{schedule}`; a deferrable log-tail sensor waits in the triggerer for new data commits"
    with DAG(
        schedule=schedule,
        doc_md=f"""### Consumer of `{name}`

{how.capitalize()}, then appends the rows of every data commit since its watermark to
`{consumer.target}` (with `_source_version`). The watermark is a `txn` in the target's own log,
committed with the rows: exactly once, across retries and restarts. OPTIMIZE commits are not data.
""",
        **_common(name, table, "consumer"),
    ) as dag:
        consume = DeltaConsumeOperator(
            task_id="consume", table_uri=consumer.target, source_uri=table.uri, **conn
        )
        if consumer.trigger == "sensor":
            # The sensor's watermark moves only once the rows are in the target (the ack task).
            (
                DeltaLogTailSensor(
                    task_id="wait_for_commits",
                    table_uri=table.uri,
                    watermark_key=dag_id,
                    deferrable=True,
                    poke_interval=30,
                    **conn,
                )
                >> consume
                >> DeltaWatermarkOperator(
                    task_id="ack_commits",
                    table_uri=table.uri,
                    sensor_task_id="wait_for_commits",
                    watermark_key=dag_id,
                    **conn,
                )
            )
    return dag


def build_dags(config: PlatformConfig | None = None, *, fileloc: str | None = None) -> dict[str, DAG]:
    """Every table's DAGs; ``fileloc`` is the DAG file that calls this (Airflow finds, parses and
    runs DAGs by the file that defines them, not by this module).

    Without ``config``: the valid tables of ``$DELTAPLANE_CONFIG`` (or ``config/tables.yaml``),
    so one invalid table does not take every other table's DAGs down; its errors are
    ``dags/deltaplane_config_errors.py``'s import error. An error of the file itself (not YAML,
    a table name written twice...) still raises ``ConfigError``: no table can be trusted."""
    config = config if config is not None else read_config().config
    dags: dict[str, DAG] = {}
    for name, table in config.tables.items():
        for build in (maintenance_dag, ingest_dag, consumer_dag):
            if build is ingest_dag and table.ingest is None:
                continue
            if build is consumer_dag and table.consumer is None:
                continue
            dag = build(name, table, config.maintenance) if build is maintenance_dag else build(name, table)
            if fileloc is not None:
                dag.fileloc = fileloc
            dags[dag.dag_id] = dag
    return dags


__all__ = ["build_dags", "table_asset"]
