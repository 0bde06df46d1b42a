"""DROP FEATURE against Delta Spark 4.4: on copies of the same Delta Spark-written table, each
engine drops the same feature; the commits (operations and parameters, as Delta Spark's DESCRIBE
HISTORY shows them), the protocol, the properties, the schema and the checkpoints must agree, each
engine must keep reading and writing the other's result, and refusals must carry the same error
class. Expected values are Delta Spark's answers."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.errors import FeatureDropError
from tests.deltaspark.client import DeltaSparkError
from tests.deltaspark.compare import sorted_rows

SETUPS = {
    "deletionVectors": [
        "CREATE TABLE {t} (a INT, b STRING) USING delta TBLPROPERTIES ('delta.enableDeletionVectors'='true')",
        "INSERT INTO {t} SELECT id, CAST(id AS STRING) FROM range(0, 400)",
        "DELETE FROM {t} WHERE a % 10 = 0",
        "DELETE FROM {t} WHERE a % 10 = 1",  # replaces the first deletion vectors: DV tombstones
    ],
    "v2Checkpoint": [
        "CREATE TABLE {t} (a INT) USING delta TBLPROPERTIES ('delta.checkpointPolicy'='v2')",
        "INSERT INTO {t} VALUES (1)",
    ],
    "typeWidening": [
        "CREATE TABLE {t} (a SHORT, b INT) USING delta TBLPROPERTIES ('delta.enableTypeWidening'='true')",
        "INSERT INTO {t} VALUES (1, 2)",
        "ALTER TABLE {t} ALTER COLUMN a TYPE INT",
        "INSERT INTO {t} VALUES (70000, 3)",
    ],
    "inCommitTimestamp": [
        "CREATE TABLE {t} (a INT) USING delta TBLPROPERTIES ('delta.enableInCommitTimestamps'='true')",
        "INSERT INTO {t} VALUES (1)",
    ],
    "rowTracking": [
        "CREATE TABLE {t} (a INT) USING delta TBLPROPERTIES ('delta.enableRowTracking'='true')",
        "INSERT INTO {t} VALUES (1), (2)",
        "INSERT INTO {t} VALUES (3)",
    ],
    "checkConstraints": [
        "CREATE TABLE {t} (a INT) USING delta",
        "ALTER TABLE {t} ADD CONSTRAINT c CHECK (a > 0)",
        "INSERT INTO {t} VALUES (1)",
        "ALTER TABLE {t} DROP CONSTRAINT c",
    ],
    "vacuumProtocolCheck": [
        "CREATE TABLE {t} (a INT) USING delta "
        "TBLPROPERTIES ('delta.feature.vacuumProtocolCheck'='supported')",
        "INSERT INTO {t} VALUES (1)",
    ],
    "columnMapping": [
        "CREATE TABLE {t} (a INT, b STRING, s STRUCT<x: INT>, p STRING) USING delta PARTITIONED BY (p) "
        "TBLPROPERTIES ('delta.columnMapping.mode'='name')",
        "INSERT INTO {t} VALUES (1, 'x', named_struct('x', 1), 'one'), (2, 'y', named_struct('x', 2), 'two')",
        "ALTER TABLE {t} RENAME COLUMN b TO c",
        "ALTER TABLE {t} RENAME COLUMN s.x TO y",
    ],
    "domainMetadata": [
        "CREATE TABLE {t} (a INT) USING delta TBLPROPERTIES ('delta.feature.domainMetadata'='supported')",
        "INSERT INTO {t} VALUES (1)",
    ],
}


def table(path) -> str:
    return f"delta.`{path}`"


def history(spark, path, after: int) -> list[tuple[str, dict]]:
    rows = spark.sql(f"DESCRIBE HISTORY {table(path)}")
    out = [(r["version"], r["operation"], dict(r["operationParameters"] or {})) for r in rows]
    return [(op, params) for v, op, params in sorted(out, key=lambda r: r[0]) if v > after]


def log_state(path) -> dict:
    """The protocol, properties and schema of the latest version, from the log as written."""
    protocol = metadata = None
    for f in sorted(Path(path, "_delta_log").glob("*.json")):
        for line in f.read_text().splitlines():
            action = json.loads(line)
            protocol = action.get("protocol", protocol)
            metadata = action.get("metaData", metadata)
    protocol = {k: sorted(v) if isinstance(v, list) else v for k, v in protocol.items()}
    return {
        "protocol": protocol,
        "configuration": metadata["configuration"],
        "schema": metadata["schemaString"],
    }


def log_files(path) -> list[str]:
    """Commits and checkpoints (not Delta Spark's .crc files, which deltaplane does not write)."""
    return sorted(p.name for p in Path(path, "_delta_log").glob("0*") if not p.name.endswith(".crc"))


def checkpoints(path) -> list[int]:
    return sorted(int(p.name[:20]) for p in Path(path, "_delta_log").glob("*.checkpoint*.parquet"))


def tombstone_paths(path, operation: str) -> set[str]:
    out = set()
    for f in Path(path, "_delta_log").glob("*.json"):
        actions = [json.loads(line) for line in f.read_text().splitlines()]
        if any(a.get("commitInfo", {}).get("operation") == operation for a in actions):
            out |= {a["remove"]["path"] for a in actions if "remove" in a}
    return out


def spark_error_class(e: DeltaSparkError) -> str:
    found = re.search(r"\[([A-Z_]+)\]", e.message)
    return found.group(1) if found else e.error_class


def age_log(path, days: float) -> None:
    """Every log file ``days`` older, a second apart in version order (as files written one after
    the other are: Delta Spark's cleanup adjusts equal times, which would keep them)."""
    start = time.time() - days * 86_400
    files = sorted((p for p in Path(path, "_delta_log").iterdir() if p.is_file()), key=lambda p: p.name)
    for i, p in enumerate(files):
        os.utime(p, (start + i, start + i))


def copies(spark, tmp_path, name: str, setup: list[str]) -> tuple[str, str, int]:
    """Two copies of the table Delta Spark builds with ``setup`` (built once per setup)."""
    pristine = tmp_path / "pristine" / str(abs(hash(tuple(setup))))
    if not pristine.exists():
        for sql in setup:
            spark.sql(sql.format(t=table(pristine)))
    ours, theirs = str(tmp_path / f"{name}-ours"), str(tmp_path / f"{name}-theirs")
    shutil.copytree(pristine, ours)
    shutil.copytree(pristine, theirs)
    return ours, theirs, DeltaTable(ours).version()


def drop_sql(path: str, feature: str, truncate: bool) -> str:
    return f"ALTER TABLE {table(path)} DROP FEATURE {feature}{' TRUNCATE HISTORY' if truncate else ''}"


def assert_both_refuse(spark, ours: str, theirs: str, feature: str, truncate: bool) -> None:
    """Dropping ``feature`` (quoted as Delta Spark's SQL wants it) is refused by both engines,
    with the same error class."""
    with pytest.raises(DeltaSparkError) as spark_error:
        spark.sql(drop_sql(theirs, feature, truncate))
    with pytest.raises(FeatureDropError) as ours_error:
        DeltaTable(ours).alter.drop_feature(feature.strip("`"), truncate_history=truncate)
    assert ours_error.value.error_class == spark_error_class(spark_error.value), feature


def drop_once_history_is_old(spark, ours: str, theirs: str, feature: str) -> None:
    """Both logs aged two days, each engine drops ``feature`` with TRUNCATE HISTORY: the same
    commits after it and the same log state."""
    for path in (ours, theirs):
        age_log(path, 2)
    middle = DeltaTable(ours).version()
    spark.sql(drop_sql(theirs, feature, True))
    DeltaTable(ours).alter.drop_feature(feature, truncate_history=True)
    assert history(spark, ours, middle) == history(spark, theirs, middle)
    assert log_state(ours) == log_state(theirs)


def test_each_removable_feature_is_dropped_as_delta_spark_drops_it(delta_spark, tmp_path):
    for feature, setup in SETUPS.items():
        ours, theirs, start = copies(delta_spark, tmp_path, feature, setup)
        delta_spark.sql(drop_sql(theirs, feature, False))
        DeltaTable(ours).alter.drop_feature(feature)
        assert history(delta_spark, ours, start) == history(delta_spark, theirs, start), feature
        assert log_state(ours) == log_state(theirs), feature
        assert checkpoints(ours) == checkpoints(theirs), feature
        if feature == "deletionVectors":
            tombstones = tombstone_paths(ours, "Deletion Vector Tombstones")
            assert tombstones and tombstones == tombstone_paths(theirs, "Deletion Vector Tombstones")
        expected = sorted_rows(delta_spark.sql(f"SELECT * FROM {table(theirs)}"))
        assert sorted_rows(delta_spark.sql(f"SELECT * FROM {table(ours)}")) == expected, feature
        # each engine writes on the other's result, and reads it back
        delta_spark.sql(f"INSERT INTO {table(ours)} SELECT * FROM {table(ours)} ORDER BY a LIMIT 1")
        DeltaTable(theirs).append(DeltaTable(theirs).to_arrow().sort_by("a").slice(0, 1))
        assert sorted_rows(delta_spark.sql(f"SELECT * FROM {table(ours)}")) == sorted_rows(
            delta_spark.sql(f"SELECT * FROM {table(theirs)}")
        ), feature


def test_refusals_and_history_truncation_agree_with_delta_spark(delta_spark, tmp_path):
    # refusals: the same error class, nothing committed by either
    refusals = [
        (SETUPS["checkConstraints"][:3], "checkConstraints", False),  # a constraint is still there
        (SETUPS["checkConstraints"], "appendOnly", False),
        (SETUPS["checkConstraints"], "deletionVectors", False),
        (SETUPS["checkConstraints"], "`delta.enableChangeDataFeed`", False),
        (SETUPS["checkConstraints"], "noSuchFeature", False),
        (SETUPS["inCommitTimestamp"], "inCommitTimestamp", True),
        (SETUPS["rowTracking"], "domainMetadata", False),
    ]
    for i, (setup, feature, truncate) in enumerate(refusals):
        ours, theirs, start = copies(delta_spark, tmp_path, f"refusal{i}", setup)
        assert_both_refuse(delta_spark, ours, theirs, feature, truncate)
        assert DeltaTable(ours).version() == DeltaTable(theirs).version() == start

    # TRUNCATE HISTORY: the first call removes the traces and waits; once the history is older
    # than 24 hours the second drops the feature and the history before the last checkpoint
    ours, theirs, start = copies(delta_spark, tmp_path, "truncate", SETUPS["deletionVectors"])
    assert_both_refuse(delta_spark, ours, theirs, "deletionVectors", True)
    assert history(delta_spark, ours, start) == history(delta_spark, theirs, start)
    drop_once_history_is_old(delta_spark, ours, theirs, "deletionVectors")
    assert log_files(ours) == log_files(theirs)  # the same history truncated

    # checkpointProtection: left by a drop, removed only with its history
    ours, theirs, start = copies(delta_spark, tmp_path, "protection", SETUPS["vacuumProtocolCheck"])
    delta_spark.sql(drop_sql(ours, "vacuumProtocolCheck", False))
    shutil.rmtree(theirs)
    shutil.copytree(ours, theirs)
    for truncate in (False, True):  # without truncation: refused; with it, too early: waits
        assert_both_refuse(delta_spark, ours, theirs, "checkpointProtection", truncate)
    drop_once_history_is_old(delta_spark, ours, theirs, "checkpointProtection")
    delta_spark.sql(f"INSERT INTO {table(ours)} VALUES (2)")
    assert sorted_rows(delta_spark.sql(f"SELECT * FROM {table(ours)}")) == [{"a": 1}, {"a": 2}]
