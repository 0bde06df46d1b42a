"""``DeltaCommitOperator``: make a staged batch visible, or append files from a landing path."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from deltaplane.operators.operators.base import DeltaTableOperator


class DeltaCommitOperator(DeltaTableOperator):
    """Commit a staged write (``staged_manifest``, e.g. from ``deltaplane.spark_jobs.ingest --stage``, after
    a quality gate passed it), or write files read with pyarrow (``source``: a path, directory or
    list, ``source_format`` parquet/csv/json) with ``mode`` append/overwrite (``replace_where``).
    A missing table is created by the write. One commit, retry-safe.

    XCom (beside the common keys): ``files``, ``rows`` (and ``bytes`` for a staged batch) the
    commit added. Lineage: input the staging area (the manifest's folder, version: the batch) or
    the ``source`` files, output the table."""

    operation_name = "WRITE"
    template_fields = ("table_uri", "staged_manifest", "source", "replace_where")
    creates_table = True
    template_fields_renderers = {"staged_manifest": "py"}

    def __init__(
        self,
        *,
        table_uri: str,
        staged_manifest: str | None = None,
        source: str | list[str] | None = None,
        source_format: str = "parquet",
        mode: str = "append",
        partition_by: list[str] | None = None,
        schema_mode: str | None = None,
        replace_where: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(table_uri=table_uri, **kwargs)
        if (staged_manifest is None) == (source is None):
            raise ValueError("DeltaCommitOperator needs exactly one of staged_manifest or source")
        self.staged_manifest = staged_manifest
        self.source = source
        self.source_format = source_format
        self.mode = mode
        self.partition_by = partition_by
        self.schema_mode = schema_mode
        self.replace_where = replace_where

    def work_key(self, context, hook, table):
        self._load(hook)
        return self._key()

    def _load(self, hook) -> None:
        """Read the manifest (or list the source files) once per try."""
        if getattr(self, "_loaded", False):
            return
        if self.staged_manifest is not None:
            from deltaplane.engine import StagedWrite, manifest_landing, manifest_recipe
            from deltaplane.operators.utils.batches import read_object

            options = hook.settings.storage_options
            raw = read_object(self.staged_manifest, options)
            self._staged = StagedWrite.loads(raw, options)
            self._landing = manifest_landing(raw)
            self._recipe = manifest_recipe(raw)
            spec = self._staged.spec
            if spec.uri.rstrip("/") != self.table_uri.rstrip("/"):
                raise ValueError(f"{self.staged_manifest} stages a write to {spec.uri}, not {self.table_uri}")
        else:
            import pyarrow.dataset as ds

            self._dataset = ds.dataset(self.source, format=self.source_format)
        self._loaded = True

    def _key(self):
        """A staged batch is named by its manifest (the key it was staged with, else its files);
        files read from ``source`` by their identities (path, size, modification time) with the
        mode and predicate they are written with."""
        from deltaplane.engine import WorkKey, local_file_identities

        if self.staged_manifest is not None:
            spec = self._staged.spec
            if spec.app_id is not None:
                return WorkKey(spec.app_id, spec.app_version)
            return WorkKey.named("staged", sorted(a.path for a in self._staged.adds))
        return WorkKey.named(
            "files",
            {
                "files": local_file_identities(self._dataset.files),
                "mode": self.mode,
                "replaceWhere": self.replace_where,
            },
        )

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        options = hook.settings.storage_options
        self._load(hook)
        if self.staged_manifest is not None:
            return self._commit_staged(hook, options)
        from deltaplane.engine import write_table

        result = write_table(
            self.table_uri,
            self._dataset.scanner().to_reader(),
            mode=self.mode,
            partition_by=self.partition_by,
            predicate=self.replace_where,
            schema_mode=self.schema_mode,
            storage_options=options,
        )
        metrics = result.operation_metrics
        return {
            "version": None if result.skipped else result.version,
            "already_applied": result.skipped,
            "files": int(metrics.get("numFiles", 0)),
            "rows": int(metrics.get("numOutputRows", 0)),
        }

    def _commit_staged(self, hook, options) -> dict[str, Any]:
        """Commit the staged batch: staged again first if its files are gone; given back to the
        landing folder if it cannot land for good (then the next run stages it again)."""
        from deltaplane.engine import batch_name, commit_write, release_claimed, release_staged_hold
        from deltaplane.operators.operators.base import input_error

        staged = self._staged
        batch = batch_name(self.staged_manifest)
        restaged = False
        missing = [] if staged.spec.skip else staged.missing_files()
        if missing:
            from deltaplane.engine import StageRecipe
            from deltaplane.operators.operators.ingest import restage

            recipe = StageRecipe.from_json(self._recipe) if self._recipe else None
            manifest = self.staged_manifest
            staged = restage(self, staged, self._landing, recipe, batch, manifest, missing, options)
            self._staged, restaged = staged, True
        key = self._key() if self.idempotent else None
        spec = replace(
            staged.spec,
            skip=False,
            app_id=key.app_id if key is not None else None,
            app_version=key.version if key is not None else None,
        )
        try:
            result = commit_write(spec, staged.adds)
        except Exception as e:
            if not input_error(e):
                raise  # worth retrying: the batch stays claimed and held
            returned, kept = release_claimed(self._landing)
            release_staged_hold(staged)
            where = sorted({str(Path(p).parent) for p in returned + kept})
            names = ", ".join(Path(p).name for p in returned + kept) or "none recorded"
            note = (
                f"batch {batch} was not committed; its landing files ({names}) are back in "
                f"{', '.join(where) or 'their landing folder'}, so the next run stages them again"
            )
            if kept:
                note += f" (left claimed, a newer file has the same name: {', '.join(kept)})"
            self.log.error("%s: %s: %s", self.table_uri, type(e).__name__, e)
            self.log.error("%s", note)
            raise AirflowFailException(f"{type(e).__name__}: {e}; {note}") from e
        self.log.info(
            "committed %d staged files (%d rows) as version %s",
            len(staged.adds),
            staged.num_rows,
            result.version,
        )
        return {
            "version": None if result.skipped else result.version,
            "already_applied": result.skipped,
            "files": len(staged.adds),
            "rows": staged.num_rows,
            "bytes": staged.num_bytes,
            "restaged": restaged,
        }

    def settle(self, context, hook, result) -> None:
        """The batch's rows are in the table: its landing files move on to ``_processed`` and its
        hold is released (both safe to repeat: a retry after a crash here finishes them)."""
        if self.staged_manifest is None or not getattr(self, "_loaded", False):
            return
        from deltaplane.engine import batch_name, finish_claimed, release_staged_hold

        release_staged_hold(self._staged)
        if self._landing:
            moved = finish_claimed(self._landing, batch_name(self.staged_manifest))
            result["landing_files"] = moved
            self.log.info("moved %d landing file(s) of the committed batch to _processed", len(moved))

    def lineage_datasets(self, result, facts):
        from deltaplane.operators.utils.batches import batch_name
        from deltaplane.operators.utils.lineage import Ref, location_of, table_ref

        output = table_ref(self.table_uri, result, facts, output=True)
        if self.staged_manifest is not None:
            staged = Ref(
                location_of(self.staged_manifest),
                table=False,
                version=batch_name(self.staged_manifest),
                rows=(result or {}).get("rows"),
            )
            return [staged], [output]
        sources = [self.source] if isinstance(self.source, str) else list(self.source or [])
        return [Ref(s, table=False) for s in sources], [output]
