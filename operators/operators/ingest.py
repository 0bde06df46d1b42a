"""Ingest without Spark: stage landing files for the quality gate, as an Airflow task. Reading,
conforming and staging the files is the engine's (``engine/landing.py``); this names the batch
after the run, claims the files, records the manifest and quarantines a refused batch. (Feeding
a downstream table from a source table's commits is ``operators/consume.py``.)"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from airflow.sdk.bases.skipmixin import SkipMixin

from deltaplane.engine import LANDING_FORMATS, LandingRefused, StageRecipe, landing_key, stage_landing_files
from deltaplane.operators.operators.base import DeltaTableOperator
from deltaplane.operators.utils.batches import (
    BatchRejected,
    raise_if_rejected,
    reject,
    skip_downstream,
)


def batch_id(run_id: str, task_id: str | None = None, map_index: int | None = None) -> str:
    """A landing batch's name: the run's id, with the stage task's id (two stage tasks of one run
    are two batches) and its map index (mapped stages), as one file name."""
    name = run_id if task_id is None else f"{run_id}.{task_id}"
    if map_index is not None and map_index >= 0:
        name += f".{map_index}"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


class DeltaStageOperator(DeltaTableOperator, SkipMixin):
    """Take the files in ``landing`` (a local folder) and write them as a staged batch of the table
    (data files + a manifest in ``staging``). Nothing is committed: the quality gate and the
    commit operator come next. No landing files: the downstream tasks are skipped.

    The batch (``<run id>.<task id>``) **claims** its landing files first, by moving them to
    ``landing/_staged/<batch>/`` (one atomic rename each: two runs never stage the same file);
    they move on to ``landing/_processed/<batch>/`` only once the commit holding their rows has
    landed (``DeltaCommitOperator``). The staged data files are **held**: VACUUM does not delete
    them, whatever its retention, until the commit (``deltaplane.engine.holds``). A retry reuses
    the manifest its first try wrote; if the staged files have gone meanwhile (a VACUUM that
    knows nothing of holds), the batch is staged again from its claimed landing files.

    Files are read in record batches (CSV and JSON ``READ_BLOCK`` bytes at a time, Parquet by
    row groups) and written as they are read, so a batch larger than memory stages in bounded
    memory. CSV and JSON columns the table has are parsed straight into the table's types.

    A batch the table cannot take is **rejected**: an empty file, a header without rows, a file
    that does not parse, bytes that are not UTF-8, duplicate column names, columns the table does
    not have (unless ``schema_mode="merge"``, which adds them), a NOT NULL column missing or
    empty, values of the wrong type (only lossless casts are made: int into long, float into
    double). The message names the file, and the line and column where there is one; the batch
    (every landing file, and the data files staged before the problem showed) moves to
    ``<table>/_quarantine/<batch>/`` (``landing/``, ``data/``, ``rejection.json``), the landing
    folder is left without it, the table is not touched, and the task FAILS without retries
    (``BatchRejected``). A clear or rerun of a rejected batch fails again with the same message.

    XCom (beside the common keys; ``version`` is null: staging commits nothing):
    ``batch``, ``manifest`` (what the gate and the commit read), ``rows``, ``files`` (staged data
    files), ``landing_files`` (where the batch's landing files are: claimed under ``_staged``),
    ``restaged`` (this try staged the batch again: its staged files were gone),
    ``already_committed`` (= ``already_applied``: these files are already in the table).
    Lineage: input the landing folder, output the staging area (version: the batch).
    """

    template_fields = ("table_uri", "landing", "staging", "quarantine_uri")
    writes = False
    operation_name = "STAGE"

    def __init__(
        self,
        *,
        table_uri: str,
        landing: str,
        staging: str,
        source_format: str = "parquet",
        partition_by: list[str] | None = None,
        schema_mode: str | None = None,
        target_file_size: int | None = None,
        quarantine_uri: str | None = None,
        schema: Any = None,
        cluster_by: list[str] | None = None,
        properties: dict[str, str] | None = None,
        **kwargs: Any,
    ):
        super().__init__(table_uri=table_uri, **kwargs)
        if source_format not in LANDING_FORMATS:
            raise ValueError(f"source_format must be one of {', '.join(LANDING_FORMATS)}")
        if schema_mode not in (None, "merge"):
            raise ValueError("schema_mode must be None (new columns are refused) or 'merge' (they are added)")
        if schema is not None:
            from deltaplane.engine import declared_schema

            declared_schema(schema)  # a schema that does not parse fails the DAG file, naming why
        for name, value in (("partition_by", partition_by), ("cluster_by", cluster_by)):
            if value is not None and (isinstance(value, str) or not all(isinstance(c, str) for c in value)):
                raise TypeError(f"{name} is a list of column names, e.g. [{str(value)!r}]")
        if properties is not None and not (
            isinstance(properties, dict) and all(isinstance(k, str) for k in properties)
        ):
            raise TypeError("properties is a dict of table property names to values")
        self.schema = schema
        self.cluster_by = cluster_by
        self.properties = properties
        self.landing = landing
        self.staging = staging
        self.source_format = source_format
        self.partition_by = partition_by
        self.schema_mode = schema_mode
        self.target_file_size = target_file_size
        self.quarantine_uri = quarantine_uri

    def open_table(self, hook):
        return None

    def recipe(self) -> StageRecipe:
        from deltaplane.engine import declared_schema

        declared = declared_schema(self.schema)
        return StageRecipe(
            format=self.source_format,
            partition_by=tuple(self.partition_by) if self.partition_by is not None else None,
            schema_mode=self.schema_mode,
            target_file_size=self.target_file_size,
            schema=declared.to_json_string() if declared is not None else None,
            cluster_by=tuple(self.cluster_by) if self.cluster_by else None,
            properties=tuple(sorted((k, str(v)) for k, v in (self.properties or {}).items())) or None,
        )

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        from deltaplane.engine import (
            ObjectNotFoundError,
            StagedWrite,
            claim_files,
            manifest_landing,
            release_claimed,
            write_manifest,
        )
        from deltaplane.operators.utils.batches import quarantine_location, read_object

        ti = context.get("ti")
        batch = batch_id(stamp.run_id, self.task_id, getattr(ti, "map_index", None))
        manifest = f"{self.staging.rstrip('/')}/{batch}.json"
        options = hook.settings.storage_options
        destination = quarantine_location(self.table_uri, batch, self.quarantine_uri)
        raise_if_rejected(destination, options, self.log)
        recipe = self.recipe()
        restaged = False
        try:
            raw = read_object(manifest, options)
        except (ObjectNotFoundError, FileNotFoundError):
            raw = None
        if raw is not None:
            staged, landing = StagedWrite.loads(raw, options), manifest_landing(raw)
            self.log.info("batch %s was staged by an earlier try: %s", batch, manifest)
            missing = [] if staged.spec.skip else staged.missing_files()
            if missing:
                staged = restage(self, staged, landing, recipe, batch, manifest, missing, options)
                restaged = True
        else:
            candidates = sorted(
                p
                for p in Path(self.landing).iterdir()
                if p.is_file() and p.name.endswith(LANDING_FORMATS[self.source_format])
            )
            files = claim_files(candidates, batch)  # with any an interrupted earlier try claimed
            if not files:
                reason = f"no {self.source_format} files in {self.landing}"
                out = {"version": None, "batch": batch, "files": 0, "reason": reason}
                return skip_downstream(self, context, out, f"{self.landing}: nothing to ingest")
            landing = [str(f) for f in files]
            started = time.monotonic()
            try:
                staged = stage_landing_files(
                    self.table_uri, files, recipe, landing_key(files), options, batch=batch
                )
            except LandingRefused as refused:
                raise self._reject(context, batch, refused, files, destination, options) from None
            except BaseException:
                # Not the batch's fault (the task's arguments, storage): give the files back, so
                # a retry or the next run stages them (a kill here leaves them claimed for this
                # task's retry, which takes its own claimed files first).
                returned, _ = release_claimed(landing)
                self.log.warning("staging failed; %d landing file(s) back in %s", len(returned), self.landing)
                raise
            write_manifest(manifest, staged, options, landing=landing, recipe=recipe.to_json())
            if staged.spec.skip:
                self.log.info(
                    "%s: these %d files were already committed (%s)", batch, len(files), staged.spec.app_id
                )
            else:
                self.log.info(
                    "staged %d rows from %d files as %s in %.1f s",
                    staged.num_rows,
                    len(files),
                    manifest,
                    time.monotonic() - started,
                )
        return {
            "version": None,
            "batch": batch,
            "manifest": manifest,
            "rows": staged.num_rows,
            "files": len(staged.adds),
            "bytes": staged.num_bytes,
            "landing_files": landing,
            "restaged": restaged,
            "already_committed": staged.spec.skip,
            "work": staged.spec.app_id,
            "reason": "staged for the quality gate and the commit; nothing committed",
        }

    def lineage_datasets(self, result, facts):
        from deltaplane.operators.utils.lineage import Ref

        result = result or {}
        landing = result.get("landing_files")
        source = Ref(self.landing, table=False, files=len(landing) if landing is not None else None)
        staged = Ref(self.staging, table=False, version=result.get("batch"))
        if result.get("manifest"):
            source.rows = staged.rows = result.get("rows")
            staged.files, staged.bytes = result.get("files"), result.get("bytes")
        return [source], [staged]

    def _reject(
        self, context, batch: str, refused: LandingRefused, files: list[Path], destination: str, options
    ) -> BatchRejected:
        """Quarantine the batch, report why (log, XCom, ``rejection.json``): the exception to fail with."""
        from deltaplane.engine import open_store

        report = {
            "version": None,
            "rejected": True,
            "task": self.task_id,
            "batch": batch,
            "file": refused.file,
            "line": refused.line,
            "row": refused.row,
            "column": refused.column,
            "reason": refused.detail,
            "message": f"batch {batch} rejected: {refused.text}; quarantined at {destination}",
            "quarantine": destination,
            "files": [f.name for f in files],
            "staged_files": refused.staged,
        }
        return reject(
            self,
            context,
            report,
            destination,
            options,
            recorded={"landing": self.landing},
            table_store=open_store(self.table_uri, options),
            data_keys=refused.staged,
            landing=[str(f) for f in files],
        )


def restage(
    operator,
    staged,
    landing: list[str],
    recipe: StageRecipe | None,
    batch: str,
    manifest: str,
    missing: list[str],
    options,
):
    """Stage a batch again from its claimed landing files, with the same work key, because its
    staged data files are gone (``missing``); the manifest is rewritten. Fails (retryable: the
    files may come back from a restore) when the landing files are gone too."""
    from deltaplane.engine import StorageError, WorkKey, write_manifest

    files = [Path(p) for p in landing]
    absent = [str(p) for p in files if not p.exists()]
    if not files or absent or recipe is None:
        why = (
            "its manifest records no landing files"
            if not files
            else f"its landing files are gone too ({', '.join(absent[:5])})"
            if absent
            else "its manifest does not say how they were read (staged by another tool)"
        )
        raise StorageError(
            f"batch {batch}: {len(missing)} of its {len(staged.adds)} staged files are gone "
            f"(e.g. {missing[0]}) and it cannot be staged again: {why}"
        )
    operator.log.warning(
        "batch %s: %d of its %d staged files are gone (e.g. %s: deleted by a VACUUM that ignores holds, "
        "or by hand); staging it again from its %d landing files",
        batch,
        len(missing),
        len(staged.adds),
        missing[0],
        len(files),
    )
    key = WorkKey(staged.spec.app_id, staged.spec.app_version) if staged.spec.app_id else landing_key(files)
    try:
        again = stage_landing_files(operator.table_uri, files, recipe, key, options, batch=batch)
    except LandingRefused as refused:
        raise BatchRejected(
            f"batch {batch} could not be staged again from its landing files: {refused.text}"
        ) from None
    write_manifest(manifest, again, options, landing=landing, recipe=recipe.to_json())
    return again
