"""The Airflow plugin (entry point ``airflow.plugins``): the ops view under ``/deltaplane``,
shown inside Airflow's own UI.

* "Delta tables", a top-level entry of the navigation (``/plugin/deltaplane``): the list of
  tables; a table's page is ``/plugin/deltaplane/deltaplane/tables/<name>``.
* "Delta table", a tab on every DAG (``/dags/<dag_id>/plugin/deltaplane-table``): Airflow puts the
  DAG id into ``{DAG_ID}``; the view answers with the page of the table the DAG maintains,
  ingests into or consumes (or says the DAG has no table).

Airflow 3.3 has no plugin destination on assets: an Asset event's ``extra["payload"]["ops_view"]``
links the table's page instead (``deltaplane.operators.utils.runs.commit_event``)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

NAV_ROUTE = "deltaplane"
DAG_ROUTE = "deltaplane-table"


def _app():
    from deltaplane.operators.plugins.ops_view import create_app

    return create_app()


class DeltaplanePlugin(AirflowPlugin):
    name = "deltaplane"
    fastapi_apps = [{"app": _app(), "url_prefix": "/deltaplane", "name": "deltaplane ops view"}]
    external_views = [
        {
            "name": "Delta tables",
            "href": "/deltaplane/",
            "destination": "nav",
            "url_route": NAV_ROUTE,
            "icon": "/deltaplane/static/icon.svg",
        },
        {
            "name": "Delta table",
            "href": "/deltaplane/dags/{DAG_ID}",
            "destination": "dag",
            "url_route": DAG_ROUTE,
            "icon": "/deltaplane/static/icon.svg",
        },
    ]
