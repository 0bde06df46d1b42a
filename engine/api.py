"""The engine's declared API: every name the engine promises to the layers above it.

The provider (``deltaplane.operators``), the Spark jobs (``deltaplane.spark_jobs``), the
devstack and a user's own script import these names from ``deltaplane.engine`` and nothing from
the modules below it; an import-linter contract (``pyproject.toml``, "Above the engine, only its
declared API") fails ``make lint`` on any other engine import there. A name here is a promise:
changing its signature or meaning is an API change, documented in ``docs/engine-api.md``, which
lists every group below (a test checks that it does). What is not here may change freely.

Each group is ``(title, module, names)`` (names written as one space-separated string): the names
are defined in ``deltaplane.engine.<module>``
and loaded on first use, so ``from deltaplane.engine import parse_size`` does not import Arrow and
a DAG file that names one small part parses fast.
"""

from __future__ import annotations

GROUPS: tuple[tuple[str, str, tuple[str, ...]], ...] = tuple(
    (title, module, tuple(names.split()))
    for title, module, names in (
        # Tables, snapshots and one-call writes
        ("Tables", "table", "DeltaTable"),
        ("Tables", "alterer", "TableAlterer"),
        ("Tables", "deltalake_compat", "TableOptimizer"),
        ("Tables", "write_or_create", "write_table write_deltalake"),
        (
            "Tables",
            "transaction",
            "CommitResult app_transaction_scope commit_metadata_scope current_app_transaction",
        ),
        ("Snapshots", "snapshot", "Snapshot load_snapshot load_table_config files_snapshot"),
        ("Snapshots", "portable", "PortableSnapshot"),
        ("Snapshots", "log.segment", "build_log_segment list_log"),
        ("Snapshots", "actions", "Add Remove Metadata Protocol CommitInfo DeletionVectorDescriptor"),
        # Schemas, properties and features
        (
            "Schemas",
            "schema",
            "DataType PrimitiveType DecimalType ArrayType MapType StructField "
            "StructType GeoType parse_schema from_arrow_schema to_arrow_schema "
            "to_arrow_type iter_fields iter_types",
        ),
        ("Schemas", "schema_changes", "read_incompatibility"),
        ("Schemas", "table_features", "FEATURES reader_features writer_features"),
        ("Schemas", "commands.features", "feature_names"),
        ("Schemas", "row_tracking", "materialized_columns"),
        ("Schemas", "enforcement", "check_constraints conform_table table_constraints"),
        # Expressions
        ("Expressions", "expressions.parser", "parse_predicate"),
        ("Expressions", "expressions.ddl", "parse_ddl"),
        ("Expressions", "expressions.tree", "Expr columns"),
        ("Expressions", "expressions.fold", "constant_truth"),
        # Reading files (what a data source reading the files itself needs)
        ("Reading files", "scan", "Scan read_file_deletion_vector typed_partition_column"),
        ("Reading files", "scan", "stored_deletion_vector StoredDeletionVector"),
        ("Reading files", "log.replay", "canonical_paths"),
        ("Reading files", "partitions", "HIVE_NULL"),
        ("Reading files", "column_values", "ColumnValues"),
        # Staged writes: write the files in one place, commit them in another
        (
            "Staged writes",
            "commands.staged",
            "WriteSpec StagedWrite plan_write stage_write write_files commit_write "
            "declared_schema release_hold_of",
        ),
        (
            "Staged writes",
            "commands.staged_manifest",
            "write_manifest read_manifest manifest_landing manifest_recipe",
        ),
        ("Staged writes", "holds", "hold_is_live list_holds"),
        ("Staged writes", "work", "WorkKey file_identities local_file_identities find_applied"),
        ("Staged writes", "watermarks", "read_watermark write_watermark"),
        # Landing batches
        (
            "Landing batches",
            "quarantine",
            "QUARANTINE_DIR REJECTION batch_name quarantine_location read_object "
            "read_rejection list_rejections move_to_quarantine quarantine_staged "
            "processed_path move_files claimed_path home_path claim_files "
            "finish_claimed release_claimed release_staged_hold",
        ),
        (
            "Landing batches",
            "landing",
            "LANDING_FORMATS StageRecipe LandingFile LandingRefused landing_key stage_landing_files",
        ),
        (
            "Quality gates",
            "quality",
            "validate_staged validate_rows summarize describe_failure expectation_class snake_name "
            "import_great_expectations ROW_LEVEL_EXPECTATIONS "
            "QUALITY_MAX_ROWS QUALITY_MAX_BYTES QUALITY_CHUNK_ROWS",
        ),
        # Row-level changes and compaction run elsewhere (the Spark jobs)
        ("Row-level plans", "commands.dml", "RowLevelPlan plan_row_level commit_row_level change_files"),
        (
            "Compaction plans",
            "commands.optimize",
            "OptimizePlan OptimizeBin BinTask plan_optimize bin_tasks run_bin_task "
            "write_rows_for_bin execute_optimize commit_optimize optimize_metrics",
        ),
        ("Compaction plans", "commands.zorder", "bits_per_column interleave scale_ranks"),
        ("Compaction plans", "commands.manifest", "manifest_lag"),
        (
            "Plans as files",
            "plans",
            "PlanKind OPTIMIZE_PLAN ROW_LEVEL_PLAN PlanError plan_kind plan_to_json plan_from_json save_plan "
            "load_plan files_at",
        ),
        # Following a table's log
        (
            "Following the log",
            "tail",
            "IncrementalScan CommitChanges FILE_COLUMNS commit_changes "
            "describe_change find_new_commits matching partitions_of "
            "recent_row_changes start_after",
        ),
        ("Following the log", "commit_filter", "CommitFilter FILTER_ARGS DEFAULT_START LATEST check_start"),
        ("Following the log", "consume", "consume_appends"),
        # Health and maintenance
        (
            "Maintenance",
            "maintenance_plan",
            "MaintenancePolicy Decision KINDS DEFAULT_KINDS REWRITE_KINDS rank",
        ),
        ("Maintenance", "maintenance_inputs", "look decide_table plan_table"),
        ("Maintenance", "health_tracker", "HealthTracker health_history"),
        ("Maintenance", "auto_optimize", "AutoOptimizePolicy decide_auto_optimize"),
        # Storage
        ("Storage", "storage", "open_store resolve_location"),
        ("Storage", "storage.base", "ObjectStore"),
        ("Storage", "storage.s3", "S3Store"),
        ("Storage", "units", "parse_size"),
        # Errors
        (
            "Errors",
            "errors",
            "DeltaError INPUT_ERRORS StorageError ObjectNotFoundError "
            "ObjectExistsError UnsupportedStorageError BucketNotFoundError "
            "InvalidArgumentError TableNotFoundError TableExistsError "
            "StagedSchemaConflictError TableReadOnlyError ProtocolError "
            "CorruptLogError MissingLogVersionError CorruptCheckpointError "
            "VersionNotFoundError TimestampOutOfRangeError InvalidTimestampError "
            "CorruptDeletionVectorError DataFileError ChangeDataNotRecordedError "
            "ChangeDataSchemaError FeatureDropError RetentionTooShortError "
            "FilesMissingError UnsupportedOperationError SchemaError "
            "SchemaMismatchError TableSettingsMismatchError "
            "ConstraintViolationError InvalidPredicateError CommitConflictError "
            "ConcurrentAppendError ConcurrentDeleteReadError "
            "ConcurrentDeleteDeleteError MetadataChangedError ProtocolChangedError "
            "ConcurrentTransactionError DomainMetadataConflictError "
            "ConcurrentVacuumError FeatureDropConflictError "
            "CommitOutcomeUnknownError",
        ),
        ("Version", "version", "ENGINE_VERSION"),
    )
)

#: name -> the module (below ``deltaplane.engine``) that defines it.
EXPORTS: dict[str, str] = {name: module for _, module, names in GROUPS for name in names}
