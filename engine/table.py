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
from deltaplane.engine.delta_rs import (
    COMMIT_OPTIONS,
    EXECUTION,
    TYPE_MISMATCH,
    WRITER_PROPERTIES,
    DeltaRsOnly,
    DeltaRsVersion,
    Refused,
    delta_rs_names,
    only,
)
from deltaplane.engine.errors import (
    DeltaError,
    InvalidArgumentError,
    TableExistsError,
    TableNotFoundError,
    UnsupportedOperationError,
)
from deltaplane.engine.expressions.dnf import dnf_to_expr, is_dnf
from deltaplane.engine.expressions.tree import And, Expr, Literal
from deltaplane.engine.schema import StructType
from deltaplane.engine.snapshot import Snapshot, load_snapshot, load_table_config, update_snapshot
from deltaplane.engine.storage import ObjectStore, open_store, table_location
from deltaplane.engine.table_properties import TableProperties

if TYPE_CHECKING:  # the commands load when first called: opening a table does not pay for them
    from deltaplane.engine.checkpoint_writer import CheckpointInfo
    from deltaplane.engine.commands.features import DropFeatureResult
    from deltaplane.engine.commands.log_cleanup import LogCleanupMetrics, LogCleanupPlan
    from deltaplane.engine.commands.manifest import ManifestMetrics
    from deltaplane.engine.commands.merge import MergeBuilder
    from deltaplane.engine.commands.optimize import OptimizeMetrics, OptimizePlan
    from deltaplane.engine.commands.repair import RepairPlan
    from deltaplane.engine.commands.restore import RestorePlan
    from deltaplane.engine.commands.vacuum import VacuumMetrics, VacuumPlan
    from deltaplane.engine.health import TableHealth
    from deltaplane.engine.scan import Scan
    from deltaplane.engine.tail import CommitChanges
    from deltaplane.engine.transaction import CommitResult

_CACHED_URIS = 100_000
_OWN_STORAGE = (
    "files are read through the table's own storage; pass storage_options when opening the DeltaTable"
)
_CACHED_COMMIT_INFOS = 20_000


class VacuumFiles(list):
    """The files a VACUUM deleted (or would delete), with its ``plan`` and, when it ran, its
    ``metrics`` (Delta Spark's numbers, the START/END commit versions)."""

    def __init__(self, files, *, plan: VacuumPlan, metrics: VacuumMetrics | None = None):
        super().__init__(files)
        self.plan = plan
        self.metrics = metrics


