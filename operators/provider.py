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
            {"connection-type": "deltaplane", "hook-class-name": "operators.hooks.DeltaHook"},
        ],
        "operators": [
            {
                "integration-name": "Deltaplane",
                "python-modules": [
                    "operators.commit",
                    "operators.maintenance",
                    "operators.dml",
                    "operators.quality",
                    "operators.spark",
                ],
            }
        ],
        "sensors": [{"integration-name": "Deltaplane", "python-modules": ["operators.sensors"]}],
        "triggers": [{"integration-name": "Deltaplane", "python-modules": ["operators.triggers"]}],
        "hooks": [{"integration-name": "Deltaplane", "python-modules": ["operators.hooks"]}],
        "integrations": [{"integration-name": "Deltaplane", "external-doc-url": "https://delta.io/"}],
        "plugins": [{"name": "deltaplane", "plugin-class": "operators.plugin.DeltaplanePlugin"}],
    }
