"""The exception hierarchy of the engine.

Every error the engine raises on purpose derives from :class:`DeltaError`, so callers (Airflow
operators, the CLI) can tell "the table or the request is wrong" from a bug. Messages name the
table, the version and the file involved, because the person reading them is usually looking at
a failed scheduled task with nothing else to go on.

Commit-conflict classes carry Delta Spark's names so that people who know Delta Spark recognise
them; the conflict rules themselves live in ``conflicts.py``.
"""

from __future__ import annotations


class DeltaError(Exception):
    """Root of every error raised on purpose by deltaplane."""


# --- storage ---------------------------------------------------------------------------------


class StorageError(DeltaError):
    """An object store failed in a way that is not a missing or existing object."""


class ObjectNotFoundError(StorageError, FileNotFoundError):
    """The key does not exist in the object store."""


class ObjectExistsError(StorageError, FileExistsError):
    """A put-if-absent found the key already present (another writer won)."""


class UnsupportedStorageError(StorageError):
    """No object store implementation for this URI scheme."""


# --- arguments -------------------------------------------------------------------------------


class InvalidArgumentError(DeltaError, ValueError):
    """An argument to an engine call is out of range or inconsistent (a negative retention, a
    version and a timestamp together, an unknown mode); nothing was read or written."""


# --- table and log ---------------------------------------------------------------------------


class TableNotFoundError(DeltaError):
    """There is no Delta table at the URI (no ``_delta_log`` or no commits in it)."""


class BucketNotFoundError(StorageError, TableNotFoundError):
    """The bucket a table URI names does not exist (so neither does the table)."""


class TableExistsError(DeltaError):
    """Creating a table where one already exists."""


class StagedSchemaConflictError(TableExistsError):
    """A staged write planned to create its table lost the race to another creator whose table
    its files do not fit (other columns or types, partitioning, layout): it must be staged again
    against the table."""


class TableReadOnlyError(DeltaError):
    """A write the table's properties forbid (for example a delete on ``delta.appendOnly``)."""


class ProtocolError(DeltaError):
    """The table needs a protocol version or a table feature this engine does not support."""

    def __init__(self, message: str, feature: str | None = None):
        super().__init__(message)
        self.feature = feature


class _FileError(DeltaError):
    """An error about one file of the table; ``path`` names it (None where no one file is at fault)."""

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path


class CorruptLogError(_FileError):
    """The transaction log is unreadable or inconsistent; ``path`` names the offending file."""


class MissingLogVersionError(CorruptLogError):
    """A commit needed to reconstruct a version is absent (a gap in the log)."""


class CorruptCheckpointError(CorruptLogError):
    """A checkpoint file cannot be read (missing, truncated, not Parquet)."""


class VersionNotFoundError(DeltaError):
    """Time travel to a version that does not exist or is no longer reconstructable."""


class TimestampOutOfRangeError(DeltaError):
    """Time travel to a timestamp before the earliest or after the latest commit."""


class InvalidTimestampError(DeltaError, ValueError):
    """A timestamp (for time travel, RESTORE or the change feed) that cannot be understood."""


class CorruptDeletionVectorError(_FileError):
    """A deletion vector failed its size, magic or CRC checks; ``path`` names the file."""


class DataFileError(_FileError):
    """A data file referenced by the log is missing or unreadable; ``path`` names it."""


class ChangeDataNotRecordedError(DeltaError):
    """The change data feed was not enabled at ``version``, inside the range asked for (Delta
    Spark's ``DELTA_MISSING_CHANGE_DATA``)."""

    error_class = "DELTA_MISSING_CHANGE_DATA"

    def __init__(self, message: str, version: int):
        super().__init__(message)
        self.version = version


class ChangeDataSchemaError(DeltaError):
    """A change data feed range that one schema cannot read (a column renamed or dropped, a type
    widened, a column made NOT NULL): reading it would relabel or mistype rows. ``change_version``
    is the version whose schema the read schema (``read_version``'s) cannot read (Delta Spark's
    ``DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_SCHEMA_CHANGE``, or ``..._DATA_SCHEMA`` when it cannot
    read the start: ``error_class`` says which). ``ranges`` split ``start..end`` into pieces that
    each read under their own end version's schema (``read_schema="end"``)."""

    def __init__(
        self,
        message: str,
        *,
        start: int,
        end: int,
        read_version: int,
        change_version: int,
        error_class: str,
        ranges: list[tuple[int, int]],
    ):
        super().__init__(message)
        self.start, self.end = start, end
        self.read_version = read_version
        self.change_version = change_version
        self.error_class = error_class
        self.ranges = ranges


# --- maintenance -----------------------------------------------------------------------------


