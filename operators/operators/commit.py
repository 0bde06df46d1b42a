"""``DeltaCommitOperator``: make a staged batch visible, or append files from a landing path."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

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
            from deltaplane.engine.commands.staged import read_manifest

            self._staged = read_manifest(self.staged_manifest, hook.settings.storage_options)
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
        from deltaplane.engine.work import WorkKey, local_file_identities

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
            from deltaplane.engine.commands.staged import commit_write

            staged = self._staged
            key = self._key() if self.idempotent else None
            spec = replace(
                staged.spec,
                skip=False,
                app_id=key.app_id if key is not None else None,
                app_version=key.version if key is not None else None,
            )
            result = commit_write(spec, staged.adds)
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
            }
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
