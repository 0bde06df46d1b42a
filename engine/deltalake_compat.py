"""delta-rs's method names on ``DeltaTable``, in one thin layer, so the core has one spelling per
operation.

``DeltaTable`` (``engine/table.py``) spells each operation once: ``refresh``, ``to_arrow``,
``file_uris``, ``checkpoint``, ``cleanup_log``, ``generate_manifest``, ``changes``, ``dt.optimize(...)``.
People bring delta-rs (``deltalake`` 1.6) habits, so this mixin adds delta-rs's names for the same
operations, each a few lines over the core call, and the delta-rs-shaped readers that take its
tuple filters (``files``, ``partitions``, ``to_pyarrow_table``, ``to_pyarrow_dataset``):

| delta-rs | deltaplane |
|---|---|
| ``table_uri`` | ``uri`` |
| ``update_incremental()`` | ``refresh()`` |
| ``load_as_version(v)`` | ``load_version(v)`` or ``DeltaTable(uri, timestamp=...)`` |
| ``to_pyarrow_table(partitions, columns, filters=...)`` | ``to_arrow(columns, filter)`` |
| ``files()`` | ``get_add_actions().column("path")`` (``file_uris()`` for URIs) |
| ``create_checkpoint()`` | ``checkpoint()`` |
| ``cleanup_metadata()`` | ``cleanup_log()`` |
| ``generate("symlink_format_manifest")`` | ``generate_manifest()`` |
| ``load_cdf(starting_version, ...)`` | ``changes(start_version, ...)`` (a table; this streams) |
| ``dt.optimize.compact()``, ``z_order()`` | ``dt.optimize(zorder_by=...)`` |

delta-rs's argument names on the core calls are declared there with ``delta_rs_names``
(``engine/delta_rs.py``), which maps them onto the one signature. Names delta-rs has and
deltaplane does not (``compact_logs``, ...) are ``DeltaRsOnly`` attributes that say what to use.
``tests/engine/test_deltalake_names.py`` holds this layer against ``deltalake`` itself.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.delta_rs import (
    COMMIT_OPTIONS,
    EXECUTION,
    WRITER_PROPERTIES,
    DeltaRsOnly,
    Refused,
    delta_rs_names,
    only,
)
from deltaplane.engine.errors import InvalidArgumentError, UnsupportedOperationError
from deltaplane.engine.expressions.dnf import dnf_to_expr, is_dnf
from deltaplane.engine.expressions.tree import And, Expr

if TYPE_CHECKING:
    from deltaplane.engine.checkpoint_writer import CheckpointInfo
    from deltaplane.engine.commands.log_cleanup import LogCleanupMetrics
    from deltaplane.engine.commands.manifest import ManifestMetrics
    from deltaplane.engine.commands.optimize import OptimizeMetrics, OptimizePlan

OWN_STORAGE = (
    "files are read through the table's own storage; pass storage_options when opening the DeltaTable"
)


class DeltaRsTable:
    """delta-rs's names and readers, mixed into ``DeltaTable``: each calls the core's one spelling."""

    @property
    def table_uri(self) -> str:
        """delta-rs's name for ``uri``: the location as given (a str; a ``PathLike`` made one)."""
        return self.uri

    def update_incremental(self) -> Self:
        """delta-rs's name for ``refresh()``."""
        return self.refresh()

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

    def files(self, partition_filters: list | None = None) -> list[str]:
        """The live data files as the log names them: paths relative to the table's root (an
        absolute URI for a file stored elsewhere), percent-encoded as in the log (the ``path`` of
        ``get_add_actions()``), as delta-rs's ``files()``
        (delta-rs 0.x; 1.x has ``file_uris()`` and ``get_add_actions()``). ``partition_filters``
        are delta-rs's tuple filters on partition columns (``""`` is a null value)."""
        if partition_filters is None:
            return self.get_add_actions().column("path").to_pylist()
        scan = self.scan(None, combined_filter((partition_filters, True)))
        return scan.files.column("path").to_pylist()

    def partitions(
        self, partition_filters: list | None = None, *, file_pruning_predicate: str | list | None = None
    ) -> list[dict[str, str | None]]:
        """The distinct partition values of the live files (those ``file_uris`` keeps for the
        filters), as delta-rs's ``partitions()``: a dict per partition, values as the log writes
        them (``None`` for null)."""
        filter = combined_filter((partition_filters, True), (file_pruning_predicate, False))
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
            raise UnsupportedOperationError(f"to_pyarrow_table(filesystem=...): {OWN_STORAGE}")
        check_columns(columns)
        import pyarrow.compute as pc

        if isinstance(filters, pc.Expression):
            predicate = combined_filter((partitions, True))
            table = self.to_arrow(None, predicate).filter(filters)
            return table if columns is None else table.select(columns)
        return self.to_arrow(columns, combined_filter((filters, False), (partitions, True)))

    def load_as_version(self, version: int | str | dt.datetime) -> Self:
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

    @delta_rs_names(
        filesystem=Refused(OWN_STORAGE),
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

        filter = combined_filter((partitions, True), (file_pruning_predicate, False))
        if filter is None:
            return pyarrow_dataset(self.snapshot)
        return pyarrow_dataset(self.snapshot, self.scan(None, filter).files)

    def generate(self) -> ManifestMetrics:
        """delta-rs's name for ``generate_manifest()``."""
        return self.generate_manifest()

    @delta_rs_names(start_version="starting_version", end_version="ending_version")
    def load_cdf(
        self,
        starting_version: int | None = None,
        ending_version: int | None = None,
        starting_timestamp: str | int | dt.datetime | None = None,
        ending_timestamp: str | int | dt.datetime | None = None,
        columns: list[str] | None = None,
        predicate: str | Expr | None = None,
        allow_out_of_range: bool = False,
        *,
        read_schema: str = "default",
    ) -> pa.RecordBatchReader:
        """``changes()`` as a stream of batches, one commit after another (delta-rs's name and
        argument order; deltaplane's ``start_version``/``end_version`` work too)."""
        return self._change_reader(
            starting_version,
            ending_version,
            starting_timestamp=starting_timestamp,
            ending_timestamp=ending_timestamp,
            columns=columns,
            predicate=predicate,
            allow_out_of_range=allow_out_of_range,
            read_schema=read_schema,
        )


# delta-rs's arguments of dt.optimize.compact() and z_order()
_OPTIMIZE_NAMES = dict(
    max_spill_size=EXECUTION,
    max_temp_directory_size=EXECUTION,
    min_commit_interval=Refused("deltaplane's OPTIMIZE is one commit, however long it runs"),
    writer_properties=WRITER_PROPERTIES,
    **COMMIT_OPTIONS,
)


class TableOptimizer:
    """``dt.optimize``: called, it is ``DeltaTable.optimize``'s compaction (and Z-order with
    ``zorder_by``); ``compact()`` and ``z_order()`` are delta-rs's spellings, returning
    delta-rs's metrics dictionary (``numFilesAdded``, ``numFilesRemoved``, ``filesAdded``,
    ``filesRemoved``, ``partitionsOptimized``, ``numBatches``, ``totalConsideredFiles``,
    ``totalFilesSkipped``, ``preserveInsertionOrder``)."""

    def __init__(self, table: DeltaRsTable):
        self._table = table

    def __call__(self, *args: Any, **kwargs: Any) -> OptimizeMetrics | OptimizePlan:
        return self._table._optimize(*args, **kwargs)

    @delta_rs_names(**_OPTIMIZE_NAMES)
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
        return self._rewrite(None, partition_filters, target_size, max_concurrent_tasks, commit_metadata)

    @delta_rs_names(**_OPTIMIZE_NAMES)
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
        return self._rewrite(
            list(columns), partition_filters, target_size, max_concurrent_tasks, commit_metadata
        )

    def _rewrite(
        self, zorder_by, partition_filters, target_size, max_concurrent_tasks, commit_metadata
    ) -> dict:
        """The table's OPTIMIZE with delta-rs's arguments, answered with delta-rs's metrics."""
        metrics = self._table._optimize(
            target_file_size=target_size,
            **({"zorder_by": zorder_by} if zorder_by else {}),
            filter=combined_filter((partition_filters, True)),
            max_concurrent_bins=max_concurrent_tasks,
            commit_metadata=commit_metadata,
        )
        return _deltalake_optimize_metrics(metrics, zorder=bool(zorder_by))


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


def combined_filter(*parts: tuple[Any, bool]) -> str | Expr | None:
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


def check_columns(columns: Any) -> None:
    if columns is None:
        return
    if isinstance(columns, str) or not isinstance(columns, list | tuple):
        raise InvalidArgumentError(f"columns must be a list of column names, got {columns!r}")
