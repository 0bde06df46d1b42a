"""What Airflow's provider manager lists for deltaplane (the ``apache_airflow_provider`` entry point)."""

from __future__ import annotations


def get_provider_info() -> dict:
    return {
        "package-name": "deltaplane",
        "name": "Deltaplane",
        "description": "Delta Lake tables: commits, quality gates, compaction, vacuum, checkpoints, "
        "manifests, DML and Spark jobs, a log-tail sensor and commit triggers.",
        "versions": ["0.1.0"],
        "connection-types": [
            {
                "connection-type": "deltaplane",
                "hook-class-name": "deltaplane.operators.hooks.delta.DeltaHook",
            },
        ],
        "operators": [
            {
                "integration-name": "Deltaplane",
                "python-modules": [
                    "deltaplane.operators.operators.commit",
                    "deltaplane.operators.operators.maintenance",
                    "deltaplane.operators.operators.dml",
                    "deltaplane.operators.operators.quality",
                    "deltaplane.operators.operators.spark",
                    "deltaplane.operators.operators.consume",
                    "deltaplane.operators.operators.alter",
                ],
            }
        ],
        "sensors": [
            {"integration-name": "Deltaplane", "python-modules": ["deltaplane.operators.sensors.log_tail"]}
        ],
        "triggers": [
            {
                "integration-name": "Deltaplane",
                "python-modules": [
                    "deltaplane.operators.triggers.commits",
                    "deltaplane.operators.triggers.health",
                ],
            }
        ],
        "hooks": [
            {
                "integration-name": "Deltaplane",
                "python-modules": ["deltaplane.operators.hooks.delta", "deltaplane.operators.hooks.spark"],
            }
        ],
        "integrations": [{"integration-name": "Deltaplane", "external-doc-url": "https://delta.io/"}],
        "plugins": [
            {"name": "deltaplane", "plugin-class": "deltaplane.operators.plugins.plugin.DeltaplanePlugin"}
        ],
    }
