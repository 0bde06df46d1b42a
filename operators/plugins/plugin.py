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


class OpsViewApp:
    """The ops view as an ASGI app that builds itself on its first request.

    Airflow loads plugins in every process that may need them, each task's included (its macros
    and listeners), but only the api-server serves this app: built when the plugin loads, the
    FastAPI app (its routes, templates and the engine they read through) cost every task
    0.6 to 1.2 s of start-up for nothing. Airflow mounts the app and never looks inside it."""

    def __init__(self, **options) -> None:
        self._options = options  # create_app's
        self._app = None

    async def __call__(self, scope, receive, send) -> None:
        if self._app is None:
            from deltaplane.operators.plugins.ops_view import create_app

            self._app = create_app(**self._options)
        await self._app(scope, receive, send)


class DeltaplanePlugin(AirflowPlugin):
    name = "deltaplane"
    fastapi_apps = [{"app": OpsViewApp(), "url_prefix": "/deltaplane", "name": "deltaplane ops view"}]
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
