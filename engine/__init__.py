"""deltaplane's Delta Lake engine: the transaction log, snapshots, scans, writes and maintenance.

The engine never imports Airflow or Spark; the platform layers (``operators``, ``spark_jobs``)
sit on top of it.
"""

from engine.commands.staged import StagedWrite, WriteSpec, commit_write, plan_write, stage_write, write_files
from engine.errors import DeltaError
from engine.table import DeltaTable
from engine.transaction import ENGINE_VERSION as __version__
from engine.transaction import CommitResult
from engine.write_table import write_table

__all__ = [
    "CommitResult",
    "DeltaError",
    "DeltaTable",
    "StagedWrite",
    "WriteSpec",
    "__version__",
    "commit_write",
    "plan_write",
    "stage_write",
    "write_files",
    "write_table",
]