class DeltaTable:
    """A Delta table at one version (the latest unless ``version`` or ``timestamp`` is given).

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
    def table_uri(self) -> str:
        """delta-rs's name for ``uri``: the location as given (a str; a ``PathLike`` made one)."""
        return self.uri

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

    def update_incremental(self) -> DeltaTable:
        """delta-rs's name for ``refresh()``."""
        return self.refresh()

    def transaction_version(self, app_id: str) -> int | None:
        """The latest version an application recorded (``app_id``/``app_version`` of a write,
        delta-rs's ``Transaction``) at this table version; ``None`` if it never did."""
        return self.snapshot.app_transaction_version(app_id)

    # delta-rs names deltaplane has no equivalent for under that name: reading one says what to use.
    compact_logs = DeltaRsOnly(
        "deltaplane writes no log compaction files; checkpoints keep the log short "
        "(dt.checkpoint(), table property delta.checkpointInterval)"
    )
    create_write_transaction = DeltaRsOnly(
        "deltaplane commits files written elsewhere as a staged write: deltaplane.engine.plan_write(), "
        "write_files() and commit_write()"
    )
    deletion_vectors = DeltaRsOnly(
        "get_add_actions() has each file's num_deleted_records; to_arrow() and to_batches() read "
        "the rows with deletion vectors applied"
    )
    table_config = DeltaRsOnly(
        "deltaplane has no loading options to report; dt.properties holds the table's properties"
    )

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
        filter = _combined_filter((filter, False), (partition_filters, True), (file_pruning_predicate, False))
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

    def files(self, partition_filters: list | None = None) -> list[str]:
        """The live data files as the log names them: paths relative to the table's root (an
        absolute URI for a file stored elsewhere), percent-encoded as in the log (the ``path`` of
        ``get_add_actions()``), as delta-rs's ``files()``
        (delta-rs 0.x; 1.x has ``file_uris()`` and ``get_add_actions()``). ``partition_filters``
        are delta-rs's tuple filters on partition columns (``""`` is a null value)."""
        if partition_filters is None:
            return self.get_add_actions().column("path").to_pylist()
        scan = self.scan(None, _combined_filter((partition_filters, True)))
        return scan.files.column("path").to_pylist()

    def partitions(
        self, partition_filters: list | None = None, *, file_pruning_predicate: str | list | None = None
    ) -> list[dict[str, str | None]]:
        """The distinct partition values of the live files (those ``file_uris`` keeps for the
        filters), as delta-rs's ``partitions()``: a dict per partition, values as the log writes
        them (``None`` for null)."""
        filter = _combined_filter((partition_filters, True), (file_pruning_predicate, False))
        snapshot = self.snapshot
        files = snapshot.files if filter is None else self.scan(None, filter).files
        fields = snapshot.partition_fields
        if not fields:
            return []
        values = files.column("partition_values")
        columns = [pc.struct_field(values, f.physical_name).to_pylist() for f in fields]
        names = [f.name for f in fields]
        return [dict(zip(names, row, strict=True)) for row in dict.fromkeys(zip(*columns, strict=True))]

    def to_pyarrow_table(
        self,
        partitions: list | None = None,
        columns: list[str] | None = None,
        filesystem: Any = None,
        filters: Any = None,
    ) -> pa.Table:
        """All rows as one Arrow table, with delta-rs's arguments (the same as ``to_arrow``, which
        takes SQL filters).

        ``filters``: tuple filters in disjunctive normal form (``[("id", ">", 5)]`` is AND,
        ``[[...], [...]]`` is OR; ops ``= == != < <= > >= in``, ``not in``), a SQL string, or a
        ``pyarrow.compute.Expression`` (applied to the rows after reading). ``partitions``:
        tuple filters on partition columns, where ``""`` means a null partition value. Unlike
        delta-rs, tables with deletion vectors and column mapping read too (through the engine,
        not a pyarrow dataset); ``filesystem`` is refused: the table's own storage (its
        ``storage_options``) reads the files."""
        if filesystem is not None:
            raise UnsupportedOperationError(f"to_pyarrow_table(filesystem=...): {_OWN_STORAGE}")
        _check_columns(columns)
        import pyarrow.compute as pc

        if isinstance(filters, pc.Expression):
            predicate = _combined_filter((partitions, True))
            table = self.to_arrow(None, predicate).filter(filters)
            return table if columns is None else table.select(columns)
        return self.to_arrow(columns, _combined_filter((filters, False), (partitions, True)))

    def load_as_version(self, version: int | str | dt.datetime) -> DeltaTable:
        """Time travel this object (delta-rs's name): an int is a version, a string (ISO-8601)
        or a datetime (UTC if naive) a point in time (the latest commit at or before it). Returns
        this object (delta-rs returns ``None``); read-only until ``refresh()``."""
        from deltaplane.engine.log.timestamps import version_at_timestamp

        if isinstance(version, int) and not isinstance(version, bool):
            return self.load_version(version)
        if isinstance(version, str | dt.datetime):
            target = version_at_timestamp(self._store, version, self.snapshot.properties)
            return self.load_version(target)
        raise InvalidArgumentError(
            f"load_as_version takes a version (int), an ISO-8601 string or a datetime, got {version!r}"
        )

    def create_checkpoint(self) -> CheckpointInfo:
        """delta-rs's name for ``checkpoint()``: a checkpoint of the current version."""
        return self.checkpoint()

    def cleanup_metadata(self) -> LogCleanupMetrics:
        """delta-rs's name for ``cleanup_log()``: delete log files older than
        ``delta.logRetentionDuration`` up to the newest expired checkpoint (Delta Spark's rule:
        the cutoff is taken at midnight UTC). Returns the metrics (delta-rs returns ``None``)."""
        return self.cleanup_log()

    @delta_rs_names(filesystem=Refused(_OWN_STORAGE))
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
        import pyarrow.compute as pc

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

    @delta_rs_names(
        filesystem=Refused(_OWN_STORAGE),
        parquet_read_options=Refused("deltaplane's dataset reads Parquet with pyarrow's defaults"),
        schema=Refused("the dataset has the table's schema: cast its batches or tables"),
        as_large_types=Refused("the dataset has the table's types: cast its batches or tables", only(False)),
    )
    def to_pyarrow_dataset(
        self, partitions: list | None = None, *, file_pruning_predicate: str | list | None = None
    ):
        """A ``pyarrow.dataset.Dataset`` of the live files (typed partition columns), for engines
        that push filters into Parquet themselves; ``partitions`` (tuple filters on partition
        columns) and ``file_pruning_predicate`` keep only the files that may match, as
        delta-rs's. Refused (``UnsupportedOperationError``) when files have deletion vectors or
        the table uses column mapping: use the Arrow stream."""
        from deltaplane.engine.interop import pyarrow_dataset

        filter = _combined_filter((partitions, True), (file_pruning_predicate, False))
        if filter is None:
            return pyarrow_dataset(self.snapshot)
        return pyarrow_dataset(self.snapshot, self.scan(None, filter).files)

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
        self._snapshot = update_snapshot(self._snapshot)
        self._stale = False
        return self._snapshot

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
        from deltaplane.engine.commands.dml import execute_update
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
        updates = _assignments(updates, new_values, self.snapshot.schema)
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

    @property
    def optimize(self) -> TableOptimizer:
        """``dt.optimize(...)`` compacts (or Z-orders with ``zorder_by``); delta-rs's
        ``dt.optimize.compact(...)`` and ``dt.optimize.z_order([...])`` work too."""
        return TableOptimizer(self)

    def _optimize(
        self,
        target_file_size: int | None = None,
        zorder_by: list[str] | None = None,
        filter: str | Expr | None = None,
        *,
        dry_run: bool = False,
        min_num_files: int | None = None,
        max_deleted_rows_ratio: float | None = None,
        purge: bool = False,
        max_concurrent_bins: int | None = None,
        commit_metadata: Mapping[str, Any] | None = None,
        full: bool = False,
        min_cube_size: int | None = None,
    ) -> OptimizeMetrics | OptimizePlan:
        """Compact small files (or Z-order by ``zorder_by``) with ``dataChange=false``; on a
        liquid-clustered table, cluster the files not yet clustered instead (``full``: also
        those clustered by older columns; ``min_cube_size``: when a cluster is finished).

        ``filter`` may use partition columns only. Files whose deletion vectors hide more than
        ``max_deleted_rows_ratio`` (default 0.05, Delta Spark's) of their rows are rewritten to
        purge them (all such files with ``purge=True``); a bin needs ``min_num_files`` (default
        2). ``dry_run`` returns the plan and changes nothing.
        """
        from deltaplane.engine.commands.optimize import (
            DEFAULT_MAX_DELETED_ROWS_RATIO,
            DEFAULT_MIN_NUM_FILES,
            execute_optimize,
            plan_optimize,
        )
        from deltaplane.engine.transaction import commit_metadata_scope

        if min_num_files is None:
            min_num_files = DEFAULT_MIN_NUM_FILES
        if max_deleted_rows_ratio is None:
            max_deleted_rows_ratio = DEFAULT_MAX_DELETED_ROWS_RATIO
        read = self._latest_for_write()
        plan = plan_optimize(
            read,
            target_file_size=target_file_size,
            zorder_by=zorder_by,
            filter=filter,
            min_num_files=min_num_files,
            max_deleted_rows_ratio=max_deleted_rows_ratio,
            purge=purge,
            full=full,
            min_cube_size=min_cube_size,
        )
        if dry_run:
            return plan
        with commit_metadata_scope(commit_metadata):
            metrics = execute_optimize(self._store, plan, max_concurrent_bins=max_concurrent_bins)
            if metrics.commit is not None:
                self._after_commit(metrics.commit, read=read, data_write=False)
        return metrics

    def generate(self) -> ManifestMetrics:
        """delta-rs's name for ``generate_manifest()``."""
        return self.generate_manifest()

    def generate_manifest(self) -> ManifestMetrics:
        """Write ``_symlink_format_manifest/`` (one Hive-style manifest per partition listing the
        live Parquet files) for Presto/Trino/Athena; a full regeneration that also deletes stale
        manifests. Refused (``UnsupportedOperationError``) with deletion vectors or column mapping."""
        from deltaplane.engine.commands.manifest import execute_manifest, plan_manifest

        snapshot = self._latest_for_write()
        return execute_manifest(self._store, plan_manifest(self._store, snapshot))

    @delta_rs_names(
        target="version",
        ignore_missing_files=Refused(
            "deltaplane refuses a restore whose files are gone (FilesMissingError, nothing committed); "
            "dt.repair() removes missing files from the current version",
            only(False),
        ),
        protocol_downgrade_allowed=Refused(
            "deltaplane's RESTORE never downgrades the protocol (as Delta Spark's)", only(False)
        ),
        **COMMIT_OPTIONS,
    )
    def restore(
        self,
        version: int | None = None,
        timestamp: str | int | dt.datetime | None = None,
        *,
        dry_run: bool = False,
        commit_metadata: Mapping[str, Any] | None = None,
    ) -> CommitResult | RestorePlan:
        """Make ``version`` (or the version current at ``timestamp``) the current state again,
        as a new RESTORE commit that rewrites no data. Restoring the current version commits
        nothing (``skipped``); ``FilesMissingError`` (nothing committed) if VACUUM removed files
        it needs. ``dry_run`` returns the plan.

        As delta-rs's ``restore(target)``, the first argument may also be a point in time (an
        ISO-8601 string or a datetime)."""
        from deltaplane.engine.commands.restore import (
            execute_restore,
            load_restore_target,
            plan_restore,
            restore_target_version,
        )
        from deltaplane.engine.transaction import commit_metadata_scope

        if isinstance(version, str | dt.datetime):
            if timestamp is not None:
                raise InvalidArgumentError("restore to a version or to a timestamp, not both")
            version, timestamp = None, version
        current = self._latest_for_write()
        target_version = restore_target_version(self._store, current, version=version, timestamp=timestamp)
        target = load_restore_target(self._store, current, target_version)
        plan = plan_restore(self._store, current, target, timestamp=timestamp)
        if dry_run:
            return plan
        with commit_metadata_scope(commit_metadata):
            result = execute_restore(self._store, plan)
            self._after_commit(result, read=current, data_write=False)
        return result

    @delta_rs_names(
        keep_versions=Refused(
            "deltaplane's VACUUM keeps what every version inside the retention window needs: "
            "set retention_hours= (or the table's delta.deletedFileRetentionDuration) to keep more"
        ),
        **COMMIT_OPTIONS,
    )
    def vacuum(
        self,
        retention_hours: float | None = None,
        dry_run: bool = True,
        enforce_retention: bool = True,
        *,
        mode: str | None = None,
        max_workers: int | None = None,
        commit_metadata: Mapping[str, Any] | None = None,
        enforce_retention_duration: bool | None = None,
        full: bool | None = None,
    ) -> VacuumFiles:
        """Delete files no version inside the retention window needs; returns the sorted
        table-relative paths deleted (with ``dry_run``, the default: that would be deleted), as a
        list that also carries ``.plan`` and ``.metrics``.

        ``retention_hours`` defaults to ``delta.deletedFileRetentionDuration`` (7 days); a shorter
        one raises ``RetentionTooShortError`` unless ``enforce_retention=False``. ``mode="full"``
        lists the table (also reclaiming files no commit referenced); ``"lite"`` reads only the log.
        The default is ``"full"`` (delta-rs defaults to lite).

        delta-rs's keywords work too: ``enforce_retention_duration`` is ``enforce_retention``, and
        ``full=True``/``False`` is ``mode="full"``/``"lite"``.
        """
        from deltaplane.engine.commands.vacuum import FULL, LITE, execute_vacuum, plan_vacuum
        from deltaplane.engine.transaction import commit_metadata_scope

        if enforce_retention_duration is not None:
            if enforce_retention is not True:
                raise InvalidArgumentError(
                    "enforce_retention and enforce_retention_duration are the same argument: give one"
                )
            enforce_retention = enforce_retention_duration
        if full is not None:
            if mode is not None:
                raise InvalidArgumentError("give mode or full (delta-rs's spelling), not both")
            mode = FULL if full else LITE
        mode = FULL if mode is None else mode
        if retention_hours is not None and (
            isinstance(retention_hours, bool) or not isinstance(retention_hours, int | float)
        ):
            raise InvalidArgumentError(f"retention_hours must be a number, got {retention_hours!r}")
        snapshot = self._latest_for_write()
        plan = plan_vacuum(
            self._store,
            snapshot,
            retention_hours=retention_hours,
            enforce_retention=enforce_retention,
            mode=mode,
        )
        if dry_run:
            return VacuumFiles(plan.files, plan=plan)
        with commit_metadata_scope(commit_metadata):
            metrics = execute_vacuum(self._store, plan, snapshot=snapshot, max_workers=max_workers)
            if metrics.commit is not None:
                self._after_commit(metrics.commit, read=snapshot, data_write=False)
        return VacuumFiles(metrics.files, plan=plan, metrics=metrics)

    def cleanup_log(
        self, *, dry_run: bool = False, retention_ms: int | None = None, enforce_retention: bool = True
    ) -> LogCleanupMetrics | LogCleanupPlan:
        """Delete log files older than ``delta.logRetentionDuration`` (30 days) up to the newest
        expired checkpoint; every version from that checkpoint on stays readable. ``dry_run``
        returns the plan."""
        from deltaplane.engine.commands.log_cleanup import execute_log_cleanup, plan_log_cleanup

        plan = plan_log_cleanup(
            self._store,
            self._latest_for_write(),
            retention_ms=retention_ms,
            enforce_retention=enforce_retention,
        )
        return plan if dry_run else execute_log_cleanup(self._store, plan)

    def changes(
        self,
        start_version: int | None = None,
        end_version: int | None = None,
        *,
        starting_version: int | None = None,
        ending_version: int | None = None,
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
        return self.load_cdf(
            starting_version=_one_of(start_version, starting_version, "start_version", "starting_version"),
            ending_version=_one_of(end_version, ending_version, "end_version", "ending_version"),
            starting_timestamp=starting_timestamp,
            ending_timestamp=ending_timestamp,
            columns=columns,
            predicate=predicate,
            allow_out_of_range=allow_out_of_range,
            read_schema=read_schema,
        ).read_all()

    def load_cdf(
        self,
        starting_version: int | None = None,
        ending_version: int | None = None,
        *,
        start_version: int | None = None,
        end_version: int | None = None,
        starting_timestamp: str | int | dt.datetime | None = None,
        ending_timestamp: str | int | dt.datetime | None = None,
        columns: list[str] | None = None,
        predicate: str | Expr | None = None,
        allow_out_of_range: bool = False,
        read_schema: str = "default",
    ) -> pa.RecordBatchReader:
        """The change data feed as a stream of batches, one commit after another (delta-rs's
        name); the same arguments and rows as ``changes()``."""
        from deltaplane.engine.commands.changes import iter_changes

        start = _one_of(starting_version, start_version, "starting_version", "start_version")
        end = _one_of(ending_version, end_version, "ending_version", "end_version")
        _check_count(start, "starting_version")
        _check_count(end, "ending_version")
        if start is None and starting_timestamp is None:
            start = 0
        if allow_out_of_range:
            from deltaplane.engine.log.segment import list_log

            latest = list_log(self._store, 0).max_version
            if end is not None and latest is not None and end > latest:
                end = latest
            if start is not None and latest is not None and start > latest:
                return _empty_changes(self, columns)
        reader = iter_changes(
            self._store,
            start,
            end,
            starting_timestamp=starting_timestamp,
            ending_timestamp=ending_timestamp,
            columns=None if predicate is not None else columns,
            read_schema=read_schema,
        )
        if predicate is None:
            return reader
        return _filtered_changes(reader, predicate, columns)

    @delta_rs_names(**COMMIT_OPTIONS)
    def repair(
        self,
        dry_run: bool = True,
        *,
        include_missing_deletion_vectors: bool = False,
        commit_metadata: Mapping[str, Any] | None = None,
    ) -> RepairPlan | CommitResult:
        """Delta Spark's FSCK REPAIR TABLE: find live files whose data file is gone and, unless
        ``dry_run`` (the default, returning the ``RepairPlan``), commit their removal so the
        table reads again. Files whose deletion-vector file is gone are listed, and removed only
        with ``include_missing_deletion_vectors`` (that also drops their undeleted rows)."""
        from deltaplane.engine.commands.repair import execute_repair, plan_repair
        from deltaplane.engine.transaction import commit_metadata_scope

        snapshot = self._latest_for_write()
        plan = plan_repair(
            self._store, snapshot, include_missing_deletion_vectors=include_missing_deletion_vectors
        )
        if dry_run:
            return plan
        with commit_metadata_scope(commit_metadata):
            result = execute_repair(self._store, plan)
            if not result.skipped:
                self._after_commit(result, read=snapshot, data_write=False)
        return result

    @property
    def alter(self) -> TableAlterer:
        """Schema, constraint, property and description changes, one commit each."""
        return TableAlterer(self)

    def health(self, *, small_file_size: int | None = None) -> TableHealth:
        """Files, sizes, small files and deletion-vector ratio per partition, checkpoint lag, and
        the last OPTIMIZE and VACUUM: what the ops view and the auto-optimize policy read."""
        from deltaplane.engine.health import DEFAULT_SMALL_FILE_SIZE, table_health

        return table_health(self.snapshot, small_file_size=small_file_size or DEFAULT_SMALL_FILE_SIZE)

    def checkpoint(self) -> CheckpointInfo:
        """Write a checkpoint of the current version (and update ``_last_checkpoint``)."""
        from deltaplane.engine.checkpoint_writer import write_checkpoint

        snapshot = self.snapshot
        return write_checkpoint(self._store, snapshot.version, snapshot)

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


class TableAlterer:
    """``dt.alter``: ALTER TABLE operations, each a commit on the latest version (as delta-rs's
    ``TableAlterer``). Each takes ``commit_metadata``."""

    def __init__(self, table: DeltaTable):
        self._table = table

    drop_column_not_null = DeltaRsOnly(
        "deltaplane's ALTER does not drop NOT NULL; a column's nullability is set when the table is "
        "created (DeltaTable.create) or a column added (dt.alter.add_columns)"
    )
    set_column_metadata = DeltaRsOnly(
        "deltaplane's ALTER does not change column metadata; give it in the schema's field metadata "
        "to DeltaTable.create (defaults: dt.alter.set_column_default)"
    )

    def _run(self, change, *args, commit_metadata: Mapping[str, Any] | None = None, **kwargs) -> CommitResult:
        from deltaplane.engine.transaction import commit_metadata_scope

        table = self._table
        with commit_metadata_scope(commit_metadata):
            read = table._latest_for_write()
            result = change(table._store, read, *args, **kwargs)
            if not result.skipped:
                table._after_commit(result, read=read, data_write=False)
        return result

    @delta_rs_names(**COMMIT_OPTIONS)
    def add_constraint(
        self, constraints: Mapping[str, str], *, commit_metadata: Mapping[str, Any] | None = None
    ) -> CommitResult:
        """Add CHECK constraints (``{"positive_fare": "fare > 0"}``); every existing row is checked
        first (``ConstraintViolationError``, nothing committed, if one fails)."""
        from deltaplane.engine.commands import alter as alter_commands

        return self._run(alter_commands.add_constraint, constraints, commit_metadata=commit_metadata)

    @delta_rs_names(**COMMIT_OPTIONS)
    def drop_constraint(
        self, name: str, raise_if_not_exists: bool = True, *, commit_metadata: Mapping[str, Any] | None = None
    ) -> CommitResult:
        from deltaplane.engine.commands import alter as alter_commands

        return self._run(
            alter_commands.drop_constraint,
            name,
            raise_if_not_exists=raise_if_not_exists,
            commit_metadata=commit_metadata,
        )

    @delta_rs_names(**COMMIT_OPTIONS)
    def add_columns(
        self,
        fields,
        *,
        first: bool = False,
        after: str | None = None,
        commit_metadata: Mapping[str, Any] | None = None,
    ) -> CommitResult:
        """Add nullable columns (pyarrow fields or a schema) at the end of the schema, or first
        (``first=True``) or after a column (``after="a"``)."""
        from deltaplane.engine.commands import alter as alter_commands

        return self._run(
            alter_commands.add_columns, fields, first=first, after=after, commit_metadata=commit_metadata
        )

    @delta_rs_names(**COMMIT_OPTIONS)
    def rename_column(
        self, column: str, new_name: str, *, commit_metadata: Mapping[str, Any] | None = None
    ) -> CommitResult:
        """``RENAME COLUMN column TO new_name`` (``s.x`` for a nested field): no file is
        rewritten. Needs column mapping; refused while a CHECK constraint or a generated column
        reads the column."""
        from deltaplane.engine.commands import alter as alter_commands

        return self._run(alter_commands.rename_column, column, new_name, commit_metadata=commit_metadata)

    @delta_rs_names(**COMMIT_OPTIONS)
    def drop_columns(
        self, columns: str | list[str], *, commit_metadata: Mapping[str, Any] | None = None
    ) -> CommitResult:
        """``DROP COLUMNS``: the columns leave the schema, their data stays unread in the files
        (VACUUM after a rewrite frees it). Needs column mapping; refused for partition and
        clustering columns, the last column, and columns a constraint or generated column reads."""
        from deltaplane.engine.commands import alter as alter_commands

        return self._run(alter_commands.drop_columns, columns, commit_metadata=commit_metadata)

    drop_column = drop_columns

    @delta_rs_names(**COMMIT_OPTIONS)
    def change_column(
        self,
        column: str,
        *,
        new_type: Any = None,
        nullable: bool | None = None,
        comment: str | None = None,
        first: bool = False,
        after: str | None = None,
        commit_metadata: Mapping[str, Any] | None = None,
    ) -> CommitResult:
        """``ALTER COLUMN`` / ``CHANGE COLUMN`` in one commit: widen the type (``new_type``: a
        pyarrow type or a name like ``'bigint'``; needs ``delta.enableTypeWidening``; no file
        is rewritten), drop NOT NULL (``nullable=True``), set the comment, move the column
        (``first=True`` or ``after='other'``). ``s.x`` names a nested field."""
        from deltaplane.engine.commands import alter as alter_commands

        return self._run(
            alter_commands.change_column,
            column,
            new_type=new_type,
            nullable=nullable,
            comment=comment,
            first=first,
            after=after,
            commit_metadata=commit_metadata,
        )

    def change_column_type(
        self, column: str, new_type: Any, *, commit_metadata: Mapping[str, Any] | None = None
    ) -> CommitResult:
        """``ALTER COLUMN column TYPE new_type`` (a widening; see ``change_column``)."""
        return self.change_column(column, new_type=new_type, commit_metadata=commit_metadata)

    def drop_not_null(self, column: str, *, commit_metadata: Mapping[str, Any] | None = None) -> CommitResult:
        """``ALTER COLUMN column DROP NOT NULL``."""
        return self.change_column(column, nullable=True, commit_metadata=commit_metadata)

    def set_column_comment(
        self, column: str, comment: str, *, commit_metadata: Mapping[str, Any] | None = None
    ) -> CommitResult:
        """``ALTER COLUMN column COMMENT 'comment'``."""
        return self.change_column(column, comment=comment, commit_metadata=commit_metadata)

    def move_column(
        self,
        column: str,
        *,
        first: bool = False,
        after: str | None = None,
        commit_metadata: Mapping[str, Any] | None = None,
    ) -> CommitResult:
        """``ALTER COLUMN column FIRST`` or ``AFTER other`` (a sibling, for a nested field)."""
        return self.change_column(column, first=first, after=after, commit_metadata=commit_metadata)

    @delta_rs_names(**COMMIT_OPTIONS)
    def add_feature(
        self,
        feature: Any,
        allow_protocol_versions_increase: bool = False,
        *,
        commit_metadata: Mapping[str, Any] | None = None,
    ) -> CommitResult:
        """Add table features to the protocol (``ALTER TABLE ... SET TBLPROPERTIES
        ('delta.feature.<name>' = 'supported')``, Delta Spark's ``addFeatureSupport``): one name, a
        list, or delta-rs ``TableFeatures`` members. Nothing is committed when the table has them
        all; raising the protocol's versions needs ``allow_protocol_versions_increase=True``."""
        from deltaplane.engine.commands import features

        return self._run(
            features.add_feature,
            feature,
            allow_protocol_versions_increase=allow_protocol_versions_increase,
            commit_metadata=commit_metadata,
        )

    def drop_feature(
        self,
        feature: str,
        *,
        truncate_history: bool = False,
        commit_metadata: Mapping[str, Any] | None = None,
    ) -> DropFeatureResult:
        """Take ``feature`` out of the protocol (``ALTER TABLE ... DROP FEATURE f [TRUNCATE
        HISTORY]``, Delta Spark's ``dropFeatureSupport``), so older readers and writers can use the
        table again: its traces are removed first (the property unset, deletion vectors purged,
        files with older Parquet types rewritten, row ids unbackfilled, ...), each step a commit
        named as Delta Spark names it, then the protocol is downgraded. For deletionVectors,
        v2Checkpoint, typeWidening, columnMapping and vacuumProtocolCheck the older versions are
        protected by three checkpoints and the ``checkpointProtection`` feature, or
        (``truncate_history``) the
        history must first be free of the feature (a first call removes the traces and raises
        ``FeatureDropError`` ``DELTA_FEATURE_DROP_WAIT_FOR_RETENTION_PERIOD``; call again after
        ``delta.dropFeatureTruncateHistory.retentionDuration``, 24 hours). Every refusal is a
        ``FeatureDropError`` with Delta Spark's error class. Returns every commit it made."""
        from deltaplane.engine.commands.features import drop_feature
        from deltaplane.engine.transaction import commit_metadata_scope

        table = self._table
        with commit_metadata_scope(commit_metadata):
            read = table._latest_for_write()
            try:
                result = drop_feature(table._store, read, feature, truncate_history=truncate_history)
            except BaseException:
                table._stale = True  # a refusal may come after commits (traces removed): reload
                raise
            table._after_commit(result.commit, read=read, data_write=False)
        return result

    @delta_rs_names(
        raise_if_not_exists=Refused("deltaplane always refuses unknown delta.* property names", only(True)),
        **COMMIT_OPTIONS,
    )
    def set_table_properties(
        self, properties: Mapping[str, str], *, commit_metadata: Mapping[str, Any] | None = None
    ) -> CommitResult:
        """Set properties; one that enables a feature (``delta.enableDeletionVectors``,
        ``delta.enableChangeDataFeed``, ``delta.feature.<name>=supported``, ...) upgrades the
        protocol in the same commit. Unknown ``delta.*`` names are refused."""
        from deltaplane.engine.commands import alter as alter_commands

        return self._run(alter_commands.set_table_properties, properties, commit_metadata=commit_metadata)

    @delta_rs_names(**COMMIT_OPTIONS)
    def unset_table_properties(
        self, keys, raise_if_not_exists: bool = True, *, commit_metadata: Mapping[str, Any] | None = None
    ) -> CommitResult:
        from deltaplane.engine.commands import alter as alter_commands

        return self._run(
            alter_commands.unset_table_properties,
            keys,
            raise_if_not_exists=raise_if_not_exists,
            commit_metadata=commit_metadata,
        )

    @delta_rs_names(**COMMIT_OPTIONS)
    def set_column_default(
        self, column: str, default: str, *, commit_metadata: Mapping[str, Any] | None = None
    ) -> CommitResult:
        """``ALTER COLUMN column SET DEFAULT default`` (SQL text, e.g. ``"'unknown'"``); the table
        needs ``delta.feature.allowColumnDefaults=supported``."""
        from deltaplane.engine.commands import alter as alter_commands

        return self._run(alter_commands.set_column_default, column, default, commit_metadata=commit_metadata)

    @delta_rs_names(**COMMIT_OPTIONS)
    def drop_column_default(
        self, column: str, *, commit_metadata: Mapping[str, Any] | None = None
    ) -> CommitResult:
        """``ALTER COLUMN column DROP DEFAULT``."""
        from deltaplane.engine.commands import alter as alter_commands

        return self._run(alter_commands.set_column_default, column, None, commit_metadata=commit_metadata)

    @delta_rs_names(**COMMIT_OPTIONS)
    def set_table_description(
        self, description: str | None, *, commit_metadata: Mapping[str, Any] | None = None
    ) -> CommitResult:
        from deltaplane.engine.commands import alter as alter_commands

        return self._run(alter_commands.set_table_description, description, commit_metadata=commit_metadata)

    @delta_rs_names(**COMMIT_OPTIONS)
    def set_table_name(
        self, name: str | None, *, commit_metadata: Mapping[str, Any] | None = None
    ) -> CommitResult:
        from deltaplane.engine.commands import alter as alter_commands

        return self._run(alter_commands.set_table_name, name, commit_metadata=commit_metadata)

    @delta_rs_names(**COMMIT_OPTIONS)
    def cluster_by(
        self, columns: list[str] | None, *, commit_metadata: Mapping[str, Any] | None = None
    ) -> CommitResult:
        """``ALTER TABLE ... CLUSTER BY``: new liquid clustering columns (``None`` or ``[]``:
        ``CLUSTER BY NONE``). Existing files stay as they are; the next OPTIMIZE clusters by the
        new columns."""
        from deltaplane.engine.commands import alter as alter_commands

        return self._run(alter_commands.cluster_by, columns, commit_metadata=commit_metadata)


class TableOptimizer:
    """``dt.optimize``: called, it is ``DeltaTable.optimize``'s compaction (and Z-order with
    ``zorder_by``); ``compact()`` and ``z_order()`` are delta-rs's spellings, returning
    delta-rs's metrics dictionary (``numFilesAdded``, ``numFilesRemoved``, ``filesAdded``,
    ``filesRemoved``, ``partitionsOptimized``, ``numBatches``, ``totalConsideredFiles``,
    ``totalFilesSkipped``, ``preserveInsertionOrder``)."""

    def __init__(self, table: DeltaTable):
        self._table = table

    def __call__(self, *args: Any, **kwargs: Any) -> OptimizeMetrics | OptimizePlan:
        return self._table._optimize(*args, **kwargs)

    @delta_rs_names(
        max_spill_size=EXECUTION,
        max_temp_directory_size=EXECUTION,
        min_commit_interval=Refused("deltaplane's OPTIMIZE is one commit, however long it runs"),
        writer_properties=WRITER_PROPERTIES,
        **COMMIT_OPTIONS,
    )
    def compact(
        self,
        partition_filters: list | None = None,
        target_size: int | None = None,
        max_concurrent_tasks: int | None = None,
        *,
        commit_metadata: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Bin-pack small files (delta-rs's ``compact``); ``partition_filters`` are tuple
        filters on partition columns (AND), ``target_size`` in bytes."""
        metrics = self._table._optimize(
            target_file_size=target_size,
            filter=_combined_filter((partition_filters, True)),
            max_concurrent_bins=max_concurrent_tasks,
            commit_metadata=commit_metadata,
        )
        return _deltalake_optimize_metrics(metrics, zorder=False)

    @delta_rs_names(
        max_spill_size=EXECUTION,
        max_temp_directory_size=EXECUTION,
        min_commit_interval=Refused("deltaplane's OPTIMIZE is one commit, however long it runs"),
        writer_properties=WRITER_PROPERTIES,
        **COMMIT_OPTIONS,
    )
    def z_order(
        self,
        columns: list[str],
        partition_filters: list | None = None,
        target_size: int | None = None,
        max_concurrent_tasks: int | None = None,
        *,
        commit_metadata: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Rewrite files sorted along a Z-order curve of ``columns`` (delta-rs's ``z_order``)."""
        if isinstance(columns, str) or not isinstance(columns, list | tuple) or not columns:
            raise InvalidArgumentError(f"z_order takes a non-empty list of column names, got {columns!r}")
        metrics = self._table._optimize(
            target_file_size=target_size,
            zorder_by=list(columns),
            filter=_combined_filter((partition_filters, True)),
            max_concurrent_bins=max_concurrent_tasks,
            commit_metadata=commit_metadata,
        )
        return _deltalake_optimize_metrics(metrics, zorder=True)


def _deltalake_optimize_metrics(metrics: OptimizeMetrics, *, zorder: bool) -> dict[str, Any]:
    import json

    def sizes(count: int, total: int) -> str:
        avg = total / count if count else 0.0
        return json.dumps({"avg": avg, "totalFiles": count, "totalSize": total})

    return {
        "numFilesAdded": metrics.num_files_added,
        "numFilesRemoved": metrics.num_files_removed,
        "filesAdded": sizes(metrics.num_files_added, metrics.bytes_added),
        "filesRemoved": sizes(metrics.num_files_removed, metrics.bytes_removed),
        "partitionsOptimized": metrics.partitions_optimized,
        "numBatches": metrics.num_bins,
        "totalConsideredFiles": metrics.total_considered_files,
        "totalFilesSkipped": metrics.total_files_skipped,
        "preserveInsertionOrder": not zorder,
        "version": metrics.version,
    }


def _combined_filter(*parts: tuple[Any, bool]) -> str | Expr | None:
    """One filter from several (SQL, expression or tuple filters; ``True`` marks delta-rs's
    partition-filter form, where ``""`` is a null value), joined with AND."""
    from deltaplane.engine.expressions.parser import parse_predicate

    exprs: list[Expr] = []
    for value, partition_form in parts:
        if value is None:
            continue
        if is_dnf(value):
            exprs.append(dnf_to_expr(value, partition_strings=partition_form))
        elif isinstance(value, str):
            exprs.append(parse_predicate(value))
        elif isinstance(value, Expr):
            exprs.append(value)
        else:
            raise InvalidArgumentError(
                "a filter is a SQL string, an expression, or a list of (column, op, value) tuples; "
                f"got {type(value).__name__}"
            )
    if not exprs:
        return None
    return exprs[0] if len(exprs) == 1 else And(tuple(exprs))


def _check_columns(columns: Any) -> None:
    if columns is None:
        return
    if isinstance(columns, str) or not isinstance(columns, list | tuple):
        raise InvalidArgumentError(f"columns must be a list of column names, got {columns!r}")


def _assignments(
    updates: Mapping[str, str] | None, new_values: Mapping[str, Any] | None, schema: StructType
) -> dict:
    if updates is not None and new_values is not None:
        raise InvalidArgumentError("pass updates (SQL expressions) or new_values (Python values), not both")
    if updates is None and new_values is None:
        raise InvalidArgumentError("update() needs updates (SQL expressions) or new_values (Python values)")
    given = updates if updates is not None else new_values
    if not isinstance(given, Mapping):
        which = "updates" if updates is not None else "new_values"
        raise InvalidArgumentError(f"{which} must be a mapping of column name to value, got {given!r}")
    if updates is not None:
        bad = {k: v for k, v in updates.items() if not isinstance(v, str | Expr)}
        if bad:
            raise InvalidArgumentError(
                f"updates are SQL expressions (strings); for Python values use new_values: {bad!r}"
            )
        return dict(updates)
    from deltaplane.engine.expressions.bind import coerce_literal

    out: dict[str, Any] = {}
    for name, value in new_values.items():
        f = schema.find(name) if isinstance(name, str) else None
        # typed as the column (a value that does not fit stays wider and is refused on write)
        out[name] = Literal(value) if f is None else coerce_literal(value, f.type, f"column {name!r}")
    return out


def _one_of(a: Any, b: Any, a_name: str, b_name: str) -> Any:
    if a is not None and b is not None:
        raise InvalidArgumentError(f"{a_name} and {b_name} are the same argument: give one")
    return a if a is not None else b


def _empty_changes(table: DeltaTable, columns: list[str] | None) -> pa.RecordBatchReader:
    from deltaplane.engine.commands.changes import iter_changes

    latest = DeltaTable(table.uri, storage_options=table.storage_options)
    reader = iter_changes(latest._store, latest.version, latest.version, columns=columns)
    return pa.RecordBatchReader.from_batches(reader.schema, iter(()))


def _filtered_changes(reader: pa.RecordBatchReader, predicate: str | Expr, columns: list[str] | None):
    """The change rows matching ``predicate`` (bound to the change feed's own schema), then
    projected to ``columns`` and the change columns."""
    from deltaplane.engine.expressions.arrow import filter_rows
    from deltaplane.engine.expressions.bind import bind_predicate
    from deltaplane.engine.expressions.parser import parse_predicate
    from deltaplane.engine.schema import from_arrow_schema

    expr = parse_predicate(predicate) if isinstance(predicate, str) else predicate
    bound = bind_predicate(expr, from_arrow_schema(reader.schema))
    schema = reader.schema
    if columns is not None:
        change = ["_change_type", "_commit_version", "_commit_timestamp"]
        unknown = [c for c in columns if c not in schema.names or c in change]
        if unknown:
            raise InvalidArgumentError(f"unknown column {unknown[0]!r} (columns: {', '.join(schema.names)})")
        schema = pa.schema([schema.field(n) for n in [*dict.fromkeys(columns), *change]])

    def batches():
        for batch in reader:
            rows = filter_rows(pa.Table.from_batches([batch]), bound, "the change feed")
            yield from rows.select(schema.names).to_batches()

    return pa.RecordBatchReader.from_batches(schema, batches())


def _check_count(value: Any, what: str) -> None:
    """Versions and limits: non-negative integers (``None`` for "not given")."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{what} must be a non-negative integer, got {value!r}")
    if value < 0:
        raise InvalidArgumentError(f"{what} must be a non-negative integer, got {value}")