class FeatureDropError(DeltaError):
    """DROP FEATURE refused or stopped part way (``error_class`` is Delta Spark's: the feature
    is not in the protocol, cannot be dropped, another feature needs it, or its traces are still
    in the table's history). Whatever commits came before the refusal (traces removed) stay, as
    in Delta Spark: running the drop again continues from there."""

    def __init__(self, message: str, *, error_class: str, feature: str):
        super().__init__(message)
        self.error_class = error_class
        self.feature = feature


class RetentionTooShortError(DeltaError):
    """A VACUUM (or log cleanup) retention shorter than the table's, without an explicit override."""


class FilesMissingError(DeltaError):
    """Files a command needs (to RESTORE a version, say) are gone, usually removed by VACUUM;
    ``paths`` lists them."""

    def __init__(self, message: str, paths: list[str] | None = None):
        super().__init__(message)
        self.paths = list(paths or [])


class UnsupportedOperationError(DeltaError):
    """The table's configuration rules the operation out (a symlink manifest on a table with
    deletion vectors, say); the message names the property or feature."""


# --- schema and expressions ------------------------------------------------------------------


class SchemaError(DeltaError):
    """A schema string or type that cannot be understood or converted."""


class SchemaMismatchError(SchemaError):
    """Data does not match the table schema (names the column, expected and actual types)."""


class TableSettingsMismatchError(SchemaMismatchError, InvalidArgumentError):
    """What a write declares for creating its table (partitioning, properties, clustering
    columns, a declared schema) disagrees with the table that exists: the caller's arguments are
    at fault, not the data."""


class ConstraintViolationError(DeltaError):
    """Rows violate a NOT NULL, CHECK constraint or invariant; nothing was committed."""


class InvalidPredicateError(DeltaError):
    """A filter or predicate string that cannot be parsed or bound to the table schema."""


# --- commits ---------------------------------------------------------------------------------


class CommitConflictError(DeltaError):
    """A concurrent commit conflicts with this transaction; it was not committed."""


class ConcurrentAppendError(CommitConflictError):
    """Files were added that this transaction should have read (Delta Spark ConcurrentAppend)."""


class ConcurrentDeleteReadError(CommitConflictError):
    """A file this transaction read was removed concurrently."""


class ConcurrentDeleteDeleteError(CommitConflictError):
    """A file this transaction removes was removed concurrently. ``rearranged``: the winner only
    rearranged those files without changing their rows (OPTIMIZE, a deletion-vector purge,
    auto-compaction: ``dataChange=false``), so the same change planned again on the latest
    version means the same thing (``transaction.rerun_past_rearrangements``)."""

    def __init__(self, message: str, *, rearranged: bool = False):
        super().__init__(message)
        self.rearranged = rearranged


class MetadataChangedError(CommitConflictError):
    """The table metadata changed concurrently."""


class ProtocolChangedError(CommitConflictError):
    """The table protocol changed concurrently."""


class ConcurrentTransactionError(CommitConflictError):
    """An application transaction id this transaction depends on was updated concurrently."""


class DomainMetadataConflictError(CommitConflictError):
    """Both transactions changed the same metadata domain."""


class ConcurrentVacuumError(CommitConflictError):
    """A VACUUM that committed while this transaction was open deleted files the transaction
    wrote (it outlived the retention period); committing would have made the table unreadable.
    ``paths`` lists the missing files. Nothing was committed; run the write again."""

    def __init__(self, message: str, paths: list[str] | None = None):
        super().__init__(message)
        self.paths = list(paths or [])


class FeatureDropConflictError(CommitConflictError):
    """A commit made after DROP FEATURE removed a feature's traces used it again (Delta Spark's
    ``DELTA_FEATURE_DROP_CONFLICT_REVALIDATION_FAIL``): the drop is worth running again."""

    error_class = "DELTA_FEATURE_DROP_CONFLICT_REVALIDATION_FAIL"

    def __init__(self, message: str, *, feature: str):
        super().__init__(message)
        self.feature = feature


class CommitOutcomeUnknownError(DeltaError):
    """The commit request failed in a way that leaves its outcome unknown even after checking."""


# The errors that are the input's fault (data, schema, constraint, predicate, arguments, what the
# table's configuration rules out): the same input fails the same way, so retrying cannot help.
# The Spark jobs exit with their input code for these, and the Airflow operators fail without
# retries.
INPUT_ERRORS: tuple[type[DeltaError], ...] = (
    InvalidArgumentError,
    SchemaError,
    ConstraintViolationError,
    InvalidPredicateError,
    InvalidTimestampError,
    TableExistsError,
    TableReadOnlyError,
    RetentionTooShortError,
    UnsupportedOperationError,
    FeatureDropError,
)
