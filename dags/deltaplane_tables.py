"""Airflow DAG file: one maintenance, ingest and consumer DAG per valid table of
config/tables.yaml ($DELTAPLANE_CONFIG).

An invalid table gets no DAGs; its errors are the import error of deltaplane_config_errors.py,
so the other tables' DAGs keep running. An error of the whole file (not YAML, a table name
written twice, ...) is this file's import error: then no table's DAGs load.

Without $DELTAPLANE_CONFIG the tables file is the repository's config/tables.yaml, found from
this file's own location (never from the DAG processor's current directory).

Parsing reads only the configuration (no table is opened); see operators/factory/dags.py.
"""

from pathlib import Path

from deltaplane.operators.factory.config import read_config
from deltaplane.operators.factory.dags import build_dags

_DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "config" / "tables.yaml"

for _dag_id, _dag in build_dags(read_config(default=_DEFAULT_CONFIG).config, fileloc=__file__).items():
    globals()[_dag_id] = _dag
