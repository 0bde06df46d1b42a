"""deltaplane's Delta Lake engine: the transaction log, snapshots, scans, writes and maintenance.

The engine never imports Airflow or Spark; the platform layers (``deltaplane.operators``,
``deltaplane.spark_jobs``) sit on top of it. The public names below load on first use, so a
module that needs one small part (``deltaplane.engine.units``, ``deltaplane.engine.errors``) does
not pay for Arrow and the whole engine: DAG files parse fast.
"""

from __future__ import annotations

import importlib
import sys
import types

_PUBLIC = {
    "StagedWrite": "commands.staged",
    "WriteSpec": "commands.staged",
    "commit_write": "commands.staged",
    "plan_write": "commands.staged",
    "stage_write": "commands.staged",
    "write_files": "commands.staged",
    "DeltaError": "errors",
    "DeltaTable": "table",
    "CommitResult": "transaction",
    "write_table": "write_table",
    "write_deltalake": "write_table",  # delta-rs's name for write_table
}
__all__ = sorted([*_PUBLIC, "__version__"])


def __getattr__(name: str):
    if name == "__version__":
        from deltaplane.engine.version import ENGINE_VERSION as value
    elif name in _PUBLIC:
        value = getattr(importlib.import_module(f"{__name__}.{_PUBLIC[name]}"), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


class _Package(types.ModuleType):
    """``write_table`` is a public function and the name of the module defining it. The import
    system sets a package attribute for every submodule it loads, which made
    ``from deltaplane.engine import write_table`` the module once anything had imported
    ``deltaplane.engine.write_table``: a public name keeps its function."""

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and _PUBLIC.get(name) == name:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
