"""``DeltaQualityGateOperator``: validate a staged batch with Great Expectations before anyone
can read it.

The batch is a staged write (``spark_jobs.ingest --stage`` or ``engine.stage_write``): its
files exist, the table does not reference them. The gate reads the staged rows as readers
would see them, validates them against expectations with GX Core (an ephemeral context; no GX
project on disk), and then:

* **pass**: returns the summary; the commit operator downstream makes the batch visible;
* **fail**: nothing is committed and nothing committed is touched; the batch's data files and
  its manifest are moved to ``<quarantine_uri>/<batch>/`` with ``validation.json`` (the full
  GX result) beside them; the summary (failed expectations, unexpected counts, examples) goes
  to the task log and XCom; then the task fails (``on_failure="fail"``) or skips its
  downstream tasks (``"skip"``, for pipelines that should go on with the next batch).

Expectations are given as ``[{"expectation": "expect_column_values_to_not_be_null",
"kwargs": {"column": "id"}}, ...]`` (snake_case or GX class names).
"""

from __future__ import annotations

import json
from typing import Any

from airflow.sdk.bases.skipmixin import SkipMixin

from operators.base import DeltaTableOperator

QUARANTINE_DIR = "_quarantine"  # hidden from VACUUM and readers, like every "_" directory


class QualityGateFailed(Exception):
    """The staged batch broke its expectations (it was quarantined, nothing was committed)."""


def _gx():
    """``great_expectations``, imported safely in any host process.

    GX imports PySpark's Connect helpers when PySpark is installed, and those call
    ``sys.exit(0)`` if the main module has neither ``__spec__`` nor ``__file__`` (they take it
    for a doctest run). Embedded interpreters (pytest-xdist workers, some executors) look like
    that; the task would then "succeed" with exit code 0 without validating anything. So the
    main module is given a placeholder file name for the duration of the import."""
    import sys

    if "great_expectations" in sys.modules:
        return sys.modules["great_expectations"]
    main = sys.modules.get("__main__")
    patched = main is not None and getattr(main, "__spec__", None) is None and not hasattr(main, "__file__")
    if patched:
        main.__file__ = "<deltaplane>"
    try:
        import great_expectations
    finally:
        if patched:
            del main.__file__
    return great_expectations


def expectation_class(name: str):
    gx = _gx()

    camel = name if name[:1].isupper() else "".join(part.capitalize() for part in name.split("_"))
    cls = getattr(gx.expectations, camel, None)
    if cls is None:
        raise ValueError(f"unknown expectation {name!r} (Great Expectations has no {camel})")
    return cls


def validate_rows(frame, expectations: list[dict], name: str = "batch") -> dict[str, Any]:
    """Validate a pandas DataFrame; a JSON-able summary and the full result."""
    gx = _gx()

    context = gx.get_context(mode="ephemeral")
    source = context.data_sources.add_pandas(name=f"deltaplane_{name}")
    asset = source.add_dataframe_asset(name=name)
    batch = asset.add_batch_definition_whole_dataframe("whole").get_batch(
        batch_parameters={"dataframe": frame}
    )
    suite = gx.ExpectationSuite(name=f"{name}_suite")
    for spec in expectations:
        if not isinstance(spec, dict) or "expectation" not in spec:
            raise ValueError(f"an expectation is {{'expectation': name, 'kwargs': {{...}}}}, got {spec!r}")
        suite.add_expectation(expectation_class(spec["expectation"])(**(spec.get("kwargs") or {})))
    result = batch.validate(suite)
    full = result.to_json_dict()
    failed = []
    for r in full.get("results", []):
        if r.get("success"):
            continue
        config = r.get("expectation_config", {})
        details = r.get("result", {}) or {}
        failed.append(
            {
                "expectation": config.get("type"),
                "kwargs": {k: v for k, v in (config.get("kwargs") or {}).items() if k != "batch_id"},
                "unexpected_count": details.get("unexpected_count"),
                "unexpected_percent": details.get("unexpected_percent"),
                "examples": (details.get("partial_unexpected_list") or [])[:5],
            }
        )
    summary = {
        "success": bool(result.success),
        "rows": len(frame),
        "evaluated": len(full.get("results", [])),
        "failed": failed,
    }
    return {"summary": summary, "result": full}


