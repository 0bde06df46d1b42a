"""Drive Delta Spark (the reference implementation) from the project's own interpreter: one
long-lived server process (``server.py``) in the reference virtualenv, one JVM, requests and
replies as JSON lines.

    with DeltaSpark.start() as spark:
        spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT) USING delta")
        rows = spark.sql(f"SELECT * FROM delta.`{path}`")

A failed statement raises ``DeltaSparkError`` carrying Delta Spark's exception class. The server
listens on nothing (pipes only), its JVM binds 127.0.0.1, and it is stopped by the PID started
here (its process group), never by name.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from tests.deltaspark.provision import home_dir, is_provisioned

HERE = Path(__file__).resolve().parent


class DeltaSparkError(RuntimeError):
    def __init__(self, error_class: str, message: str):
        super().__init__(f"{error_class}: {message}")
        self.error_class = error_class
        self.message = message


class DeltaSparkUnavailable(RuntimeError):
    pass


# Spark settings for a reference that reads tables of a few rows: no generated code (the suite's
# fixture asks for them; see tests/conftest.py for the measurement).
INTERPRETED_SPARK = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


class DeltaSpark:
    def __init__(self, process: subprocess.Popen, replies, log_path: Path):
        self._process = process
        self._replies = replies
        self.log_path = log_path
        self.startup_seconds: float | None = None

    @classmethod
    def start(
        cls,
        *,
        max_seconds: int = 5400,
        driver_memory: str = "2g",
        java_options: str = "",
        spark_conf: dict[str, str] | None = None,
    ) -> DeltaSpark:
        # One server serves a test worker's whole session: its bound is CI's limit (90 minutes),
        # not an hour, which a suite slowed by other load on the machine can pass.
        home = home_dir()
        if not is_provisioned(home):
            raise DeltaSparkUnavailable(
                f"the Delta Spark reference is not set up in {home}: run "
                "`python tests/deltaspark/provision.py` (make test does)"
            )
        read_fd, write_fd = os.pipe()
        log_fd, log_name = tempfile.mkstemp(prefix="delta-spark-", suffix=".log")
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK_", "PYTHON"))},
            "DELTA_SPARK_REPLY_FD": str(write_fd),
            "DELTA_SPARK_JARS": str(home / "jars"),
            "DELTA_SPARK_MAX_SECONDS": str(max_seconds),
            "DELTA_SPARK_DRIVER_MEMORY": driver_memory,
            "DELTA_SPARK_JAVA_OPTIONS": java_options,  # the JVM's defaults unless a caller asks
            "DELTA_SPARK_CONF": json.dumps(spark_conf or {}),  # Spark's defaults unless a caller asks
            "DELTA_SPARK_WAREHOUSE": tempfile.mkdtemp(prefix="delta-spark-warehouse-"),
            "PYSPARK_PYTHON": str(home / "venv" / "bin" / "python"),
            "TZ": "UTC",
        }
        process = subprocess.Popen(
            [str(home / "venv" / "bin" / "python"), str(HERE / "server.py")],
            stdin=subprocess.PIPE,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            pass_fds=(write_fd,),
            env=env,
            text=True,
            start_new_session=True,
        )
        os.close(write_fd)
        os.close(log_fd)
        client = cls(process, os.fdopen(read_fd, "r"), Path(log_name))
        ready = client._read_reply()
        if not ready.get("ok"):
            client.close()
            raise DeltaSparkUnavailable(f"Delta Spark did not start: {ready}")
        client.startup_seconds = ready.get("seconds")
        return client

    def _read_reply(self) -> dict[str, Any]:
        line = self._replies.readline()
        if not line:
            code = self._process.poll()
            tail = self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""
            raise DeltaSparkUnavailable(f"the Delta Spark server ended (exit {code}); its log ends:\n{tail}")
        return json.loads(line)

    def request(self, **request: Any) -> dict[str, Any]:
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        reply = self._read_reply()
        if not reply.get("ok"):
            raise DeltaSparkError(reply.get("error_class", "?"), reply.get("error", ""))
        return reply

    def sql(self, query: str) -> list[dict[str, Any]]:
        """Run one statement; its rows as dicts of JSON-normalized values."""
        return self.request(op="sql", query=query)["rows"]

    def timed_sql(self, query: str) -> tuple[list[dict[str, Any]], float]:
        reply = self.request(op="sql", query=query)
        return reply["rows"], reply["seconds"]

    def timed_noop(self, query: str) -> float:
        """Seconds to run ``query`` into Spark's no-op sink: every row decoded, nothing collected."""
        return self.request(op="noop", query=query)["seconds"]

    def timed_files_read(self, query: str) -> tuple[list[dict[str, Any]], int, float]:
        """Rows, the number of files the query's scans opened, and the seconds it took."""
        reply = self.request(op="files_read", query=query)
        return reply["rows"], reply["files_read"], reply["seconds"]

    def write(
        self,
        path: str,
        rows: list[dict[str, Any]],
        schema: str,
        *,
        mode: str = "append",
        options: dict[str, str] | None = None,
        partition_by: list[str] | None = None,
        query: str | None = None,
    ) -> float:
        """DataFrame write of ``rows`` (dicts) with a DDL ``schema`` (or of a SELECT ``query``'s
        rows: typed literals); the seconds it took."""
        reply = self.request(
            op="write", path=str(path), rows=rows, schema=schema, mode=mode,
            options=options or {}, partition_by=partition_by or [], query=query,
        )
        return reply["seconds"]

    def checkpoint(self, path: str) -> None:
        self.request(op="checkpoint", path=str(path))

    def rows(self, path: str, *, version: int | None = None, columns: str = "*") -> list[dict[str, Any]]:
        at = f" VERSION AS OF {int(version)}" if version is not None else ""
        return self.sql(f"SELECT {columns} FROM delta.`{path}`{at}")

    def close(self) -> None:
        if self._process.poll() is None:
            try:
                self._process.stdin.close()
                self._process.wait(timeout=30)
            except (subprocess.TimeoutExpired, OSError):
                pass
        if self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGKILL)  # the group this client started
            self._process.wait(timeout=30)
        self._replies.close()

    @property
    def pid(self) -> int:
        return self._process.pid

    def __enter__(self) -> DeltaSpark:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

