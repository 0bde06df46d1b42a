"""``DeltaQualityGateOperator``: validate a staged batch with Great Expectations before anyone
can read it, and the quarantine every rejected batch goes to.

The batch is a staged write (``DeltaStageOperator``, ``deltaplane.spark_jobs.ingest --stage`` or
``deltaplane.engine.stage_write``): its files exist, the table does not reference them. The gate reads the
staged rows as readers would see them, validates them against expectations with GX Core (an
ephemeral context; no GX project on disk), and then:

* **pass**: returns the summary; the commit operator downstream makes the batch visible;
* **reject**: nothing is committed and nothing committed is touched; the batch (its data files,
  its manifest, and the landing files the stage recorded in the manifest) is moved to
  ``<quarantine_uri>/<batch>/`` with ``validation.json`` (the GX result) and ``rejection.json``
  (why, in one message) beside them; the summary (failed expectations, unexpected counts,
  examples and their row numbers) goes to the task log and XCom; then the task FAILS without
  retries (``AirflowFailException``: a retry cannot make a bad batch good), so the commit never
  runs (upstream_failed) and the DAG run is failed: a rejected batch is red in Airflow's grid.

``on_failure`` is kept for existing configurations: ``"fail"`` and ``"skip"`` both reject as above.
``"skip"`` used to leave the gate green and skip the commit, which hid rejected batches (the run
counted no failure); what it was for, going on with the next batch, needs no skipping: the
rejected batch has left the landing folder and the staging area, and a failed run does not
block later runs. A gate with ``"skip"`` logs that it no longer skips.

Memory: a batch of up to ``max_batch_rows`` rows and ``max_batch_bytes`` staged (Parquet)
bytes is validated whole, in one pandas DataFrame. A larger one is validated ``chunk_rows`` rows
at a time (only the columns the expectations name), and the row-level expectations' results
(``ROW_LEVEL_EXPECTATIONS``: not null, between, in set, regex, ...) are added up: unexpected counts, percent,
``mostly``, examples with their row numbers in the batch. Expectations that need a whole column
at once (uniqueness, mean, row count, ...) are refused for such a batch with a message saying
so, and the batch is rejected rather than committed unchecked or loaded whole.

Expectations are given as ``[{"expectation": "expect_column_values_to_not_be_null",
"kwargs": {"column": "id"}}, ...]`` (snake_case or GX class names).
"""

from __future__ import annotations

import json
import time
from typing import Any

from deltaplane.engine import (
    QUALITY_CHUNK_ROWS,
    QUALITY_MAX_BYTES,
    QUALITY_MAX_ROWS,
    describe_failure,
    validate_staged,
)
from deltaplane.operators.exceptions import QualityGateFailed
from deltaplane.operators.operators.base import DeltaTableOperator
from deltaplane.operators.utils.batches import (
    batch_name,
    quarantine_location,
    raise_if_rejected,
    read_object,
)


