"""``DeltaCommitOperator``: make a staged batch visible, or append files from a landing path."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from operators.base import DeltaTableOperator


class DeltaCommitOperator(DeltaTableOperator):
    """Commit a staged write (``staged_manifest``, e.g. from ``spark_jobs.ingest --stage``, after
    a quality gate passed it), or write files read with pyarrow (``source``: a path, directory or
    list, ``source_format`` parquet/csv/json) with ``mode`` append/overwrite (``replace_where``).
    A missing table is created by the write. One commit, retry-safe."""

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

    def run(self, context, hook, table, ident) -> dict[str, Any]:
        options = hook.settings.storage_options
        if self.staged_manifest is not None:
            from engine.commands.staged import commit_write, read_manifest

            staged = read_manifest(self.staged_manifest, options)
            if staged.spec.uri.rstrip("/") != self.table_uri.rstrip("/"):
                raise ValueError(
                    f"{self.staged_manifest} stages a write to {staged.spec.uri}, not {self.table_uri}"
                )
            if staged.spec.skip:
                return {"version": None, "skipped": True, "reason": "the staged write was already applied"}
            result = commit_write(replace(staged.spec, skip=False), staged.adds)
            self.log.info(
                "committed %d staged files (%d rows) as version %s",
                len(staged.adds),
                staged.num_rows,
                result.version,
            )
            return {
                "version": None if result.skipped else result.version,
                "skipped": result.skipped,
                "files": len(staged.adds),
                "rows": staged.num_rows,
                "bytes": staged.num_bytes,
            }
        import pyarrow.dataset as ds

        from engine import write_table

        reader = ds.dataset(self.source, format=self.source_format).scanner().to_reader()
        result = write_table(
            self.table_uri,
            reader,
            mode=self.mode,
            partition_by=self.partition_by,
            predicate=self.replace_where,
            schema_mode=self.schema_mode,
            storage_options=options,
        )
        metrics = result.operation_metrics
        return {
            "version": None if result.skipped else result.version,
            "skipped": result.skipped,
            "files": int(metrics.get("numFiles", 0)),
            "rows": int(metrics.get("numOutputRows", 0)),
        }
