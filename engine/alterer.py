"""``dt.alter``: ALTER TABLE on a ``DeltaTable``, each operation one commit on the latest version."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from deltaplane.engine.delta_rs import (
    COMMIT_OPTIONS,
    DeltaRsOnly,
    Refused,
    delta_rs_names,
    only,
)

if TYPE_CHECKING:
    from deltaplane.engine.commands.features import DropFeatureResult
    from deltaplane.engine.transaction import CommitResult


class TableAlterer:
    """``dt.alter``: ALTER TABLE operations, each a commit on the latest version (as delta-rs's
    ``TableAlterer``). Each takes ``commit_metadata``."""

    def __init__(self, table: Any):
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