class DeltaQualityGateOperator(DeltaTableOperator):
    """The gate (see the module's documentation). Commits nothing. XCom (beside the common
    keys): ``success``, ``batch``, ``rows``, ``files``, ``evaluated``, ``chunks``, ``failed``,
    ``results``, ``seconds``, and for a rejected batch ``rejected``, ``message``, ``quarantine``.
    Lineage: input the staging area (version: the batch) with the expectations as
    ``dataQualityAssertions``."""

    writes = False
    operation_name = "QUALITY GATE"
    ui_color = "#fff3cd"
    template_fields = ("table_uri", "staged_manifest", "quarantine_uri")

    def __init__(
        self,
        *,
        table_uri: str,
        staged_manifest: str,
        expectations: list[dict],
        quarantine_uri: str | None = None,
        on_failure: str = "fail",
        max_batch_rows: int = QUALITY_MAX_ROWS,
        max_batch_bytes: int = QUALITY_MAX_BYTES,
        chunk_rows: int = QUALITY_CHUNK_ROWS,
        **kwargs: Any,
    ):
        super().__init__(table_uri=table_uri, **kwargs)
        if on_failure not in ("fail", "skip"):
            raise ValueError("on_failure must be 'fail' or 'skip'")
        if not expectations:
            raise ValueError("a quality gate needs at least one expectation")
        if min(max_batch_rows, max_batch_bytes, chunk_rows) <= 0:
            raise ValueError("max_batch_rows, max_batch_bytes and chunk_rows must be positive")
        self.staged_manifest = staged_manifest
        self.expectations = list(expectations)
        self.quarantine_uri = quarantine_uri
        self.on_failure = on_failure
        self.max_batch_rows = max_batch_rows
        self.max_batch_bytes = max_batch_bytes
        self.chunk_rows = chunk_rows

    def open_table(self, hook):
        return None  # the gate reads the staged files only; the table may not exist yet

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        from deltaplane.engine import ObjectNotFoundError, StagedWrite, manifest_landing

        options = hook.settings.storage_options
        batch = batch_name(self.staged_manifest)
        destination = quarantine_location(self.table_uri, batch, self.quarantine_uri)
        try:
            raw = read_object(self.staged_manifest, options)
        except (ObjectNotFoundError, FileNotFoundError):
            # The manifest went to the quarantine with a batch this gate rejected before.
            raise_if_rejected(destination, options, self.log, QualityGateFailed)
            raise
        staged = StagedWrite.loads(raw, options)
        if staged.spec.skip:
            self.log.info("%s: batch %s is already in the table; nothing to validate", self.table_uri, batch)
            return {
                "success": True,
                "batch": batch,
                "version": None,
                "already_committed": True,
                "reason": "the batch is already in the table; nothing to validate",
            }
        started = time.monotonic()
        outcome = validate_staged(
            staged,
            self.expectations,
            max_batch_rows=self.max_batch_rows,
            max_batch_bytes=self.max_batch_bytes,
            chunk_rows=self.chunk_rows,
        )
        summary = {**outcome["summary"], "batch": batch, "files": len(staged.adds), "version": None}
        summary["seconds"] = round(time.monotonic() - started, 3)
        if summary["success"]:
            summary["reason"] = "the batch passed; a quality gate commits nothing"
            self.log.info(
                "%s: batch %s passed %d expectations (%d rows, %d chunk(s))",
                self.table_uri,
                batch,
                summary["evaluated"],
                summary["rows"],
                summary["chunks"],
            )
            return summary
        if summary.get("refused"):
            why = f"batch {batch} cannot be validated: {summary['reason']}"
        else:
            failures = "; ".join(describe_failure(f) for f in summary["failed"])
            counts = f"{len(summary['failed'])} of {summary['evaluated']}"
            why = f"batch {batch} failed {counts} expectations: {failures}"
        message = f"{why}; quarantined at {destination}"
        landing = manifest_landing(raw)
        summary.update(rejected=True, task=self.task_id, message=message, quarantine=destination)
        quarantine(
            staged,
            self.staged_manifest,
            destination,
            outcome["result"],
            summary,
            options,
            manifest_bytes=raw,
            landing=landing,
        )
        summary["reason"] = message
        context["ti"].xcom_push(key="return_value", value=self.shape(summary))
        self.log.error("%s", message)
        if self.on_failure == "skip":
            self.log.warning(
                "%s: on_failure='skip' no longer hides a rejected batch: the gate fails (no retries) and "
                "the commit does not run, so the rejection shows in the grid and fails the run; later "
                "runs are not blocked",
                self.table_uri,
            )
        raise QualityGateFailed(message)

    def lineage_datasets(self, result, facts):
        from deltaplane.operators.utils.batches import batch_name
        from deltaplane.operators.utils.lineage import Ref, location_of

        batch = Ref(location_of(self.staged_manifest), table=False, version=batch_name(self.staged_manifest))
        if result is not None:
            batch.rows = result.get("rows")
            batch.files = result.get("files")
            batch.assertions = [
                {
                    "assertion": r.get("expectation"),
                    "success": r.get("success"),
                    "column": (r.get("kwargs") or {}).get("column"),
                }
                for r in result.get("results") or []
                if r.get("expectation")
            ]
        return [batch], []


# --- the quarantine ---------------------------------------------------------------------------


def quarantine(
    staged,
    manifest_uri: str,
    destination: str,
    result: dict,
    summary: dict,
    options,
    *,
    manifest_bytes: bytes | None = None,
    landing: list[str] = (),
) -> None:
    """Move a staged batch's files, its manifest and its landing files under ``destination``
    with the validation result (``validation.json``) and ``rejection.json``."""
    from deltaplane.engine import quarantine_staged

    record = {
        "task": summary.get("task"),
        "batch": summary.get("batch"),
        "message": summary.get("message"),
        "failed": summary.get("failed", []),
        "refused": summary.get("refused", []),
    }
    validation = json.dumps({"summary": summary, "result": result}, indent=1, default=str).encode()
    quarantine_staged(
        staged,
        manifest_uri,
        destination,
        record,
        options,
        manifest_bytes=manifest_bytes,
        landing=landing,
        extra={"validation.json": validation},
    )
