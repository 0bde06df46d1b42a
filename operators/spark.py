"""Running ``spark_jobs`` from Airflow: ``DeltaSparkJobOperator`` and the submit call the other
operators use for work above their in-process threshold.

The command line is built by ``spark_jobs.submit`` (the same one users run by hand) with the
connection's Spark master and conf, the connection's storage options, this run's commit metadata
and its txn (``--app-id``/``--app-version``), so a retried Spark job is as safe as an in-process
commit. The job's JSON metrics line becomes the task's XCom; a non-zero exit fails the task with
the job's own error message.
"""

from __future__ import annotations

import json
from typing import Any

from operators.base import DeltaTableOperator


class SparkJobError(Exception):
    """A Spark job exited with an error (its exit code and message are in the text)."""


def run_spark_job(job: str, args: list[str], *, hook, stamp, timeout: float, log, conf=None) -> dict:
    """Submit ``job`` with the connection's settings, this run's stamp and the work key of the
    operator's scope (``--app-id``/``--app-version``: the job commits it with its work); its
    metrics."""
    from engine.transaction import current_app_transaction
    from spark_jobs.submit import submit

    full = [*args, *hook.storage_args(), "--commit-metadata", json.dumps(stamp.commit_metadata())]
    scope = current_app_transaction()
    if scope is not None:
        full += ["--app-id", scope[0], "--app-version", str(scope[1])]
    settings = hook.settings
    log.info("submitting spark_jobs.%s to %s", job, settings.spark_master)
    result = submit(
        job, full, master=settings.spark_master, conf={**settings.spark_conf, **(conf or {})}, timeout=timeout
    )
    for line in result.stderr.splitlines()[-40:]:
        log.info("spark: %s", line)
    if not result.ok:
        message = result.metrics.get("message") or result.stderr.strip().splitlines()[-1:] or ["no output"]
        raise SparkJobError(f"spark_jobs.{job} exited with {result.returncode}: {message}")
    return result.metrics


class DeltaSparkJobOperator(DeltaTableOperator):
    """Run one ``spark_jobs`` entry point (``ingest``, ``compact``, ``dml``) on the table."""

    template_fields = ("table_uri", "job_args")
    creates_table = True  # ingest may create it

    def __init__(
        self,
        *,
        table_uri: str,
        job: str,
        job_args: list[str] | None = None,
        timeout: float = 6 * 3600,
        **kwargs,
    ):
        super().__init__(table_uri=table_uri, **kwargs)
        from spark_jobs.submit import JOBS

        if job not in JOBS:
            raise ValueError(f"unknown Spark job {job!r} (jobs: {', '.join(JOBS)})")
        self.job = job
        self.job_args = list(job_args or [])
        self.timeout = timeout

    def work_key(self, context, hook, table):
        """``dml``: the statement (its arguments) as issued by this task of this run. ``ingest``
        names its work itself, by the identity of the files it loads; ``compact`` is
        idempotent by nature."""
        if self.job != "dml":
            return None
        from engine.work import WorkKey
        from operators.runs import run_stamp

        return WorkKey.named("dml", {"args": self.job_args, "run": run_stamp(context).identity()})

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        args = ["--table", self.table_uri, *self.job_args]
        metrics = run_spark_job(self.job, args, hook=hook, stamp=stamp, timeout=self.timeout, log=self.log)
        if "--stage" in self.job_args:
            metrics["version"] = None  # staged: nothing committed yet
        return metrics