class DeltaQualityGateOperator(DeltaTableOperator, SkipMixin):
    writes = False
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
        **kwargs: Any,
    ):
        super().__init__(table_uri=table_uri, **kwargs)
        if on_failure not in ("fail", "skip"):
            raise ValueError("on_failure must be 'fail' or 'skip'")
        if not expectations:
            raise ValueError("a quality gate needs at least one expectation")
        self.staged_manifest = staged_manifest
        self.expectations = list(expectations)
        self.quarantine_uri = quarantine_uri
        self.on_failure = on_failure

    def open_table(self, hook):
        return None  # the gate reads the staged files only; the table may not exist yet

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        from engine.commands.staged import read_manifest

        options = hook.settings.storage_options
        staged = read_manifest(self.staged_manifest, options)
        batch = self.staged_manifest.rstrip("/").rsplit("/", 1)[-1].removesuffix(".json")
        if staged.spec.skip:
            self.log.info("%s: batch %s is already in the table; nothing to validate", self.table_uri, batch)
            return {"success": True, "batch": batch, "version": None, "reason": "already committed"}
        rows = staged.read()
        outcome = validate_rows(rows.to_pandas(), self.expectations, name="batch")
        summary = {**outcome["summary"], "batch": batch, "files": len(staged.adds), "version": None}
        if summary["success"]:
            self.log.info(
                "%s: batch %s passed %d expectations (%d rows)",
                self.table_uri,
                batch,
                summary["evaluated"],
                summary["rows"],
            )
            return summary
        root = self.quarantine_uri or f"{self.table_uri.rstrip('/')}/{QUARANTINE_DIR}"
        destination = f"{root.rstrip('/')}/{batch}"
        quarantine(staged, self.staged_manifest, destination, outcome["result"], summary, options)
        summary["quarantine"] = destination
        for failure in summary["failed"]:
            self.log.error(
                "%s: %s %s: %s unexpected (%s%%), e.g. %s",
                batch,
                failure["expectation"],
                failure["kwargs"],
                failure["unexpected_count"],
                failure["unexpected_percent"],
                failure["examples"],
            )
        message = (
            f"batch {batch} failed {len(summary['failed'])} of {summary['evaluated']} expectations; "
            f"quarantined at {destination}"
        )
        context["ti"].xcom_push(key="return_value", value=summary)
        if self.on_failure == "skip":
            self.log.warning("%s: %s; skipping %s", self.table_uri, message, sorted(self.downstream_task_ids))
            self.skip(context["ti"], self.get_direct_relatives(upstream=False))
            return summary
        raise QualityGateFailed(message)


def quarantine(staged, manifest_uri: str, destination: str, result: dict, summary: dict, options) -> None:
    """Move a staged batch's files and manifest under ``destination`` with the validation result.

    Copies are written first and the originals deleted after, so a crash leaves at worst two
    copies (the uncommitted original is VACUUM's to reclaim), never none."""
    from engine.storage import open_store, resolve_location

    target = open_store(destination, options)
    table_store = staged.spec.store()
    for add in staged.adds:
        owner, key = resolve_location(table_store, add.path)
        target.put(f"data/{key}", owner.get(key), mode="overwrite")
    target.put("manifest.json", staged.dumps(), mode="overwrite")
    target.put(
        "validation.json",
        json.dumps({"summary": summary, "result": result}, indent=1, default=str).encode(),
        mode="overwrite",
    )
    for add in staged.adds:
        owner, key = resolve_location(table_store, add.path)
        owner.delete(key)
    head, _, name = manifest_uri.rstrip("/").rpartition("/")
    open_store(head or "/", options).delete(name)
