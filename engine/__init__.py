"""deltaplane's Delta Lake engine: the transaction log, snapshots, scans (and, later, writes).

The engine never imports Airflow or Spark; the platform layers (``operators``, ``spark_jobs``)
sit on top of it.
"""

from engine.errors import DeltaError
from engine.table import DeltaTable

__version__ = "0.1.0"

__all__ = ["DeltaError", "DeltaTable", "__version__"]
