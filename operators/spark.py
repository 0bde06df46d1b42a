"""Running ``spark_jobs`` from Airflow: ``DeltaSparkJobOperator`` and the submit call the other
operators use for work above their in-process threshold.

The command line is built by ``spark_jobs.submit`` (the same one users run by hand) with the
connection's Spark master and conf, this run's commit metadata and its txn
(``--app-id``/``--app-version``), so a retried Spark job is as safe as an in-process commit.
The connection's storage options (its secret included) reach the job through its environment
(``$DELTAPLANE_STORAGE_OPTIONS``), never its command line, which ``ps`` shows to every user and
Spark copies into its logs; the command line that is logged has secret-looking values masked.

The job's stderr is streamed into the task log line by line while it runs; its JSON metrics line
becomes the task's XCom. A non-zero exit fails the task with the job's own message, the exit code
and the error's name: exit codes 2 (usage) and 3 (bad input) raise ``AirflowFailException`` (no
retry: the same input fails the same way), the others (1 other, 4 commit conflict, 5 table or
storage) a retryable ``SparkJobError``.

``spark-submit`` runs in its own process group. A time limit, an exception while waiting (an
Airflow task timeout), ``on_kill`` and a SIGTERM to the task process (what Airflow's supervisor
sends a task it kills) all stop the whole tree: SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from typing import Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from operators.base import DeltaTableOperator


class SparkJobError(AirflowException):
    """A Spark job exited with an error: its exit code, error name and message are in the text
    (and in ``returncode``, ``error``, ``job_message``). Airflow retries it."""

    def __init__(
        self,
        message: str,
        *,
        job: str = "",
        returncode: int | None = None,
        error: str | None = None,
        job_message: str | None = None,
    ):
        super().__init__(message)
        self.job = job
        self.returncode = returncode
        self.error = error
        self.job_message = job_message


class SparkJobInputError(SparkJobError, AirflowFailException):
    """A Spark job refused its input or command line (exit codes 2 and 3): the task fails
    without retries, since the same input would fail the same way."""


_RUNNING: set = set()  # the SparkSubmissions this process is waiting for
_RUNNING_LOCK = threading.RLock()  # re-entrant: stop_spark_jobs may run in a signal handler


def stop_spark_jobs() -> int:
    """Stop every ``spark-submit`` this process started and still waits for (``on_kill``); how
    many there were."""
    with _RUNNING_LOCK:
        running = list(_RUNNING)
    for submission in running:
        submission.stop()
    return len(running)


@contextlib.contextmanager
def _tracked(submission):
    """Register ``submission`` for ``stop_spark_jobs`` and, in the main thread, stop it on SIGTERM
    before handing the signal on to the handler that was there (Airflow's task runner calls the
    task's ``on_kill`` from it): so the job of any operator stops with its task, whether or not
    the operator's ``on_kill`` knows about Spark."""
    with _RUNNING_LOCK:
        _RUNNING.add(submission)
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum, frame):
            submission.stop()
            if callable(previous):
                previous(signum, frame)
            else:  # the default action: end this process, as it would have without us
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)

        if callable(previous) or previous == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, on_sigterm)
        else:  # ignored, or set outside Python: leave it alone
            previous = None
    try:
        yield submission
    finally:
        with _RUNNING_LOCK:
            _RUNNING.discard(submission)
        if previous is not None and signal.getsignal(signal.SIGTERM) is on_sigterm:
            signal.signal(signal.SIGTERM, previous)


def _mask(values) -> None:
    """Register secrets with Airflow's secrets masker (task logs, rendered fields)."""
    from airflow.sdk.log import mask_secret

    for value in values:
        if value:
            mask_secret(value)


def job_error(
    job: str, returncode: int, metrics: dict, stderr_tail: list[str], stopped_by: str | None = None
) -> SparkJobError:
    """The exception for a job that exited with ``returncode``: ``SparkJobInputError`` (no retry)
    for usage (2) and bad input (3), ``SparkJobError`` (retry) for anything else."""
    from spark_jobs import job as jobs

    error = metrics.get("error")
    message = metrics.get("message") or (stderr_tail[-1] if stderr_tail else "no output")
    if stopped_by is not None or returncode < 0:
        if returncode < 0:
            try:
                how = f"killed by {signal.Signals(-returncode).name}"
            except ValueError:
                how = f"killed by signal {-returncode}"
        else:
            how = "stopped with SIGTERM"
        why = {"timeout": "its time limit", "stop": "the task being killed"}.get(stopped_by or "", "a signal")
        text = f"spark_jobs.{job} was {how} after {why} (exit code {returncode})"
        return SparkJobError(text, job=job, returncode=returncode, error="stopped", job_message=message)
    kind = jobs.EXIT_NAMES.get(returncode, "failed")
    what = f"{error}, {kind}" if error else kind
    retry = "retrying will not help" if returncode in jobs.NOT_RETRYABLE else "retryable"
    text = f"spark_jobs.{job} failed with exit code {returncode} ({what}; {retry}): {message}"
    cls = SparkJobInputError if returncode in jobs.NOT_RETRYABLE else SparkJobError
    return cls(text, job=job, returncode=returncode, error=error, job_message=message)


def run_spark_job(job: str, args: list[str], *, hook, stamp, timeout: float, log, conf=None) -> dict:
    """Submit ``job`` with the connection's settings, this run's stamp and the work key of the
    operator's scope (``--app-id``/``--app-version``: the job commits it with its work); its
    metrics."""
    from engine.transaction import current_app_transaction
    from spark_jobs.submit import is_secret_name, redact_command, start_submit

    full = [*args, "--commit-metadata", json.dumps(stamp.commit_metadata())]
    scope = current_app_transaction()
    if scope is not None:
        full += ["--app-id", scope[0], "--app-version", str(scope[1])]
    settings = hook.settings
    conf = {**settings.spark_conf, **(conf or {})}
    _mask(v for k, v in {**settings.storage_options, **conf}.items() if is_secret_name(k))
    exposed = sorted(k for k in conf if is_secret_name(k))
    if exposed:
        log.warning(
            "Spark conf %s looks secret: --conf values are on spark-submit's command line and in "
            "Spark's logs; give object-store credentials as the connection's login/password or "
            "extra.storage_options instead",
            exposed,
        )
    submission = start_submit(
        job, full, master=settings.spark_master, conf=conf, storage_options=settings.storage_options
    )
    log.info(
        "submitting spark_jobs.%s to %s (pid %d; storage options %s in the environment): %s",
        job,
        settings.spark_master,
        submission.pid,
        sorted(settings.storage_options),
        " ".join(redact_command(submission.command)),
    )
    with _tracked(submission):
        try:
            result = submission.wait(timeout, on_stderr=lambda line: log.info("spark: %s", line))
        except subprocess.TimeoutExpired:
            raise SparkJobError(
                f"spark_jobs.{job} did not finish in {timeout:g} s: its spark-submit process group "
                "was stopped",
                job=job,
                returncode=None,
                error="timeout",
            ) from None
    if not result.ok:
        tail = result.stderr.strip().splitlines()[-1:]
        raise job_error(job, result.returncode, result.metrics, tail, submission.stopped_by)
    log.info("spark_jobs.%s: %s", job, json.dumps(result.metrics, default=str)[:2000])
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
