"""Ingest without Spark: stage landing files for the quality gate, and feed a downstream table
from a source table's new commits."""

from __future__ import annotations

import re
from typing import Any

from airflow.sdk.bases.skipmixin import SkipMixin

from operators.base import DeltaTableOperator

FORMATS = {"csv": (".csv",), "json": (".json", ".jsonl", ".ndjson"), "parquet": (".parquet",)}
PROCESSED = "_processed"


def batch_id(run_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)


class DeltaStageOperator(DeltaTableOperator, SkipMixin):
    """Take the files in ``landing`` (a local folder), write them as a staged batch of the table
    (data files + a manifest in ``staging``), and move the originals to ``landing/_processed/<batch>``.
    Nothing is committed: the quality gate and the commit operator come next. No landing files:
    the downstream tasks are skipped. A retry reuses the manifest its first try wrote."""

    template_fields = ("table_uri", "landing", "staging")
    writes = False

    def __init__(
        self,
        *,
        table_uri: str,
        landing: str,
        staging: str,
        source_format: str = "parquet",
        partition_by: list[str] | None = None,
        **kwargs: Any,
    ):
        super().__init__(table_uri=table_uri, **kwargs)
        if source_format not in FORMATS:
            raise ValueError(f"source_format must be one of {', '.join(FORMATS)}")
        self.landing = landing
        self.staging = staging
        self.source_format = source_format
        self.partition_by = partition_by

    def open_table(self, hook):
        return None

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        from pathlib import Path

        from engine.commands.staged import StagedWrite, plan_write, read_manifest, write_files, write_manifest
        from engine.errors import ObjectNotFoundError
        from engine.work import WorkKey, local_file_identities

        batch = batch_id(stamp.run_id)
        manifest = f"{self.staging.rstrip('/')}/{batch}.json"
        options = hook.settings.storage_options
        processed = Path(self.landing) / PROCESSED / batch
        try:
            staged = read_manifest(manifest, options)
            self.log.info("batch %s was staged by an earlier try: %s", batch, manifest)
        except (ObjectNotFoundError, FileNotFoundError):
            files = sorted(
                p
                for p in Path(self.landing).iterdir()
                if p.is_file() and p.name.endswith(FORMATS[self.source_format])
            )
            if not files:
                out = {
                    "version": None,
                    "batch": batch,
                    "files": 0,
                    "reason": f"no {self.source_format} files in {self.landing}",
                }
                self.log.info(
                    "%s: nothing to ingest; skipping %s", self.landing, sorted(self.downstream_task_ids)
                )
                context["ti"].xcom_push(key="return_value", value=out)
                self.skip(context["ti"], self.get_direct_relatives(upstream=False))
                return out
            key = WorkKey.named("files", {"files": local_file_identities(files)})
            data = _read(files, self.source_format)
            spec = plan_write(
                self.table_uri,
                data.schema,
                partition_by=self.partition_by,
                storage_options=options,
                app_id=key.app_id,
                app_version=key.version,
            )
            staged = StagedWrite(spec, tuple(write_files(spec, data)))  # nothing when spec.skip
            write_manifest(manifest, staged, options)
            processed.mkdir(parents=True, exist_ok=True)
            for f in files:
                f.rename(processed / f.name)
            if spec.skip:
                self.log.info("%s: these %d files were already committed (%s)", batch, len(files), key.app_id)
            else:
                self.log.info("staged %d rows from %d files as %s", staged.num_rows, len(files), manifest)
        return {
            "version": None,
            "batch": batch,
            "manifest": manifest,
            "rows": staged.num_rows,
            "files": len(staged.adds),
            "already_committed": staged.spec.skip,
            "work": staged.spec.app_id,
        }


def _read(files, fmt: str):
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.json as pjson
    import pyarrow.parquet as pq

    readers = {"csv": pcsv.read_csv, "json": pjson.read_json, "parquet": pq.read_table}
    tables = [readers[fmt](str(f)) for f in files]
    return pa.concat_tables(tables, promote_options="permissive")


class DeltaConsumeOperator(DeltaTableOperator):
    """Append the rows of ``source_uri``'s new data commits to this table (``table_uri``), exactly
    once: the last source version consumed is recorded in the target's own log as
    ``txn(appId="consume:<source>", version)``, so the watermark commits atomically with the
    rows it covers. Only appends are followed (a DELETE/UPDATE in the source fails the task unless
    ``skip_change_commits``); OPTIMIZE commits are not data. Rows get ``_source_version``."""

    template_fields = ("table_uri", "source_uri")
    creates_table = True

    def __init__(self, *, table_uri: str, source_uri: str, skip_change_commits: bool = False, **kwargs: Any):
        super().__init__(table_uri=table_uri, **kwargs)
        self.source_uri = source_uri
        self.skip_change_commits = skip_change_commits

    def run(self, context, hook, table, stamp) -> dict[str, Any]:
        import pyarrow as pa

        from engine import write_table
        from engine.scan import Scan
        from engine.snapshot import files_snapshot, load_table_config
        from engine.storage import open_store
        from engine.tail import commit_changes, versions_after

        options = hook.settings.storage_options
        app_id = f"consume:{self.source_uri}"
        done = table.snapshot.app_transaction_version(app_id) if table is not None else None
        watermark = -1 if done is None else done
        store = open_store(self.source_uri, options)
        versions = versions_after(store, watermark)
        if not versions:
            return {"version": None, "watermark": watermark, "reason": "no new commits"}
        protocol, metadata = load_table_config(store, versions[-1])
        pieces, consumed = [], []
        for v in versions:
            changes = commit_changes(store, v, metadata)
            if not changes.data_change:
                continue
            if not changes.appends_only:
                if self.skip_change_commits:
                    continue
                raise ValueError(
                    f"{self.source_uri} version {v} ({changes.operation}) changed existing rows; "
                    "set skip_change_commits=True to ignore such commits"
                )
            if changes.added.num_rows:
                files = files_snapshot(store, v, protocol, metadata, changes.added)
                rows = Scan(files, None, None).to_table()
                pieces.append(
                    rows.append_column("_source_version", pa.repeat(pa.scalar(v, pa.int64()), rows.num_rows))
                )
                consumed.append(v)
        last = versions[-1]
        if not pieces:
            return {
                "version": None,
                "watermark": watermark,
                "reason": f"versions {versions[0]}..{last} hold no new rows",
            }
        data = pa.concat_tables(pieces)
        result = write_table(
            self.table_uri,
            data,
            mode="append",
            app_id=app_id,
            app_version=last,
            storage_options=options,
        )
        self.log.info(
            "%s: %d rows from %s versions %s -> version %s",
            self.table_uri,
            data.num_rows,
            self.source_uri,
            consumed,
            result.version,
        )
        return {
            "version": None if result.skipped else result.version,
            "source_versions": consumed,
            "watermark": last,
            "rows": data.num_rows,
            "skipped": result.skipped,
        }
