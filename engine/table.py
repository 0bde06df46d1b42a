"""The ``DeltaTable`` facade: the public API over snapshots, scans and commands.

Every writing method takes ``commit_metadata`` (user fields for the commit's ``commitInfo``, such
as an Airflow run id); it applies to every commit the call makes, through
``transaction.commit_metadata_scope``, so the commands below need not pass it along.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.actions import Metadata, Protocol
from deltaplane.engine.alterer import TableAlterer
from deltaplane.engine.delta_rs import (
    COMMIT_OPTIONS,
    EXECUTION,
    TYPE_MISMATCH,
    WRITER_PROPERTIES,
    DeltaRsVersion,
    Refused,
    delta_rs_names,
    only,
)
from deltaplane.engine.deltalake_compat import OWN_STORAGE, DeltaRsTable, combined_filter
from deltaplane.engine.errors import (
    DeltaError,
    InvalidArgumentError,
    TableExistsError,
    TableNotFoundError,
    UnsupportedOperationError,
)
from deltaplane.engine.expressions.tree import Expr
from deltaplane.engine.schema import StructType
from deltaplane.engine.snapshot import Snapshot, load_snapshot, load_table_config, update_snapshot
from deltaplane.engine.storage import ObjectStore, open_store, table_location
from deltaplane.engine.table_maintenance import TableMaintenance
from deltaplane.engine.table_properties import TableProperties

if TYPE_CHECKING:  # the commands load when first called: opening a table does not pay for them
    from deltaplane.engine.commands.merge import MergeBuilder
    from deltaplane.engine.scan import Scan
    from deltaplane.engine.tail import CommitChanges
    from deltaplane.engine.transaction import CommitResult

_CACHED_URIS = 100_000
_CACHED_COMMIT_INFOS = 20_000


class DeltaTable(TableMaintenance, DeltaRsTable):
    """A Delta table at one version (the latest unless ``version`` or ``timestamp`` is given).

    This module holds its state, reading and writes; its maintenance operations are
    ``TableMaintenance`` (``engine/table_maintenance.py``), ALTER is ``dt.alter``
    (``engine/alterer.py``), and delta-rs's names for the same operations are ``DeltaRsTable``
    (``engine/deltalake_compat.py``): one spelling per operation here, theirs beside it.

    ``uri`` is a string or an ``os.PathLike``. delta-rs's spellings work too (``engine/delta_rs.py``):
    ``table_uri=``, ``DeltaTable(uri, version, storage_options)`` by position, ``dt.version()``,
    ``dt.metadata()``, ``dt.protocol()``; ``without_files`` and ``log_buffer_size`` (how delta-rs
    loads the log) change nothing here."""

    @delta_rs_names(
        table_uri="uri",
        without_files=EXECUTION,
        log_buffer_size=EXECUTION,
        skip_stats=Refused(
            "deltaplane always loads the files' statistics: they drive data skipping", only(False)
        ),
    )
    def __init__(
        self,
        uri: str | os.PathLike[str],
        version: int | None = None,
        timestamp: str | int | float | dt.datetime | None = None,
        storage_options: Mapping[str, str] | None = None,
    ):
        from deltaplane.engine.log.timestamps import version_at_timestamp

        uri = table_location(uri)
        if isinstance(timestamp, Mapping):  # delta-rs's third place: DeltaTable(uri, version, options)
            if storage_options is not None:
                raise InvalidArgumentError(f"storage_options given twice (by position and by name) for {uri}")
            timestamp, storage_options = None, timestamp
        if version is not None and timestamp is not None:
            raise InvalidArgumentError(f"open {uri} at a version or at a timestamp, not both")
        _check_count(version, "version")
        self.uri = uri
        self.storage_options = dict(storage_options or {})
        self._store: ObjectStore = open_store(uri, self.storage_options)
        if timestamp is not None:
            _, metadata = load_table_config(self._store)
            properties = TableProperties(metadata.configuration)
            version = version_at_timestamp(self._store, timestamp, properties)
        self._snapshot = load_snapshot(self._store, version)
        self._version_pinned = version is not None
        self._stale = False
        self._listed_for_write = False  # the snapshot was just listed for the write that follows
        self._history_cache: dict = {}  # commitInfo by (version, commit size): commits never change
        self._all_uris: tuple[Snapshot, list[str]] | None = None

    # --- state ---------------------------------------------------------------------------------

    @property
    def snapshot(self) -> Snapshot:
        if self._stale:  # this object committed since: catch up with its own writes
            self._snapshot = update_snapshot(self._snapshot)
            self._stale = False
        return self._snapshot

    @property
    def version(self) -> DeltaRsVersion:
        """The version this object reads: an ``int``; ``dt.version()`` (delta-rs's spelling) too."""
        return DeltaRsVersion(self.snapshot.version)

    @property
    def schema(self) -> pa.Schema:
        from deltaplane.engine.schema import to_arrow_schema

        return to_arrow_schema(self.snapshot.schema)

    @property
    def delta_schema(self):
        return self.snapshot.schema

    @property
    def protocol(self) -> Protocol:
        return self.snapshot.protocol

    @property
    def metadata(self) -> Metadata:
        return self.snapshot.metadata

    @property
    def properties(self) -> TableProperties:
        return self.snapshot.properties

    @property
    def clustering_columns(self) -> list[str] | None:
        """Liquid clustering columns (``s.b`` for a nested field); ``None`` when the table is not
        clustered, ``[]`` after ``alter.cluster_by(None)``."""
        from deltaplane.engine.clustering import clustering_column_names

        return clustering_column_names(self.snapshot)

    @property
    def partition_columns(self) -> list[str]:
        return self.snapshot.partition_columns

    def refresh(self) -> DeltaTable:
        """Move to the latest version, replaying only the commits made since."""
        self._snapshot = update_snapshot(self._snapshot)
        self._stale = False
        self._version_pinned = False
        return self

    def transaction_version(self, app_id: str) -> int | None:
        """The latest version an application recorded (``app_id``/``app_version`` of a write,
        delta-rs's ``Transaction``) at this table version; ``None`` if it never did."""
        return self.snapshot.app_transaction_version(app_id)

    def load_version(self, version: int) -> DeltaTable:
        """Time travel this object to ``version`` (read-only until ``refresh()``)."""
        _check_count(version, "version")
        self._snapshot = load_snapshot(self._store, version)
        self._stale = False
        self._version_pinned = True
        return self

    # --- reading -------------------------------------------------------------------------------

    @delta_rs_names(predicate="filter")
    def scan(
        self,
        columns: list[str] | None = None,
        filter: str | Expr | None = None,
        *,
        row_tracking: bool = False,
    ) -> Scan:
        """``row_tracking``: add each row's ``_metadata.row_id`` and ``_metadata.row_commit_version``
        (tables with ``delta.enableRowTracking``). ``predicate=`` is delta-rs's name for ``filter``;
        the scan's ``read_all()`` gives the rows, as delta-rs's reader does."""
        from deltaplane.engine.scan import ScanBuilder

        builder = ScanBuilder(self.snapshot).select(columns).where(filter)
        return builder.with_row_tracking(row_tracking).build()

    def to_arrow(
        self,
        columns: list[str] | None = None,
        filter: str | Expr | None = None,
        *,
        row_tracking: bool = False,
    ) -> pa.Table:
        """All rows (projected and filtered) as one Arrow table; ``row_tracking`` adds
        ``_metadata.row_id`` and ``_metadata.row_commit_version``."""
        return self.scan(columns, filter, row_tracking=row_tracking).to_table()

    def to_batches(
        self,
        columns: list[str] | None = None,
        filter: str | Expr | None = None,
        *,
        row_tracking: bool = False,
    ) -> pa.RecordBatchReader:
        """A stream of record batches, read file by file in bounded memory."""
        return self.scan(columns, filter, row_tracking=row_tracking).to_batches()

    def file_uris(
        self,
        filter: str | Expr | list | None = None,
        *,
        partition_filters: list | None = None,
        file_pruning_predicate: str | list | None = None,
    ) -> list[str]:
        """Live data files after partition pruning and statistics skipping: absolute paths for a
        local table, URIs (``s3://...``) otherwise.

        ``filter`` is a SQL predicate, an expression, or delta-rs's tuple filters (a list of
        ``(column, op, value)`` tuples for AND, a list of such lists for OR); delta-rs's
        ``partition_filters=`` and ``file_pruning_predicate=`` are accepted too. As in delta-rs,
        a filter on data columns keeps every file whose statistics may match (a superset)."""
        filter = combined_filter((filter, False), (partition_filters, True), (file_pruning_predicate, False))
        if filter is not None:
            return self.scan(None, filter).file_uris()
        snapshot = self.snapshot
        cached = self._all_uris
        if cached is not None and cached[0] is snapshot:  # a version's files never change
            return list(cached[1])
        uris = self.scan(None, None).file_uris()
        if len(uris) <= _CACHED_URIS:  # a big list is not worth holding twice
            self._all_uris = (snapshot, uris)
            return list(uris)
        return uris

    @delta_rs_names(filesystem=Refused(OWN_STORAGE))
    def to_pandas(
        self,
        columns: list[str] | None = None,
        filter: str | Expr | None = None,
        *,
        partitions: list | None = None,
        filters: Any = None,
        types_mapper: Any = None,
    ):
        """All rows (projected and filtered) as a pandas DataFrame (pandas must be installed).
        delta-rs's ``partitions=``, ``filters=`` (tuple filters or a pyarrow expression, as in
        ``to_pyarrow_table``) and ``types_mapper=`` are accepted by name."""
        if partitions is None and filters is None:
            table = self.to_arrow(columns, filter)
        elif filter is not None:
            raise InvalidArgumentError("give filter (SQL) or delta-rs's filters/partitions, not both")
        else:
            table = self.to_pyarrow_table(partitions, columns, None, filters)
        return table.to_pandas(types_mapper=types_mapper)

    def count(self, filter: str | Expr | None = None) -> int:
        """The number of rows (matching ``filter``). Without a filter it comes from the files'
        ``numRecords`` minus their deletion vectors' cardinality when every file has both; the
        files are read only when some statistics are missing."""
        if filter is None:
            exact = self.snapshot_row_count()
            if exact is not None:
                return exact
        first = self.snapshot.schema.fields[0].name  # the filter's own columns are read anyway
        return sum(batch.num_rows for batch in self.to_batches(columns=[first], filter=filter))

    def snapshot_row_count(self) -> int | None:
        """Rows of the current version from the log alone; ``None`` if a file has no row count."""
        from deltaplane.engine.interop import add_actions_table

        files = add_actions_table(self.snapshot, flatten=True)
        records = files.column("num_records")
        if records.null_count:
            return None

        total = pc.sum(records).as_py() or 0
        return int(total - (pc.sum(files.column("num_deleted_records")).as_py() or 0))

    def get_add_actions(self, flatten: bool = False) -> pa.Table:
        """The live files with typed statistics, one row each (as delta-rs's ``get_add_actions``):
        ``path``, ``size_bytes``, ``modification_time``, ``data_change``, ``num_records``,
        ``num_deleted_records``, and partition values, null counts, minima and maxima as structs
        or, with ``flatten``, as ``partition.<col>``, ``null_count.<col>``, ``min.<col>``,
        ``max.<col>`` columns."""
        from deltaplane.engine.interop import add_actions_table

        return add_actions_table(self.snapshot, flatten=flatten)

    def __arrow_c_stream__(self, requested_schema=None):
        """The Arrow C stream of every row (deletion vectors applied): ``duckdb.sql("select *
        from t")`` with ``t`` a DeltaTable, ``polars.DataFrame(t)``, ``pa.table(t)``."""
        return self.to_batches().__arrow_c_stream__(requested_schema)

    @staticmethod
    @delta_rs_names(table_uri="uri")
    def is_deltatable(uri: str | os.PathLike[str], storage_options: Mapping[str, str] | None = None) -> bool:
        """Whether ``uri`` holds a Delta table (a log with a commit); never raises for a missing
        or non-table location (storage that cannot be reached still raises)."""
        from deltaplane.engine.log.segment import list_log

        try:
            return list_log(open_store(uri, storage_options)).max_version is not None
        except TableNotFoundError:
            return False

    # --- writing -------------------------------------------------------------------------------

    @classmethod
    @delta_rs_names(
        table_uri="uri",
        configuration="properties",
        **COMMIT_OPTIONS,
        raise_if_key_not_exists=Refused(
            "deltaplane always refuses unknown delta.* property names", only(True)
        ),
    )
    def create(
        cls,
        uri: str | os.PathLike[str],
        schema: pa.Schema | StructType | None = None,
        mode: str = "error",
        *,
        partition_by: list[str] | None = None,
        properties: Mapping[str, str] | None = None,
        name: str | None = None,
        description: str | None = None,
        storage_options: Mapping[str, str] | None = None,
        data: Any = None,
        commit_metadata: Mapping[str, Any] | None = None,
        cluster_by: list[str] | None = None,
    ) -> DeltaTable:
        """Create a table (version 0) with the smallest protocol its properties need; with
        ``data``, its rows are in version 0 too (``schema`` then defaults to the data's).
        ``cluster_by`` makes it a liquid-clustered table (never with ``partition_by``): OPTIMIZE
        then clusters it by those columns.

        ``TableExistsError`` if a table is already there (checked, and enforced atomically by
        the put-if-absent of version 0). Unknown ``delta.*`` property names are refused.

        ``mode`` is delta-rs's: ``"error"`` (the default, as above) or ``"ignore"`` (an existing
        table is returned as it is); deltaplane's create never replaces or appends to a table.
        """
        if mode == "ignore" and cls.is_deltatable(uri, storage_options):
            return cls(uri, storage_options=storage_options)
        if mode not in ("error", "ignore"):
            raise UnsupportedOperationError(
                f"DeltaTable.create(mode={mode!r}): deltaplane's create makes a new table only "
                "(mode 'error' or 'ignore'); write_table(uri, data, mode='append') adds rows and "
                "write_table(uri, data, mode='overwrite', schema_mode='overwrite') replaces rows and schema"
            )
        try:
            table, _ = cls.create_with_result(
                uri,
                schema,
                partition_by=partition_by,
                properties=properties,
                name=name,
                description=description,
                storage_options=storage_options,
                data=data,
                commit_metadata=commit_metadata,
                **({"cluster_by": cluster_by} if cluster_by else {}),
            )
        except TableExistsError:
            if mode == "ignore":  # created by someone else meanwhile
                return cls(uri, storage_options=storage_options)
            raise
        return table

    @classmethod
    def create_with_result(
        cls,
        uri: str | os.PathLike[str],
        schema: pa.Schema | StructType | None = None,
        *,
        storage_options: Mapping[str, str] | None = None,
        commit_metadata: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> tuple[DeltaTable, CommitResult]:
        """``create``, also returning version 0's ``CommitResult`` (its metrics, for callers that
        report them: ``write_table``, operators)."""
        from deltaplane.engine.commands.manifest import refresh_manifest_after_commit
        from deltaplane.engine.commands.write import execute_create
        from deltaplane.engine.transaction import commit_metadata_scope

        uri = table_location(uri)
        if schema is None and options.get("data") is None:
            raise InvalidArgumentError(f"create({uri!r}) needs a schema or data")
        store = open_store(uri, storage_options)
        with commit_metadata_scope(commit_metadata):
            result = execute_create(store, schema, **options)
        refresh_manifest_after_commit(store, None, result)  # a manifest from version 0
        return cls(uri, storage_options=storage_options), result

    def _latest_for_write(self) -> Snapshot:
        """The latest version: writes are planned against it (and retried past newer ones)."""
        if self._version_pinned:
            raise DeltaError(
                f"{self.uri} was opened at a fixed version or timestamp; open it at the latest "
                "version to write"
            )
        if self._listed_for_write:  # opened by the same call a moment ago: no second listing
            self._listed_for_write = False
        else:
            self._snapshot = update_snapshot(self._snapshot)
        self._stale = False
        return self._snapshot

    @classmethod
    def _open_to_write(cls, uri: str, storage_options: Mapping[str, str] | None) -> DeltaTable:
        """The table at its latest version for a write made right away (``write_table``): that
        write plans against the snapshot just listed instead of listing the log again (a round
        trip on an object store; a commit that lands in between is met by the commit's retry)."""
        table = cls(uri, storage_options=storage_options)
        table._listed_for_write = True
        return table

    def append(
        self,
        data: Any,
        *,
        app_id: str | None = None,
        app_version: int | None = None,
        schema_mode: str | None = None,
        target_file_size: int | None = None,
        commit_metadata: Mapping[str, Any] | None = None,
    ) -> CommitResult:
        """Add rows (a pyarrow Table/RecordBatch/RecordBatchReader, a pandas DataFrame, or
        anything with ``__arrow_c_stream__``). With ``app_id``/``app_version``, a version already
        recorded for that application commits nothing (``result.skipped``): retries of the same
        job are safe."""
        from deltaplane.engine.commands.write import execute_append
        from deltaplane.engine.transaction import commit_metadata_scope

        with commit_metadata_scope(commit_metadata):
            read = self._latest_for_write()
            result = execute_append(
                self._store,
                read,
                data,
                app_id=app_id,
                app_version=app_version,
                schema_mode=schema_mode,
                target_file_size=target_file_size,
            )
            self._after_commit(result, read=read)
        return result

    def overwrite(
        self,
        data: Any,
        predicate: str | Expr | None = None,
        *,
        dynamic_partitions: bool = False,
        app_id: str | None = None,
        app_version: int | None = None,
        schema_mode: str | None = None,
        target_file_size: int | None = None,
        commit_metadata: Mapping[str, Any] | None = None,
    ) -> CommitResult:
        """Replace all rows, the rows matching ``predicate`` (replaceWhere), or, with
        ``dynamic_partitions``, the partitions the new data touches."""
        from deltaplane.engine.commands.write import execute_overwrite
        from deltaplane.engine.transaction import commit_metadata_scope

        with commit_metadata_scope(commit_metadata):
            read = self._latest_for_write()
            result = execute_overwrite(
                self._store,
                read,
                data,
                predicate=predicate,
                dynamic_partitions=dynamic_partitions,
                app_id=app_id,
                app_version=app_version,
                schema_mode=schema_mode,
                target_file_size=target_file_size,
            )
            self._after_commit(result, read=read)
        return result

    def _after_commit(self, result: CommitResult, *, read: Snapshot | None, data_write: bool = True) -> None:
        """Post-commit hooks: adopt the new snapshot, keep symlink manifests current (when
        enabled), and auto-compact (when enabled) after data writes. ``read`` is the snapshot
        the commit was planned on."""
        from deltaplane.engine.auto_optimize import auto_compact_after_commit, auto_compact_enabled
        from deltaplane.engine.commands.manifest import refresh_manifest_after_commit

        if result.snapshot is not None:
            self._snapshot, self._stale = result.snapshot, False
        else:
            self._stale = True  # read the new version only when it is next needed
        if not result.committed and not result.skipped:
            return  # nothing to commit (a DELETE that matched no row): no commit, no hooks
        result.manifest = refresh_manifest_after_commit(self._store, read, result)  # None unless enabled
        if data_write and not result.skipped and auto_compact_enabled(self.snapshot):
            before = self.snapshot
            compaction = auto_compact_after_commit(self._store, before)
            if compaction is not None and compaction.commit is not None:
                result.auto_compaction = compaction
                self._after_commit(compaction.commit, read=before, data_write=False)

    @delta_rs_names(writer_properties=WRITER_PROPERTIES, **COMMIT_OPTIONS)
    def delete(
        self,
        predicate: str | Expr | None = None,
        *,
        strategy: str | None = None,
        rewrite_threshold: float | None = None,
        commit_metadata: Mapping[str, Any] | None = None,
    ) -> CommitResult:
        """Delete the rows matching ``predicate`` (all rows when ``None``).

        ``strategy`` is ``"deletion_vectors"`` (the default when the table enables them) or
        ``"copy_on_write"``; files whose deleted fraction passes ``rewrite_threshold`` are
        rewritten either way. Metrics use Delta Spark's names (``numDeletedRows``, ...).
        """
        from deltaplane.engine.commands.dml import execute_delete
        from deltaplane.engine.transaction import commit_metadata_scope, rerun_past_rearrangements

        with commit_metadata_scope(commit_metadata):
            result, read = rerun_past_rearrangements(
                lambda read: execute_delete(
                    self._store, read, predicate, strategy=strategy, threshold=rewrite_threshold
                ),
                self._latest_for_write(),
            )
            self._after_commit(result, read=read)
        return result

    @delta_rs_names(
        writer_properties=WRITER_PROPERTIES, error_on_type_mismatch=TYPE_MISMATCH, **COMMIT_OPTIONS
    )
    def update(
        self,
        updates: Mapping[str, str] | None = None,
        predicate: str | Expr | Mapping[str, Any] | None = None,
        *args: Any,
        new_values: Mapping[str, Any] | None = None,
        strategy: str | None = None,
        rewrite_threshold: float | None = None,
        commit_metadata: Mapping[str, Any] | None = None,
    ) -> CommitResult:
        """Set columns to SQL expressions (``updates={"price": "price * 1.1"}``) or to Python
        values (``new_values={"status": "done"}``, delta-rs's spelling; typed as the column) on
        the rows matching ``predicate`` (every row when ``None``).

        delta-rs's positional order ``update(updates, new_values, predicate)`` works too: a
        mapping in the second place is ``new_values``. Returns the ``CommitResult`` (delta-rs
        returns a dict of metrics: ``result.operation_metrics`` has Delta Spark's)."""
        from deltaplane.engine.commands.dml import execute_update, update_assignments
        from deltaplane.engine.transaction import commit_metadata_scope, rerun_past_rearrangements

        if isinstance(predicate, Mapping):  # delta-rs: update(updates, new_values, predicate)
            if new_values is not None:
                raise InvalidArgumentError("new_values given twice (by position and by name)")
            new_values, predicate = predicate, None
            if len(args) > 1:
                raise InvalidArgumentError(
                    f"update() takes at most 3 positional arguments, got {2 + len(args)}"
                )
            if args:
                predicate = args[0]
        elif args:
            raise InvalidArgumentError(
                "update() takes updates and predicate by position; pass the rest by name "
                "(new_values=..., strategy=...)"
            )
        updates = update_assignments(updates, new_values, self.snapshot.schema)
        with commit_metadata_scope(commit_metadata):
            result, read = rerun_past_rearrangements(
                lambda read: execute_update(
                    self._store, read, updates, predicate, strategy=strategy, threshold=rewrite_threshold
                ),
                self._latest_for_write(),
            )
            self._after_commit(result, read=read)
        return result

    @delta_rs_names(
        merge_schema=Refused(
            "deltaplane's MERGE keeps the target's schema: add the new columns first with "
            "dt.alter.add_columns([...])",
            only(False),
        ),
        error_on_type_mismatch=TYPE_MISMATCH,
        writer_properties=WRITER_PROPERTIES,
        streamed_exec=EXECUTION,
        max_spill_size=EXECUTION,
        max_temp_directory_size=EXECUTION,
        **COMMIT_OPTIONS,
    )
    def merge(
        self,
        source: Any,
        predicate: str,
        source_alias: str | None = "source",
        target_alias: str | None = "target",
        *,
        strategy: str | None = None,
        rewrite_threshold: float | None = None,
        commit_metadata: Mapping[str, Any] | None = None,
    ) -> MergeBuilder:
        """Start a MERGE of ``source`` (any data ``append`` takes) on ``predicate``; add
        ``when_*`` clauses and call ``execute()``. The aliases default to ``source`` and
        ``target`` (also when ``None``, delta-rs's default, is given)."""
        from deltaplane.engine.commands.merge import MergeBuilder

        return MergeBuilder(
            self,
            source,
            predicate,
            source_alias="source" if source_alias is None else source_alias,
            target_alias="target" if target_alias is None else target_alias,
            strategy=strategy,
            rewrite_threshold=rewrite_threshold,
            commit_metadata=commit_metadata,
        )

    @delta_rs_names(starting_version="start_version", ending_version="end_version")
    def changes(
        self,
        start_version: int | None = None,
        end_version: int | None = None,
        *,
        starting_timestamp: str | int | dt.datetime | None = None,
        ending_timestamp: str | int | dt.datetime | None = None,
        columns: list[str] | None = None,
        predicate: str | Expr | None = None,
        allow_out_of_range: bool = False,
        read_schema: str = "default",
    ) -> pa.Table:
        """The change data feed: changed rows with ``_change_type``, ``_commit_version`` and
        ``_commit_timestamp`` (``delta.enableChangeDataFeed`` must be on), for versions (from 0
        when no start is given, as delta-rs) or for the commits between two timestamps (the
        first at or after ``starting_timestamp``, the last at or before ``ending_timestamp``);
        ``columns`` selects table columns, ``predicate`` (SQL) filters the rows.

        ``starting_version``/``ending_version`` (delta-rs's names) are the same as
        ``start_version``/``end_version``; ``allow_out_of_range`` turns a start after the latest
        version into no rows and an end after it into the latest. ``load_cdf`` takes the same
        arguments and streams the same rows.

        Rows are read under Delta Spark's schema (the end version's on a column-mapped table,
        the latest otherwise; ``read_schema="end"``: always the end version's). A range that
        schema cannot read (a column renamed or dropped, a type widened, a column made NOT NULL
        in between) raises ``ChangeDataSchemaError``, whose ``ranges`` can each be read."""
        return self._change_reader(
            start_version,
            end_version,
            starting_timestamp=starting_timestamp,
            ending_timestamp=ending_timestamp,
            columns=columns,
            predicate=predicate,
            allow_out_of_range=allow_out_of_range,
            read_schema=read_schema,
        ).read_all()

    def _change_reader(
        self, start_version: int | None, end_version: int | None, **options: Any
    ) -> pa.RecordBatchReader:
        """The change data feed as a stream, one commit after another: ``changes()`` reads it
        all, delta-rs's ``load_cdf`` returns it (``commands.changes.change_feed``)."""
        from deltaplane.engine.commands.changes import change_feed

        _check_count(start_version, "start_version")
        _check_count(end_version, "end_version")
        return change_feed(self._store, start_version, end_version, **options)

    @property
    def alter(self) -> TableAlterer:
        """Schema, constraint, property and description changes, one commit each."""
        return TableAlterer(self)

    def changes_between(self, after_version: int, until_version: int | None = None) -> list[CommitChanges]:
        """What each commit after ``after_version`` (up to ``until_version``, default this
        table's version) did to the rows: ``kind`` (append / delete / update / none), the new
        files, rows added and deleted (``deltaplane.engine.tail``). Raises ``MissingLogVersionError`` when
        log cleanup removed commits in the range."""
        from deltaplane.engine.tail import changes_between as tail_changes

        _check_count(after_version + 1, "after_version + 1")
        until = self.version if until_version is None else until_version
        return list(tail_changes(self._store, after_version, until=until))

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Commit information, newest first."""
        from deltaplane.engine.commands.history import load_history

        _check_count(limit, "limit")
        snapshot = self.snapshot
        if snapshot.segment is not None:  # commits read to load the table need no second read
            for f in snapshot.segment.commits:
                info = snapshot.commit_infos.get(f.version)
                if info is not None:
                    self._history_cache.setdefault((f.version, f.size), info)
        if len(self._history_cache) > _CACHED_COMMIT_INFOS:
            self._history_cache.clear()  # bounded: a long-lived object on a long log
        return load_history(self._store, limit=limit, up_to=snapshot.version, cache=self._history_cache)

    def __repr__(self) -> str:
        return f"DeltaTable({self.uri!r}, version={self.version})"


def _check_count(value: Any, what: str) -> None:
    """Versions and limits: non-negative integers (``None`` for "not given")."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{what} must be a non-negative integer, got {value!r}")
    if value < 0:
        raise InvalidArgumentError(f"{what} must be a non-negative integer, got {value}")
