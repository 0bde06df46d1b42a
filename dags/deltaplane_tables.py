"""Airflow DAG file: one maintenance, ingest and consumer DAG per valid table of
config/tables.yaml ($DELTAPLANE_CONFIG).

An invalid table gets no DAGs; its errors are the import error of deltaplane_config_errors.py,
so the other tables' DAGs keep running. An error of the whole file (not YAML, a table name
written twice, ...) is this file's import error: then no table's DAGs load.

Parsing reads only the configuration (no table is opened); see operators/dag_factory.py.
"""

from deltaplane.operators.factory.dags import build_dags

for _dag_id, _dag in build_dags(fileloc=__file__).items():
    globals()[_dag_id] = _dag
