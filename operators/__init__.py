"""deltaplane's Airflow provider, laid out by role as Airflow's own providers are:

* ``hooks``: the connection (``DeltaHook``) and Spark submission;
* ``operators``: the tasks that commit, maintain, gate and consume a table;
* ``sensors`` and ``triggers``: waiting for commits;
* ``exceptions``: what fails a task, and whether Airflow retries it;
* ``plugins``: the ops view inside Airflow's UI;
* ``factory``: DAGs built from ``config/tables.yaml``;
* ``utils``: what several operators share (arguments, run stamps, landing batches).

The public names are importable from here (``from deltaplane.operators import
DeltaCompactionOperator``). They load on first use, so ``import deltaplane.operators`` stays cheap.
"""

from __future__ import annotations

import importlib

_PUBLIC = {
    "DeltaHook": "hooks.delta",
    "DeltaSparkSubmitHook": "hooks.spark",
    "DeltaCommitOperator": "operators.commit",
    "DeltaDMLOperator": "operators.dml",
    "DeltaAutoOptimizeOperator": "operators.maintenance",
    "DeltaMaintenancePlanOperator": "operators.maintenance",
    "DeltaCompactionOperator": "operators.maintenance",
    "DeltaCheckpointOperator": "operators.maintenance",
    "DeltaVacuumOperator": "operators.maintenance",
    "DeltaManifestOperator": "operators.maintenance",
    "DeltaStageOperator": "operators.ingest",
    "DeltaConsumeOperator": "operators.consume",
    "DeltaAlterOperator": "operators.alter",
    "DeltaQualityGateOperator": "operators.quality",
    "DeltaSparkJobOperator": "operators.spark",
    "DeltaLogTailSensor": "sensors.log_tail",
    "DeltaWatermarkOperator": "sensors.log_tail",
    "DeltaCommitTrigger": "triggers.commits",
    "DeltaCommitEventTrigger": "triggers.commits",
    "DeltaHealthEventTrigger": "triggers.health",
    "SparkJobError": "exceptions",
    "SparkJobInputError": "exceptions",
    "BatchRejected": "exceptions",
    "QualityGateFailed": "exceptions",
    "DeltaTriggerError": "exceptions",
    "DeltaTriggerTimeout": "exceptions",
    "build_dags": "factory.dags",
    "table_asset": "operators.base",
    "maintenance_asset": "operators.base",
    "health_asset": "operators.base",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])
