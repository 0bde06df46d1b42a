"""Airflow DAG file: one maintenance, ingest and consumer DAG per table of config/tables.yaml
($DELTAPLANE_CONFIG).

Parsing reads only the configuration (no table is opened); see operators/dag_factory.py.
"""

from operators.dag_factory import build_dags

for _dag_id, _dag in build_dags(fileloc=__file__).items():
    globals()[_dag_id] = _dag
