"""``DeltaHook``: the only code that reads Airflow connections.

A ``deltaplane`` connection holds what a table's operators need besides its URI:

* object-store settings: ``host`` (the S3 endpoint URL, e.g. ``http://127.0.0.1:8333``),
  ``login``/``password`` (access key and secret), and in ``extra`` ``region`` and any other
  engine storage option under ``storage_options``;
* Spark settings for heavy jobs: ``extra.spark_master`` (``spark://...`` or ``local[2]``) and
  ``extra.spark_conf`` (a dict of Spark configuration);
* for ``test_connection`` (the UI's "Test" button): ``extra.test_uri`` (``s3://bucket/prefix``
  or a local path) or ``extra.bucket``, what to list; without either, the endpoint's buckets.

The secrets (the password, and any storage option or Spark setting whose name says secret, token,
password, credential or access key, as Spark's ``fs.s3a.access.key``; an access key *id* is not a
secret) are registered with Airflow's secrets masker when the connection is read, so task logs
show ``***`` in their place; they never go on a command line (``deltaplane.operators.operators.spark``).

Without a connection id (the embedded defaults), tables are opened with no storage options
(local paths, or S3 through the environment) and Spark runs ``local[2]``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk import BaseHook

DEFAULT_SPARK_MASTER = "local[2]"


TEST_TIMEOUT_SECONDS = 5  # connect and read timeouts of test_connection's one request
MIN_MASKED_LENGTH = 5  # as Airflow's masker: shorter values would mask ordinary words


@dataclass(frozen=True)
class DeltaSettings:
    storage_options: dict[str, str] = field(default_factory=dict, repr=False)  # holds the secret
    spark_master: str = DEFAULT_SPARK_MASTER
    spark_conf: dict[str, str] = field(default_factory=dict, repr=False)
    test_uri: str | None = None  # what test_connection lists

    def secrets(self) -> list[str]:
        """The values that must never be shown: secret-looking storage options and Spark conf."""
        from deltaplane.spark_jobs.submit import is_secret_name

        items = [*self.storage_options.items(), *self.spark_conf.items()]
        return [v for k, v in items if v and is_secret_name(k)]


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
                    {
                        "region": "us-east-1",
                        "test_uri": "s3://lake/trips",
                        "spark_master": "spark://127.0.0.1:7077",
                        "spark_conf": {},
                    }
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
        test_uri = extra.get("test_uri") or (f"s3://{extra['bucket']}" if extra.get("bucket") else None)
        settings = DeltaSettings(
            storage_options=options,
            spark_master=str(extra.get("spark_master") or DEFAULT_SPARK_MASTER),
            spark_conf={str(k): str(v) for k, v in conf.items()},
            test_uri=str(test_uri) if test_uri else None,
        )
        mask_secrets([conn.password, *settings.secrets()])
        return settings

    def get_table(self, uri: str, version: int | None = None):
        """The engine's ``DeltaTable`` at ``uri`` with this connection's storage options."""
        from deltaplane.engine import DeltaTable

        return DeltaTable(uri, version=version, storage_options=self.settings.storage_options)

    def test_connection(self) -> tuple[bool, str]:
        """Open the store the connection describes, with short timeouts and one attempt: list
        ``extra.test_uri`` (or ``extra.bucket``), else the endpoint's buckets. ``(False, why)``
        names the endpoint, the exception's class and message; never a secret."""
        secrets: list[str] = []
        try:
            conn = self.get_connection(self.deltaplane_conn_id) if self.deltaplane_conn_id else None
            secrets = [conn.password] if conn is not None and conn.password else []
            settings = self._read_settings()
            secrets += settings.secrets()
            ok, message = _probe(settings)
        except Exception as e:
            ok, message = False, f"{type(e).__name__}: {e}"
        for secret in sorted(set(secrets), key=len, reverse=True):
            if len(secret) >= MIN_MASKED_LENGTH:
                message = message.replace(secret, "***")
        return ok, message


def mask_secrets(values) -> None:
    """Register secrets with Airflow's secrets masker (task logs, rendered fields, XCom views)."""
    from airflow.sdk.log import mask_secret

    for value in values:
        if value:
            mask_secret(value)


def _probe(settings: DeltaSettings) -> tuple[bool, str]:
    """List what the connection points at; ``(ok, message)``."""
    import itertools
    import os

    from deltaplane.engine import open_store

    options = dict(settings.storage_options)
    endpoint = options.get("endpoint_url") or options.get("aws_endpoint_url") or options.get("endpoint")
    where = f"endpoint {endpoint}" if endpoint else "AWS S3 (no endpoint set)"
    quick = {
        "connect_timeout": str(TEST_TIMEOUT_SECONDS),
        "read_timeout": str(TEST_TIMEOUT_SECONDS),
        "max_attempts": "1",
    }
    spark = f"Spark master {settings.spark_master}"
    uri = settings.test_uri
    if uri:
        local = "://" not in uri or uri.startswith("file:")
        at = "" if local else f" at {where}"
        try:
            store = open_store(uri, options if local else {**options, **quick})
            if local and not os.path.isdir(store.root):
                return False, f"cannot list {uri}: {store.root} is not a directory"
            found = sum(1 for _ in itertools.islice(store.list(""), 1000))
        except Exception as e:
            return False, f"cannot list {uri}{at}: {type(e).__name__}: {_cause(e)}"
        return True, f"listed {uri}{at} ({found}{'+' if found == 1000 else ''} entries); {spark}"
    if not options:
        return True, f"no storage settings: tables are local paths (or S3 from the environment); {spark}"
    from deltaplane.engine import S3Store

    try:
        buckets = S3Store("s3://deltaplane-connection-test", {**options, **quick}).client.list_buckets()
    except Exception as e:
        return False, f"cannot list the buckets at {where}: {type(e).__name__}: {_cause(e)}"
    names = [b["Name"] for b in buckets.get("Buckets", [])]
    shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
    return True, f"{where}: {len(names)} buckets ({shown}); {spark}"


def _cause(error: Exception) -> str:
    """The message, with the underlying botocore error's when the engine wrapped it."""
    text = str(error)
    cause = error.__cause__ or error.__context__
    if cause is not None and str(cause) and str(cause) not in text:
        text += f" ({type(cause).__name__}: {cause})"
    return text
