"""``write_table``: one call that writes data to a table, creating it when missing, as
``deltalake.write_deltalake`` does.

Modes: ``"error"`` (the default: ``TableExistsError`` if the table exists), ``"append"``,
``"overwrite"`` (everything, or with ``predicate`` only the matching rows) and ``"ignore"``
(nothing happens if the table exists). A missing table is created from the data in one commit
(``CREATE TABLE AS SELECT``), whatever the mode. Creation-time settings (``partition_by``, ``cluster_by``,
``properties``, ``name``, ``description``) must agree with an existing table rather than being
silently dropped: change those with ``DeltaTable.alter``.

delta-rs's spellings work too (``engine/delta_rs.py``): ``table_or_uri=`` (a ``DeltaTable``
as well as a URI), ``configuration=`` for ``properties``, ``commit_properties=CommitProperties(
custom_metadata=...)`` for ``commit_metadata``; ``write_deltalake`` is this function.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from deltaplane.engine.commands.write import check_creation_settings
from deltaplane.engine.delta_rs import COMMIT_OPTIONS, WRITER_PROPERTIES, delta_rs_names
from deltaplane.engine.errors import InvalidArgumentError, TableExistsError, TableNotFoundError
from deltaplane.engine.storage import table_location
from deltaplane.engine.table import DeltaTable
from deltaplane.engine.transaction import CommitResult, commit_metadata_scope

MODES = ("error", "append", "overwrite", "ignore")


@delta_rs_names(
    table_or_uri="uri",
    configuration="properties",
    writer_properties=WRITER_PROPERTIES,
    **COMMIT_OPTIONS,
)
def write_table(
    uri: str | os.PathLike[str] | DeltaTable,
    data: Any,
    *,
    mode: str = "error",
    partition_by: list[str] | str | None = None,
    predicate: str | None = None,
    dynamic_partitions: bool = False,
    schema_mode: str | None = None,
    properties: Mapping[str, str] | None = None,
    name: str | None = None,
    description: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    commit_metadata: Mapping[str, Any] | None = None,
    app_id: str | None = None,
    app_version: int | None = None,
    target_file_size: int | None = None,
    cluster_by: list[str] | None = None,
) -> CommitResult:
    """Write ``data`` (a pyarrow Table/RecordBatch/RecordBatchReader, a pandas DataFrame, or
    anything with ``__arrow_c_stream__``) to the table at ``uri``; returns the commit's result
    (``skipped`` for ``mode="ignore"`` on an existing table or an already applied
    ``app_id``/``app_version``). ``uri`` may be a ``DeltaTable`` (its location and storage
    options), as delta-rs's ``table_or_uri``.

    Long because of delta-rs's and deltaplane's arguments and their
    documentation: the body (about 60 lines) dispatches on ``mode``.
    """
    if isinstance(uri, DeltaTable):
        storage_options = uri.storage_options if storage_options is None else storage_options
        uri = uri.uri
    uri = table_location(uri)
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if predicate is not None and mode != "overwrite":
        raise InvalidArgumentError(
            f"a predicate replaces matching rows: it needs mode='overwrite', not {mode!r}"
        )
    partition_by = [partition_by] if isinstance(partition_by, str) else list(partition_by or [])
    cluster_by = [cluster_by] if isinstance(cluster_by, str) else list(cluster_by or [])
    with commit_metadata_scope(commit_metadata):
        try:  # opening is the existence check: one listing of the log, not two
            table = DeltaTable._open_to_write(uri, storage_options)
        except TableNotFoundError:
            table = None
        if table is None:
            try:
                return _create(
                    uri,
                    data,
                    partition_by=partition_by,
                    predicate=predicate,
                    properties=properties,
                    name=name,
                    description=description,
                    storage_options=storage_options,
                    app_id=app_id,
                    app_version=app_version,
                    target_file_size=target_file_size,
                    **({"cluster_by": cluster_by} if cluster_by else {}),
                )
            except TableExistsError:
                if mode == "error":
                    raise
                # Another writer created it meanwhile: write to it as to any existing table.
            table = DeltaTable(uri, storage_options=storage_options)
        if mode == "error":
            raise TableExistsError(f"a Delta table already exists at {table.uri} (mode='error')")
        if mode == "ignore":
            return CommitResult(table.version, "WRITE", {}, skipped=True)
        check_creation_settings(
            table.snapshot,
            partition_by=partition_by,
            properties=properties,
            cluster_by=cluster_by,
            name=name,
            description=description,
        )
        if mode == "append":
            return table.append(
                data,
                app_id=app_id,
                app_version=app_version,
                schema_mode=schema_mode,
                target_file_size=target_file_size,
            )
        return table.overwrite(
            data,
            predicate,
            dynamic_partitions=dynamic_partitions,
            app_id=app_id,
            app_version=app_version,
            schema_mode=schema_mode,
            target_file_size=target_file_size,
        )


def _create(uri: str, data: Any, *, partition_by, predicate, storage_options, **settings) -> CommitResult:
    app_id, app_version = settings.pop("app_id"), settings.pop("app_version")
    target_file_size = settings.pop("target_file_size")
    if predicate is None:
        _, result = DeltaTable.create_with_result(
            uri,
            partition_by=partition_by,
            storage_options=storage_options,
            data=data,
            app_id=app_id,
            app_version=app_version,
            target_file_size=target_file_size,
            **settings,
        )
        return result
    # replaceWhere on a new table: create it empty (schema from the data), then overwrite, so
    # the rows are checked against the predicate as for an existing table.
    from deltaplane.engine.inputs import as_reader

    reader = as_reader(data)
    table = DeltaTable.create(
        uri, reader.schema, partition_by=partition_by, storage_options=storage_options, **settings
    )
    return table.overwrite(
        reader, predicate, app_id=app_id, app_version=app_version, target_file_size=target_file_size
    )


write_deltalake = write_table  # delta-rs's name
