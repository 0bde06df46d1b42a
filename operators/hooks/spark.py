"""``DeltaSparkSubmitHook``: run a ``deltaplane.spark_jobs`` job through ``spark-submit`` with a
``deltaplane`` connection's settings, the way Airflow's Spark provider runs applications.

    hook = DeltaSparkSubmitHook(deltaplane_conn_id="lake", task_log=self.log)
    metrics = hook.submit("compact", ["--table", uri, "--plan", plan_uri], stamp=stamp)

* **Settings** come from the connection (``DeltaHook``): the Spark master, ``extra.spark_conf``
  (plus the hook's and the call's ``conf``) and the storage options. Storage options reach the
  job in its environment (``$DELTAPLANE_STORAGE_OPTIONS``); Spark settings in a properties file
  only this user can read, removed when ``spark-submit`` ends. No secret is ever on a command
  line (``ps`` shows command lines to every user); secret-looking values are registered with
  Airflow's secrets masker before anything is logged.
* **Run**: ``spark-submit`` is a child in its own process group; its stderr is logged line by
  line (``spark: ...``) into the task log while it runs; its JSON metrics line is ``submit``'s
  return value. The run's commit metadata (``stamp``) and the work key of the operator's scope
  (``--app-id``/``--app-version``) go on the job's command line, so a retried job is as safe as an
  in-process commit.
* **Exit codes** (``deltaplane.spark_jobs.job``): 2 (usage) and 3 (bad input) raise
  ``SparkJobInputError``, an ``AirflowFailException`` (no retry: the same input fails the same
  way); 1 (other), 4 (commit conflict), 5 (table or storage), a signal, a time limit raise
  ``SparkJobError`` (retried). The message has the job's own error, its name and the code.
* **Stopping**: ``on_kill`` stops what this hook started (SIGTERM to the whole tree, SIGKILL after
  a grace period); ``kill_all`` what every hook of this process started. While ``submit`` waits in
  the main thread, a SIGTERM to the task process (what Airflow's supervisor sends a task it
  kills) stops the job before the previous handler runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseHook

from deltaplane.operators.exceptions import SparkJobError, SparkJobInputError

DEFAULT_TIMEOUT_SECONDS = 6 * 3600

_RUNNING: dict = {}  # SparkSubmission -> the hook that started it (every hook of this process)
_RUNNING_LOCK = threading.RLock()  # re-entrant: stopping may run in a signal handler


class DeltaSparkSubmitHook(BaseHook):
    """Submit ``deltaplane.spark_jobs`` jobs with a ``deltaplane`` connection (see the module)."""

    conn_name_attr = "deltaplane_conn_id"
    default_conn_name = "deltaplane_default"
    conn_type = "deltaplane"
    hook_name = "Deltaplane Spark jobs"

    def __init__(
        self,
        deltaplane_conn_id: str | None = None,
        *,
        conf: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        task_log=None,
        delta_hook=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.deltaplane_conn_id = deltaplane_conn_id
        self.conf = {str(k): str(v) for k, v in (conf or {}).items()}
        self.timeout = timeout
        self._task_log = task_log
        self._delta_hook = delta_hook

    @classmethod
    def for_hook(cls, delta_hook, **kwargs) -> DeltaSparkSubmitHook:
        """A submit hook on the connection (and the settings already read) of ``delta_hook``."""
        return cls(delta_hook.deltaplane_conn_id, delta_hook=delta_hook, **kwargs)

    @property
    def delta_hook(self):
        if self._delta_hook is None:
            from deltaplane.operators.hooks.delta import DeltaHook

            self._delta_hook = DeltaHook(self.deltaplane_conn_id)
        return self._delta_hook

    @property
    def settings(self):
        """The connection's ``DeltaSettings`` (master, Spark conf, storage options)."""
        return self.delta_hook.settings

    @property
    def task_log(self):
        return self._task_log if self._task_log is not None else self.log

    # --- submitting --------------------------------------------------------------------------

    def submit(
        self,
        job: str,
        args: Sequence[str],
        *,
        stamp=None,
        conf: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Run ``job`` with ``args`` and wait for it: its metrics (the job's JSON line). Raises
        ``SparkJobInputError`` (no retry) or ``SparkJobError`` (retry) when it fails."""
        from deltaplane.engine import current_app_transaction
        from deltaplane.operators.hooks.delta import mask_secrets
        from deltaplane.spark_jobs.submit import is_secret_name, redact_command, start_submit

        log = self.task_log
        full = [str(a) for a in args]
        if stamp is not None:
            full += ["--commit-metadata", json.dumps(stamp.commit_metadata())]
        scope = current_app_transaction()
        if scope is not None:
            full += ["--app-id", scope[0], "--app-version", str(scope[1])]
        settings = self.settings
        merged = {**settings.spark_conf, **self.conf, **{str(k): str(v) for k, v in (conf or {}).items()}}
        mask_secrets(v for k, v in merged.items() if is_secret_name(k))
        mask_secrets(v for k, v in settings.storage_options.items() if is_secret_name(k))
        limit = self.timeout if timeout is None else timeout
        submission = start_submit(
            job, full, master=settings.spark_master, conf=merged, storage_options=settings.storage_options
        )
        shown = ", ".join(f"{k}={'***' if is_secret_name(k) else v}" for k, v in sorted(merged.items()))
        log.info(
            "submitting spark_jobs.%s to %s (pid %d; storage options %s in the environment, Spark "
            "conf in a private properties file: %s): %s",
            job,
            settings.spark_master,
            submission.pid,
            sorted(settings.storage_options),
            shown or "none",
            " ".join(redact_command(submission.command)),
        )
        with self._tracked(submission):
            try:
                result = submission.wait(limit, on_stderr=lambda line: log.info("spark: %s", line))
            except subprocess.TimeoutExpired:
                raise SparkJobError(
                    f"deltaplane.spark_jobs.{job} did not finish in {limit:g} s: "
                    "its spark-submit process tree was stopped",
                    job=job,
                    returncode=None,
                    error="timeout",
                ) from None
        if not result.ok:
            tail = result.stderr.strip().splitlines()[-1:]
            raise spark_job_error(job, result.returncode, result.metrics, tail, submission.stopped_by)
        log.info("deltaplane.spark_jobs.%s: %s", job, json.dumps(result.metrics, default=str)[:2000])
        return result.metrics

    # --- stopping ----------------------------------------------------------------------------

    def on_kill(self) -> int:
        """Stop every ``spark-submit`` this hook started and still waits for, with everything
        under it; how many there were."""
        with _RUNNING_LOCK:
            mine = [s for s, hook in _RUNNING.items() if hook is self]
        for submission in mine:
            submission.stop()
        return len(mine)

    @classmethod
    def kill_all(cls) -> int:
        """Stop every ``spark-submit`` any hook of this process started and still waits for."""
        with _RUNNING_LOCK:
            running = list(_RUNNING)
        for submission in running:
            submission.stop()
        return len(running)

    @contextlib.contextmanager
    def _tracked(self, submission):
        """Register ``submission`` for ``on_kill``/``kill_all`` and, in the main thread, stop it
        on SIGTERM before handing the signal on to the handler that was there (Airflow's task
        runner calls the task's ``on_kill`` from it): so the job of any operator stops with its
        task, whether or not the operator's ``on_kill`` knows about Spark."""
        with _RUNNING_LOCK:
            _RUNNING[submission] = self
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
                _RUNNING.pop(submission, None)
            if previous is not None and signal.getsignal(signal.SIGTERM) is on_sigterm:
                signal.signal(signal.SIGTERM, previous)


def spark_job_error(
    job: str, returncode: int, metrics: dict, stderr_tail: list[str], stopped_by: str | None = None
) -> SparkJobError:
    """The exception for a job that exited with ``returncode``: ``SparkJobInputError`` (no retry)
    for usage (2) and bad input (3), ``SparkJobError`` (retry) for anything else, a signal
    included (a killed driver: the next try starts over, its work key keeps it exactly once)."""
    from deltaplane.spark_jobs import job as jobs

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
        text = f"deltaplane.spark_jobs.{job} was {how} after {why} (exit code {returncode})"
        return SparkJobError(text, job=job, returncode=returncode, error="stopped", job_message=message)
    kind = jobs.EXIT_NAMES.get(returncode, "failed")
    what = f"{error}, {kind}" if error else kind
    retry = "retrying will not help" if returncode in jobs.NOT_RETRYABLE else "retryable"
    text = f"deltaplane.spark_jobs.{job} failed with exit code {returncode} ({what}; {retry}): {message}"
    cls = SparkJobInputError if returncode in jobs.NOT_RETRYABLE else SparkJobError
    return cls(text, job=job, returncode=returncode, error=error, job_message=message)
