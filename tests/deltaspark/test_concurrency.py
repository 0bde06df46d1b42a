"""One local table, two implementations committing at the same time: Delta Spark 4.4 appends in a
loop while deltaplane compacts, deletes by deletion vectors, checkpoints and vacuums (and the
reverse: deltaplane appends while Delta Spark OPTIMIZEs and DELETEs). Nothing committed is lost,
nothing is duplicated, both read the same rows at the end and at every version, and a conflict on
deltaplane's side is a typed error whose retry succeeds.

The Delta Spark client is synchronous: the thread that runs its loop is its only user until the
loop has stopped."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from deltaplane.engine import DeltaTable
from deltaplane.engine.errors import CommitConflictError, DataFileError
from tests.deltaspark.client import DeltaSparkError
from tests.deltaspark.compare import arrow_rows, sorted_rows

SEED = 50  # ids 0..49 exist before any loop starts
BATCH = 3  # ids per commit of a loop


def _seed(path: str, partition_by: list[str] | None = None) -> DeltaTable:
    table = DeltaTable.create(
        path,
        schema=pa.schema([("id", pa.int64()), ("src", pa.string())]),
        partition_by=partition_by,
        properties={"delta.enableDeletionVectors": "true"},
    )
    for start in range(0, SEED, 10):  # five small files: something to compact
        ids = list(range(start, start + 10))
        table.append(pa.table({"id": pa.array(ids, pa.int64()), "src": ["seed"] * len(ids)}))
    return table


def _retry(action: Callable[[], Any], conflicts: list[str], attempts: int = 6) -> Any:
    """Run a deltaplane commit, retrying only typed conflicts (recorded); anything else fails."""
    for attempt in range(attempts):
        try:
            return action()
        except CommitConflictError as error:
            conflicts.append(type(error).__name__)
            if attempt == attempts - 1:
                raise


def _ids_of(rows: list[dict[str, Any]]) -> list[int]:
    return sorted(r["id"] for r in rows)


def _assert_versions_agree(spark, path: str, allowed: set[int], first: int) -> None:
    """At version 1 (the first seed) and every version from ``first`` (the loop's) on, both
    read the same rows (no id twice, none that nobody committed), or both fail to read it (a
    version whose files VACUUM deleted)."""
    latest = DeltaTable(path).version
    for version in sorted({1, *range(first, latest + 1)}):
        try:
            ours = sorted_rows(arrow_rows(DeltaTable(path, version=version).to_arrow()))
        except DataFileError:
            ours = None
        try:
            theirs = sorted_rows(spark.rows(path, version=version))
        except DeltaSparkError:
            theirs = None
        assert ours == theirs, f"version {version}: the implementations disagree"
        if ours is not None:
            ids = _ids_of(ours)
            assert len(ids) == len(set(ids)), f"version {version} holds an id twice"
            assert set(ids) <= allowed, f"version {version} holds ids nobody committed"


def test_delta_spark_appends_while_deltaplane_maintains(delta_spark, tmp_path):
    path = str(tmp_path / "spark_appends")
    _seed(path)
    stop = threading.Event()
    committed: list[int] = []  # ids Delta Spark reported committed
    spark_errors: list[str] = []
    failures: list[BaseException] = []

    slowest = [0.0]  # seconds of the slowest INSERT so far: how long a file of one stays in flight

    def spark_loop() -> None:
        batch = 0
        try:
            while not stop.is_set() and batch < 60:
                ids = [1000 + batch * BATCH + k for k in range(BATCH)]
                values = ", ".join(f"({i}, 'spark')" for i in ids)
                started = time.monotonic()
                try:
                    delta_spark.sql(f"INSERT INTO delta.`{path}` VALUES {values}")
                    slowest[0] = max(slowest[0], time.monotonic() - started)
                except DeltaSparkError as error:  # not committed: the same ids again
                    spark_errors.append(error.error_class)
                    if len(spark_errors) > 10:
                        raise
                    continue
                committed.extend(ids)
                batch += 1
        except BaseException as error:  # surfaced by the main thread
            failures.append(error)

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + 120
        while len(committed) < count * BATCH and not failures and time.monotonic() < deadline:
            time.sleep(0.05)

    conflicts: list[str] = []
    deleted = {i for i in range(SEED) if i % 2 == 0}
    table = DeltaTable(path)
    table.append(pa.table({"id": pa.array([SEED], pa.int64()), "src": ["seed"]}))
    assert table.optimize().commit is not None  # files for the VACUUM below to reclaim
    optimized_at = time.monotonic()
    deleted.add(SEED)
    loop_start = table.version + 1
    thread = threading.Thread(target=spark_loop, name="delta-spark-appends", daemon=True)
    thread.start()
    try:
        wait_for(1)
        result = _retry(lambda: table.delete(f"id <= {SEED} AND id % 2 = 0"), conflicts)
        assert result.operation_metrics["numDeletedRows"] == str(len(deleted))
        wait_for(2)
        DeltaTable(path).checkpoint()
        wait_for(3)
        # VACUUM with a short retention once the files that OPTIMIZE removed are older than it;
        # Delta Spark's files in flight are younger, so they are kept. The retention is 6 s or 4
        # times the slowest INSERT so far, whichever is longer: on a loaded machine an INSERT
        # may hold its file uncommitted longer than a fixed few seconds.
        window = max(6.0, 4 * slowest[0])
        time.sleep(max(0.0, optimized_at + window + 0.5 - time.monotonic()))
        vacuumed = _retry(
            lambda: DeltaTable(path).vacuum(
                retention_hours=window / 3600, enforce_retention=False, dry_run=False
            ),
            conflicts,
        )
        assert vacuumed, "VACUUM deleted nothing"
        wait_for(4)
        optimized = _retry(lambda: table.optimize(), conflicts)  # the same object, reused
        assert optimized.commit is not None
        wait_for(5)
    finally:
        stop.set()
        thread.join(timeout=300)
    assert not thread.is_alive()
    assert not failures, failures
    assert len(committed) >= 5 * BATCH

    expected = sorted([i for i in range(SEED + 1) if i not in deleted] + committed)
    assert Counter(committed).most_common(1)[0][1] == 1
    ours = sorted_rows(arrow_rows(DeltaTable(path).to_arrow()))
    assert _ids_of(ours) == expected, "rows lost or duplicated"
    assert sorted_rows(delta_spark.rows(path)) == ours
    _assert_versions_agree(delta_spark, path, set(range(SEED + 1)) | set(committed), loop_start)
    history = DeltaTable(path).history()
    operations = Counter(h["operation"] for h in history)
    assert operations["OPTIMIZE"] == 2 and operations["DELETE"] == 1 and operations["VACUUM END"] == 1
    # Delta Spark's appends are blind: deltaplane's DELETE (WriteSerializable) and OPTIMIZE
    # (snapshot isolation) must not conflict with them; a conflict would have been typed.
    assert conflicts == []


def test_deltaplane_appends_while_delta_spark_maintains(delta_spark, tmp_path):
    """Partitioned by writer: Delta Spark checks a DELETE against concurrent appends at
    Serializable isolation, its only level, by partition values (any append into an unpartitioned
    table conflicts with any DELETE, whoever wrote it); deltaplane's appends land in another
    partition than the rows it deletes, so both proceed."""
    path = str(tmp_path / "deltaplane_appends")
    loop_start = _seed(path, partition_by=["src"]).version + 1
    stop = threading.Event()
    committed: list[int] = []
    conflicts: list[str] = []
    failures: list[BaseException] = []

    def deltaplane_loop() -> None:
        table = DeltaTable(path)  # one object reused across every commit of the loop
        batch = 0
        try:
            while not stop.is_set() and batch < 12:  # every version is compared: keep them few
                ids = [1000 + batch * BATCH + k for k in range(BATCH)]
                data = pa.table({"id": pa.array(ids, pa.int64()), "src": ["deltaplane"] * BATCH})
                _retry(lambda data=data: table.append(data), conflicts)
                committed.extend(ids)
                batch += 1
                time.sleep(0.4)
        except BaseException as error:
            failures.append(error)

    spark_conflicts: list[str] = []

    def spark(statement: str) -> None:
        for _ in range(6):  # Delta Spark's own conflicts are retried like ours
            try:
                delta_spark.sql(statement)
                return
            except DeltaSparkError as error:
                if "Concurrent" not in error.error_class:
                    raise
                spark_conflicts.append(error.error_class.rsplit(".", 1)[-1])
        raise AssertionError(f"{statement} kept conflicting: {spark_conflicts}")

    deleted = {i for i in range(SEED) if i % 3 == 0}
    thread = threading.Thread(target=deltaplane_loop, name="deltaplane-appends", daemon=True)
    thread.start()
    try:
        time.sleep(0.3)
        spark(f"OPTIMIZE delta.`{path}`")
        spark(f"DELETE FROM delta.`{path}` WHERE src = 'seed' AND id % 3 = 0")
    finally:
        stop.set()
        thread.join(timeout=120)
    assert not thread.is_alive()
    assert not failures, failures
    assert committed, "deltaplane committed nothing while Delta Spark worked"

    expected = sorted([i for i in range(SEED) if i not in deleted] + committed)
    ours = sorted_rows(arrow_rows(DeltaTable(path).to_arrow()))
    assert _ids_of(ours) == expected, "rows lost or duplicated"
    assert sorted_rows(delta_spark.rows(path)) == ours
    _assert_versions_agree(delta_spark, path, set(range(SEED)) | set(committed), loop_start)
    operations = Counter(h["operation"] for h in DeltaTable(path).history())
    assert operations["OPTIMIZE"] == 1 and operations["DELETE"] == 1
    assert conflicts == []  # blind appends never conflict with OPTIMIZE or another's DELETE
