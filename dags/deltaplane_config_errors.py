"""Airflow DAG file that defines no DAG: it reports the invalid tables of config/tables.yaml
($DELTAPLANE_CONFIG).

``deltaplane_tables.py`` builds the DAGs of the valid tables only. When a table is invalid, this
file fails to import with ``ConfigError``, so Airflow shows every invalid table's errors (file,
table and key) as this file's import error, while the other tables' DAGs keep running. The error
cannot live in ``deltaplane_tables.py`` itself: Airflow marks every DAG of a file with an import
error stale (it stops scheduling them).

An error of the whole file (not YAML, a table name written twice, ...) is ``deltaplane_tables.py``'s
own import error (no table's DAGs load); it is not repeated here. Without $DELTAPLANE_CONFIG the
file is the repository's config/tables.yaml, found from this file's location.
"""

from pathlib import Path

from deltaplane.operators.factory.config import ConfigError, read_config

_DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "config" / "tables.yaml"

try:
    _report = read_config(default=_DEFAULT_CONFIG)
except ConfigError:
    _report = None  # reported by deltaplane_tables.py, which fails to import with it

if _report is not None and (_error := _report.error()) is not None:
    raise _error
