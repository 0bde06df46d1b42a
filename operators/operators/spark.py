"""Running ``spark_jobs`` from Airflow: ``DeltaSparkJobOperator``, and ``run_spark_job``, the call
the other operators use for work above their in-process threshold. Both go through
``deltaplane.operators.hooks.spark.DeltaSparkSubmitHook`` (settings from the connection, the
job's stderr streamed into the task log, no secret on a command line, exit codes mapped to
retry or not, the whole process tree stopped on kill).

What an operator decided before submitting travels with the job, which never decides it again:
the compaction operator hands over its OPTIMIZE plan (``compact --plan``), the DML operator its
row-level plan (``dml --plan``: the version read, the candidate files, the strategy), and
``DeltaSparkJobOperator``'s ``ingest --stage`` the very files it found in the landing folder.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk.bases.skipmixin import SkipMixin
from airflow.sdk.exceptions import AirflowFailException

from deltaplane.operators.exceptions import SparkJobError, SparkJobInputError
from deltaplane.operators.hooks.spark import DeltaSparkSubmitHook
from deltaplane.operators.hooks.spark import spark_job_error as job_error
from deltaplane.operators.operators.base import DeltaTableOperator

__all__ = ["DeltaSparkJobOperator", "job_error", "run_spark_job"]


def run_spark_job(job: str, args: list[str], *, hook, stamp, timeout: float, log, conf=None) -> dict:
    """Submit ``job`` through a ``DeltaSparkSubmitHook`` on ``hook``'s connection (a ``DeltaHook``)
    with this run's stamp and the work key of the operator's scope; its metrics."""
    spark = DeltaSparkSubmitHook.for_hook(hook, timeout=timeout, task_log=log)
    return spark.submit(job, args, stamp=stamp, conf=conf)


def run_row_level_plan(plan, uri: str, store, *, hook, stamp, timeout: float, log) -> dict:
    """Hand a DELETE/UPDATE plan the operator made (``engine.commands.dml.plan_row_level``) to
    ``deltaplane.spark_jobs.dml`` as a file beside the table (``dml --plan``): the job works on
    exactly the plan's version, candidate files and strategy, and refuses a plan that does not
    fit the table; the file is deleted afterwards. ``store``: the table's (its snapshot's)."""
    from deltaplane.engine import save_plan
    from deltaplane.spark_jobs.dml_plan import job_arguments

    key = save_plan(plan, store)
    log.info(
        "%s: %s with Spark, plan %s (version %d)", uri, plan.operation, store.uri(key), plan.read_version
    )
    try:
        return run_spark_job(
            "dml",
            ["--table", uri, *job_arguments(plan), "--plan", store.uri(key)],
            hook=hook,
            stamp=stamp,
            timeout=timeout,
            log=log,
        )
    finally:
        store.delete(key)


class DeltaSparkJobOperator(DeltaTableOperator, SkipMixin):
    """Run one ``spark_jobs`` entry point (``ingest``, ``compact``, ``dml``) on the table.

    ``job="ingest"`` with ``--stage MANIFEST`` stages a landing batch for a quality gate, as
    ``DeltaStageOperator`` does without Spark. The batch is the manifest's file name without
    ``.json`` (the name the gate gives it): give every run its own manifest, as the DAG factory
    does (``<staging>/<run id>.json``). The batch's files are the local files the ``--source``
    paths and globs match (names starting with ``_`` or ``.`` left out, as Spark does):

    * none: nothing to stage, no Spark job; the downstream tasks are skipped;
    * staged: the job records the files it read in the manifest; they are then claimed (moved to
      ``<their folder>/_staged/<batch>/``) and the manifest records them there, so the next run
      does not read them again (its glob would make them part of a new batch and load them a
      second time) and a gate that rejects the batch moves them to the quarantine with it; the
      commit moves them on to ``_processed/<batch>/`` once the batch landed. A retry after they
      were moved reuses the manifest;
    * refused by the job (exit code 3, bad input: a value that does not fit the table's type, an
      unknown column...): moved to ``<table>/_quarantine/<batch>/landing/`` (or under
      ``quarantine_uri``) with ``rejection.json`` (the job's error and message, the exit code,
      the files), and the task FAILS without retries (``BatchRejected``) with a message naming
      the quarantine. A clear or rerun of a rejected batch fails again with the same message.
    """

    template_fields = ("table_uri", "job_args", "quarantine_uri")
    creates_table = True  # ingest may create it
    default_engine = "spark"  # the XCom's engine (deltaplane.operators.utils.results)

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

    _spark_hook: DeltaSparkSubmitHook | None = None  # the hook of the running try

    def on_kill(self) -> None:
        """Stop the job through the hook that submitted it (with everything under
        ``spark-submit``); an operator object that did not run it (a copy) stops this process's
        jobs."""
        hook = self._spark_hook
        if hook is None:
            super().on_kill()
        elif hook.on_kill():
            self.log.info("%s: stopped the running Spark job", self.table_uri)

    def work_key(self, context, hook, table):
        """``dml``: the statement (its arguments) as issued by this task of this run. ``ingest``
        names its work itself, by the identity of the files it loads; ``compact`` is
        idempotent by nature."""
        if self.job != "dml":
            return None
        from deltaplane.engine import WorkKey
        from deltaplane.operators.utils.runs import run_stamp

        return WorkKey.named("dml", {"args": self.job_args, "run": run_stamp(context).identity()})

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        args = ["--table", self.table_uri, *self.job_args]
        manifest = _arg_values(self.job_args, "--stage")
        self._spark_hook = DeltaSparkSubmitHook.for_hook(hook, timeout=self.timeout, task_log=self.log)
        if self.job == "ingest" and manifest:
            return self._stage(context, hook, stamp, args, manifest[-1])
        metrics = self._spark_hook.submit(self.job, args, stamp=stamp)
        if manifest:
            metrics["version"] = None  # staged: nothing committed yet
        return metrics

    def lineage_datasets(self, result, facts):
        """``ingest`` reads its ``--source`` files (and with ``--stage`` writes a staged batch,
        not the table); ``compact`` and ``dml`` read and write the table."""
        from deltaplane.operators.utils.lineage import Ref

        inputs, outputs = super().lineage_datasets(result, facts)
        if self.job != "ingest":
            return inputs, outputs
        result = result or {}
        landing = result.get("landing_files")
        inputs = [
            Ref(source, table=False, files=len(landing) if isinstance(landing, list) else None)
            for source in _arg_values(self.job_args, "--source")
        ]
        manifest = _arg_values(self.job_args, "--stage")
        if manifest:
            staged = Ref(manifest[-1], table=False, version=result.get("batch"), rows=result.get("rows"))
            return inputs, [staged]
        return inputs, outputs

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
        if files:  # the batch is what was listed here: the job must not glob the folder again
            args = ["--table", self.table_uri, *pin_sources(self.job_args, files)]
        try:
            metrics = self._spark_hook.submit(self.job, args, stamp=stamp)
        except SparkJobInputError as e:
            if e.returncode != EXIT_INPUT or not files:
                raise
            raise self._reject(context, batch, e, files, destination, options) from None
        landing = self._put_aside(manifest, batch, options)
        return {**metrics, "version": None, "batch": batch, "landing_files": landing}

    def _put_aside(self, manifest: str, batch: str, options) -> list[str]:
        """Claim the files the job staged (as its manifest records them): move them to
        ``<folder>/_staged/<batch>/``; the manifest records the new places (and how to read them
        again) before the moves, so a crash in between leaves a manifest ``_staged_earlier`` can
        finish."""
        from pathlib import Path

        from deltaplane.engine import StagedWrite, claimed_path, manifest_landing, write_manifest
        from deltaplane.operators.utils.batches import move_files, read_object

        raw = read_object(manifest, options)
        moves = [(Path(p), claimed_path(Path(p), batch)) for p in manifest_landing(raw)]
        formats = _arg_values(self.job_args, "--format")
        recipe = {"format": formats[-1]} if formats else _recipe_from_names([p for p, _ in moves])
        write_manifest(
            manifest,
            StagedWrite.loads(raw, options),
            options,
            landing=[str(t) for _, t in moves],
            recipe=recipe,
        )
        move_files(moves)
        self.log.info("claimed %d staged landing file(s) under _staged/%s", len(moves), batch)
        return [str(t) for _, t in moves]

    def _staged_earlier(self, manifest: str, batch: str, options) -> dict[str, Any] | None:
        """The metrics of an earlier try that staged this batch and began claiming its files (the
        manifest records them under ``_staged/<batch>/``): the moves are finished, the job is
        not run again. ``None`` when there is no such manifest."""
        from pathlib import Path

        from deltaplane.engine import (
            ObjectNotFoundError,
            StagedWrite,
            claimed_path,
            home_path,
            manifest_landing,
        )
        from deltaplane.operators.utils.batches import move_files, read_object

        try:
            raw = read_object(manifest, options)
        except (ObjectNotFoundError, FileNotFoundError):
            return None
        landing = [Path(p) for p in manifest_landing(raw)]
        if not landing or any(p != claimed_path(home_path(p), batch) for p in landing):
            return None  # the job's own record (or none): the files are still in landing; stage again
        move_files([(home_path(p), p) for p in landing])
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


def pin_sources(job_args: list[str], files: list[str]) -> list[str]:
    """``job_args`` with its local ``--source`` paths and globs replaced by ``files`` (what they
    matched when the operator listed them), each escaped for Hadoop's glob syntax so Spark reads
    that one file; sources on other file systems are kept."""
    out, i = [], 0
    while i < len(job_args):
        arg = str(job_args[i])
        if arg == "--source" and i + 1 < len(job_args):
            value, i = str(job_args[i + 1]), i + 2
        elif arg.startswith("--source="):
            value, i = arg.split("=", 1)[1], i + 1
        else:
            out.append(arg)
            i += 1
            continue
        if not _is_local(value):
            out += ["--source", value]
    for path in files:
        out += ["--source", "".join("\\" + c if c in "\\{}[]*?" else c for c in path)]
    return out


def _recipe_from_names(paths) -> dict[str, str] | None:
    """How to read the files again when the job was not told their format: by their extension
    (as the job itself decides); ``None`` when they do not agree."""
    from deltaplane.engine import LANDING_FORMATS

    found = {fmt for p in paths for fmt, ends in LANDING_FORMATS.items() if str(p).endswith(ends)}
    return {"format": found.pop()} if len(found) == 1 else None


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
