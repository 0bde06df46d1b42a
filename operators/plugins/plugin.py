"""The Airflow plugin (entry point ``airflow.plugins``): the ops view under ``/deltaplane`` and a
"Delta tables" entry in the UI's navigation that shows it inside Airflow."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin


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
            "url_route": "deltaplane",
            "category": "browse",
        }
    ]
