"""``DeltaHook``: the only code that reads Airflow connections.

A ``deltaplane`` connection holds what a table's operators need besides its URI:

* object-store settings: ``host`` (the S3 endpoint URL, e.g. ``http://127.0.0.1:8333``),
  ``login``/``password`` (access key and secret), and in ``extra`` ``region`` and any other
  engine storage option under ``storage_options``;
* Spark settings for heavy jobs: ``extra.spark_master`` (``spark://...`` or ``local[2]``) and
  ``extra.spark_conf`` (a dict of Spark configuration).

Without a connection id (the embedded defaults), tables are opened with no storage options
(local paths, or S3 through the environment) and Spark runs ``local[2]``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk import BaseHook

DEFAULT_SPARK_MASTER = "local[2]"


@dataclass(frozen=True)
class DeltaSettings:
    storage_options: dict[str, str] = field(default_factory=dict)
    spark_master: str = DEFAULT_SPARK_MASTER
    spark_conf: dict[str, str] = field(default_factory=dict)


class DeltaHook(BaseHook):
    conn_name_attr = "deltaplane_conn_id"
    default_conn_name = "deltaplane_default"
    conn_type = "deltaplane"
    hook_name = "Deltaplane (Delta Lake tables)"

    def __init__(self, deltaplane_conn_id: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.deltaplane_conn_id = deltaplane_conn_id
        self._settings: DeltaSettings | None = None

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema", "port"],
            "relabeling": {
                "host": "S3 endpoint URL (empty for AWS or local tables)",
                "login": "Access key id",
                "password": "Secret access key",
            },
            "placeholders": {
                "host": "http://127.0.0.1:8333",
                "extra": json.dumps(
                    {"region": "us-east-1", "spark_master": "spark://127.0.0.1:7077", "spark_conf": {}}
                ),
            },
        }

    @property
    def settings(self) -> DeltaSettings:
        if self._settings is None:
            self._settings = self._read_settings()
        return self._settings

    def _read_settings(self) -> DeltaSettings:
        if not self.deltaplane_conn_id:
            return DeltaSettings()
        conn = self.get_connection(self.deltaplane_conn_id)
        extra = conn.extra_dejson or {}
        if not isinstance(extra, dict):
            raise ValueError(f"connection {self.deltaplane_conn_id!r}: extra must be a JSON object")
        options = {str(k): str(v) for k, v in (extra.get("storage_options") or {}).items()}
        if conn.host:
            options.setdefault("endpoint_url", conn.host)
        if conn.login:
            options.setdefault("aws_access_key_id", conn.login)
        if conn.password:
            options.setdefault("aws_secret_access_key", conn.password)
        if extra.get("region"):
            options.setdefault("aws_region", str(extra["region"]))
        conf = extra.get("spark_conf") or {}
        if not isinstance(conf, dict):
            raise ValueError(
                f"connection {self.deltaplane_conn_id!r}: extra.spark_conf must be a JSON object"
            )
        return DeltaSettings(
            storage_options=options,
            spark_master=str(extra.get("spark_master") or DEFAULT_SPARK_MASTER),
            spark_conf={str(k): str(v) for k, v in conf.items()},
        )

    def get_table(self, uri: str, version: int | None = None):
        """The engine's ``DeltaTable`` at ``uri`` with this connection's storage options."""
        from engine import DeltaTable

        return DeltaTable(uri, version=version, storage_options=self.settings.storage_options)

    def storage_args(self) -> list[str]:
        """``--storage-option k=v`` arguments for a ``spark_jobs`` command line."""
        return [x for k, v in self.settings.storage_options.items() for x in ("--storage-option", f"{k}={v}")]

    def test_connection(self) -> tuple[bool, str]:
        try:
            settings = self._read_settings()
        except Exception as e:
            return False, str(e)
        return (
            True,
            f"storage options: {sorted(settings.storage_options)}; Spark master {settings.spark_master}",
        )
