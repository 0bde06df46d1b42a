"""Running ``spark_jobs`` from Airflow: ``DeltaSparkJobOperator`` and the submit call the other
operators use for work above their in-process threshold.

The command line is built by ``deltaplane.spark_jobs.submit`` (the same one users run by hand) with the
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

from airflow.sdk.bases.skipmixin import SkipMixin
from airflow.sdk.exceptions import AirflowFailException

from deltaplane.operators.exceptions import SparkJobError, SparkJobInputError
from deltaplane.operators.operators.base import DeltaTableOperator

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


def job_error(
    job: str, returncode: int, metrics: dict, stderr_tail: list[str], stopped_by: str | None = None
) -> SparkJobError:
    """The exception for a job that exited with ``returncode``: ``SparkJobInputError`` (no retry)
    for usage (2) and bad input (3), ``SparkJobError`` (retry) for anything else."""
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


def run_spark_job(job: str, args: list[str], *, hook, stamp, timeout: float, log, conf=None) -> dict:
    """Submit ``job`` with the connection's settings, this run's stamp and the work key of the
    operator's scope (``--app-id``/``--app-version``: the job commits it with its work); its
    metrics."""
    from deltaplane.engine.transaction import current_app_transaction
    from deltaplane.operators.hooks.delta import mask_secrets
    from deltaplane.spark_jobs.submit import is_secret_name, redact_command, start_submit

    full = [*args, "--commit-metadata", json.dumps(stamp.commit_metadata())]
    scope = current_app_transaction()
    if scope is not None:
        full += ["--app-id", scope[0], "--app-version", str(scope[1])]
    settings = hook.settings
    conf = {**settings.spark_conf, **(conf or {})}
    mask_secrets(v for k, v in conf.items() if is_secret_name(k))  # the connection's are masked already
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
                f"deltaplane.spark_jobs.{job} did not finish in {timeout:g} s: "
                "its spark-submit process group was stopped",
                job=job,
                returncode=None,
                error="timeout",
            ) from None
    if not result.ok:
        tail = result.stderr.strip().splitlines()[-1:]
        raise job_error(job, result.returncode, result.metrics, tail, submission.stopped_by)
    log.info("spark_jobs.%s: %s", job, json.dumps(result.metrics, default=str)[:2000])
    return result.metrics


class DeltaSparkJobOperator(DeltaTableOperator, SkipMixin):
    """Run one ``spark_jobs`` entry point (``ingest``, ``compact``, ``dml``) on the table.

    ``job="ingest"`` with ``--stage MANIFEST`` stages a landing batch for a quality gate, as
    ``DeltaStageOperator`` does without Spark. The batch is the manifest's file name without
    ``.json`` (the name the gate gives it): give every run its own manifest, as the DAG factory
    does (``<staging>/<run id>.json``). The batch's files are the local files the ``--source``
    paths and globs match (names starting with ``_`` or ``.`` left out, as Spark does):

    * none: nothing to stage, no Spark job; the downstream tasks are skipped;
    * staged: the job records the files it read in the manifest; they are then moved to
      ``<their folder>/_processed/<batch>/`` and the manifest records them there, so the next run
      does not read them again (its glob would make them part of a new batch and load them a
      second time) and a gate that rejects the batch moves them to the quarantine with it. A
      retry after they were moved reuses the manifest;
    * refused by the job (exit code 3, bad input: a value that does not fit the table's type, an
      unknown column...): moved to ``<table>/_quarantine/<batch>/landing/`` (or under
      ``quarantine_uri``) with ``rejection.json`` (the job's error and message, the exit code,
      the files), and the task FAILS without retries (``BatchRejected``) with a message naming
      the quarantine. A clear or rerun of a rejected batch fails again with the same message.
    """

    template_fields = ("table_uri", "job_args", "quarantine_uri")
    creates_table = True  # ingest may create it

    def __init__(
        self,
        *,
        table_uri: str,
        job: str,
        job_args: list[str] | None = None,
        timeout: float = 6 * 3600,
        quarantine_uri: str | None = None,
        **kwargs,
    ):
        super().__init__(table_uri=table_uri, **kwargs)
        from deltaplane.spark_jobs.submit import JOBS

        if job not in JOBS:
            raise ValueError(f"unknown Spark job {job!r} (jobs: {', '.join(JOBS)})")
        self.job = job
        self.job_args = list(job_args or [])
        self.timeout = timeout
        self.quarantine_uri = quarantine_uri

    def work_key(self, context, hook, table):
        """``dml``: the statement (its arguments) as issued by this task of this run. ``ingest``
        names its work itself, by the identity of the files it loads; ``compact`` is
        idempotent by nature."""
        if self.job != "dml":
            return None
        from deltaplane.engine.work import WorkKey
        from deltaplane.operators.utils.runs import run_stamp

        return WorkKey.named("dml", {"args": self.job_args, "run": run_stamp(context).identity()})

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        args = ["--table", self.table_uri, *self.job_args]
        manifest = _arg_values(self.job_args, "--stage")
        if self.job == "ingest" and manifest:
            return self._stage(context, hook, stamp, args, manifest[-1])
        metrics = run_spark_job(self.job, args, hook=hook, stamp=stamp, timeout=self.timeout, log=self.log)
        if manifest:
            metrics["version"] = None  # staged: nothing committed yet
        return metrics

    # --- ingest --stage: a landing batch -------------------------------------------------------

    def _stage(self, context, hook, stamp, args: list[str], manifest: str) -> dict[str, Any]:
        from deltaplane.operators.utils.batches import (
            batch_name,
            quarantine_location,
            raise_if_rejected,
            skip_downstream,
        )
        from deltaplane.spark_jobs.ingest import local_matches
        from deltaplane.spark_jobs.job import EXIT_INPUT

        options = hook.settings.storage_options
        batch = batch_name(manifest)
        destination = quarantine_location(self.table_uri, batch, self.quarantine_uri)
        raise_if_rejected(destination, options, self.log)
        done = self._staged_earlier(manifest, batch, options)
        if done is not None:
            return done
        sources = _arg_values(self.job_args, "--source")
        files = local_matches(sources)
        if not files and all(_is_local(s) for s in sources):
            out = {"version": None, "batch": batch, "files": 0, "reason": f"no files match {sources}"}
            return skip_downstream(self, context, out, f"{sources}: nothing to ingest")
        try:
            metrics = run_spark_job(
                self.job, args, hook=hook, stamp=stamp, timeout=self.timeout, log=self.log
            )
        except SparkJobInputError as e:
            if e.returncode != EXIT_INPUT or not files:
                raise
            raise self._reject(context, batch, e, files, destination, options) from None
        landing = self._put_aside(manifest, batch, options)
        return {**metrics, "version": None, "batch": batch, "landing_files": landing}

    def _put_aside(self, manifest: str, batch: str, options) -> list[str]:
        """Move the files the job staged (as its manifest records them) to
        ``<folder>/_processed/<batch>/``; the manifest records the new places before the moves,
        so a crash in between leaves a manifest ``_staged_earlier`` can finish."""
        from pathlib import Path

        from deltaplane.engine.commands.staged import StagedWrite, manifest_landing, write_manifest
        from deltaplane.operators.utils.batches import move_files, processed_path, read_object

        raw = read_object(manifest, options)
        moves = [(Path(p), processed_path(Path(p), batch)) for p in manifest_landing(raw)]
        write_manifest(manifest, StagedWrite.loads(raw, options), options, landing=[str(t) for _, t in moves])
        move_files(moves)
        self.log.info("moved %d staged landing file(s) to _processed/%s", len(moves), batch)
        return [str(t) for _, t in moves]

    def _staged_earlier(self, manifest: str, batch: str, options) -> dict[str, Any] | None:
        """The metrics of an earlier try that staged this batch and began moving its files (the
        manifest records them under ``_processed/<batch>/``): the moves are finished, the job is
        not run again. ``None`` when there is no such manifest."""
        from pathlib import Path

        from deltaplane.engine.commands.staged import StagedWrite, manifest_landing
        from deltaplane.engine.errors import ObjectNotFoundError
        from deltaplane.operators.utils.batches import move_files, processed_path, read_object

        try:
            raw = read_object(manifest, options)
        except (ObjectNotFoundError, FileNotFoundError):
            return None
        landing = [Path(p) for p in manifest_landing(raw)]
        if not landing or any(p != processed_path(p.parent.parent.parent / p.name, batch) for p in landing):
            return None  # the job's own record (or none): the files are still in landing; stage again
        move_files([(p.parent.parent.parent / p.name, p) for p in landing])
        staged = StagedWrite.loads(raw, options)
        self.log.info("batch %s was staged by an earlier try: %s", batch, manifest)
        return {
            "action": "stage",
            "version": None,
            "batch": batch,
            "manifest": manifest,
            "files": len(staged.adds),
            "rows": staged.num_rows,
            "bytes": staged.num_bytes,
            "skipped": staged.spec.skip,
            "work": staged.spec.app_id,
            "landing_files": [str(p) for p in landing],
        }

    def _reject(
        self, context, batch: str, error: SparkJobError, files: list[str], destination: str, options
    ) -> AirflowFailException:
        """Quarantine the files the job refused, report why (log, XCom, ``rejection.json``): the
        exception to fail with."""
        import os
        import re

        from deltaplane.operators.utils.batches import reject

        names = [os.path.basename(f) for f in files]
        said = error.job_message or str(error)
        detail = re.sub(r"^(?:(?:deltaplane\.)?engine\.errors\.)?\w+: ", "", said)
        column = re.search(r"\bcolumn '([^']+)'", said)
        what = names[0] if len(names) == 1 else f"its {len(names)} files ({', '.join(names[:5])}"
        if len(names) > 1:
            what += ", ...)" if len(names) > 5 else ")"
        message = (
            f"batch {batch} rejected: deltaplane.spark_jobs.ingest refused {what} "
            f"({error.error or 'bad input'}, "
            f"exit code {error.returncode}): {detail}; quarantined at {destination}"
        )
        report = {
            "version": None,
            "rejected": True,
            "task": self.task_id,
            "batch": batch,
            "file": next((n for n in names if n in said), None),
            "column": column.group(1) if column else None,
            "reason": detail,
            "message": message,
            "quarantine": destination,
            "files": names,
            "error": error.error,
            "exit_code": error.returncode,
            "job_message": said,
        }
        recorded = {"sources": _arg_values(self.job_args, "--source"), "landing_files": list(files)}
        return reject(self, context, report, destination, options, recorded=recorded, landing=list(files))


def _arg_values(args: list[str], name: str) -> list[str]:
    """Every value of option ``name`` in a job's arguments (``--name value`` or ``--name=value``)."""
    out = []
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            out.append(str(args[i + 1]))
        elif arg.startswith(f"{name}="):
            out.append(arg.split("=", 1)[1])
    return out


def _is_local(source: str) -> bool:
    from deltaplane.spark_jobs.ingest import local_path

    return local_path(source) is not None
