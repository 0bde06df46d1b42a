"""deltaplane's Delta Lake engine: the transaction log, snapshots, scans, writes and maintenance.

The engine never imports Airflow or Spark; the platform layers (``deltaplane.operators``,
``deltaplane.spark_jobs``, ``deltaplane.devstack``) sit on top of it and import only the names
this package exports: the declared API, listed with its groups in ``deltaplane.engine.api``.
Each name loads its module on first use, so a module that needs one small part (``parse_size``,
an error class) does not pay for Arrow and the whole engine: DAG files parse fast.
"""

from __future__ import annotations

import importlib

from deltaplane.engine.api import EXPORTS

__all__ = sorted([*EXPORTS, "__version__"])


def __getattr__(name: str):
    if name == "__version__":
        name_in_module, module = "ENGINE_VERSION", "version"
    elif name in EXPORTS:
        name_in_module, module = name, EXPORTS[name]
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name_in_module)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
