"""The ``DeltaTable`` facade: the public API over snapshots, scans and (later) commands."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from engine.actions import Metadata, Protocol
from engine.commands.history import load_history
from engine.errors import TableNotFoundError
from engine.expressions.tree import Expr
from engine.log.timestamps import version_at_timestamp
from engine.scan import Scan, ScanBuilder
from engine.snapshot import Snapshot, load_snapshot, load_table_config
from engine.storage import ObjectStore, open_store
from engine.table_properties import TableProperties


class DeltaTable:
    """A Delta table at one version (the latest unless ``version`` or ``timestamp`` is given)."""

    def __init__(
        self,
        uri: str,
        version: int | None = None,
        timestamp: str | int | float | dt.datetime | None = None,
        storage_options: Mapping[str, str] | None = None,
    ):
        if version is not None and timestamp is not None:
            raise ValueError("give a version or a timestamp, not both")
        self.uri = uri
        self.storage_options = dict(storage_options or {})
        self._store: ObjectStore = open_store(uri, self.storage_options)
        if timestamp is not None:
            _, metadata = load_table_config(self._store)
            properties = TableProperties(metadata.configuration)
            version = version_at_timestamp(self._store, timestamp, properties)
        try:
            self._snapshot = load_snapshot(self._store, version)
        except TableNotFoundError:
            raise
        self._version_pinned = version is not None

    # --- state ---------------------------------------------------------------------------------

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def version(self) -> int:
        return self._snapshot.version

    @property
    def schema(self) -> pa.Schema:
        from engine.schema import to_arrow_schema

        return to_arrow_schema(self._snapshot.schema)

    @property
    def delta_schema(self):
        return self._snapshot.schema

    @property
    def protocol(self) -> Protocol:
        return self._snapshot.protocol

    @property
    def metadata(self) -> Metadata:
        return self._snapshot.metadata

    @property
    def properties(self) -> TableProperties:
        return self._snapshot.properties

    @property
    def partition_columns(self) -> list[str]:
        return self._snapshot.partition_columns

    def refresh(self) -> DeltaTable:
        """Move to the latest version."""
        self._snapshot = load_snapshot(self._store)
        return self

    def load_version(self, version: int) -> DeltaTable:
        self._snapshot = load_snapshot(self._store, version)
        return self

    # --- reading -------------------------------------------------------------------------------

    def scan(self, columns: list[str] | None = None, filter: str | Expr | None = None) -> Scan:
        return ScanBuilder(self._snapshot).select(columns).where(filter).build()

    def to_arrow(self, columns: list[str] | None = None, filter: str | Expr | None = None) -> pa.Table:
        """All rows (projected and filtered) as one Arrow table."""
        return self.scan(columns, filter).to_table()

    def to_batches(
        self, columns: list[str] | None = None, filter: str | Expr | None = None
    ) -> pa.RecordBatchReader:
        """A stream of record batches, read file by file in bounded memory."""
        return self.scan(columns, filter).to_batches()

    def file_uris(self, filter: str | Expr | None = None) -> list[str]:
        """Live data files after partition pruning and statistics skipping."""
        return self.scan(None, filter).file_uris()

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Commit information, newest first."""
        return load_history(self._store, limit=limit, up_to=self._snapshot.version)

    def __repr__(self) -> str:
        return f"DeltaTable({self.uri!r}, version={self.version})"
