"""The incremental health: after every commit of random sequences it equals the full recompute
(``table_health`` of a freshly loaded snapshot), survives being carried as JSON, costs one read per
new commit (at 100,000 files), and starts over when the log no longer holds its position."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltaplane.engine import DeltaTable
from deltaplane.engine.checkpoint_writer import write_checkpoint
from deltaplane.engine.health import table_health
from deltaplane.engine.health_tracker import HealthTracker
from deltaplane.engine.snapshot import load_snapshot
from deltaplane.engine.storage import LocalStore
from tests.logbuilder import add, commit_info, metadata, protocol, remove, write_commit

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string())])
SMALL = 600  # bytes: some of the test's files are small, some are not


def batch(start: int, n: int, parts: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "part": [f"p{i % parts}" for i in ids]}, schema=SCHEMA)


# operation, argument
steps = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 40)),
        st.tuples(st.just("delete"), st.integers(2, 7)),
        st.tuples(st.just("update"), st.integers(2, 7)),
        st.tuples(st.just("optimize"), st.just(0)),
        st.tuples(st.just("checkpoint"), st.just(0)),
        st.tuples(st.just("restore"), st.integers(1, 3)),
        st.tuples(st.just("carry"), st.just(0)),
    ),
    min_size=1,
    max_size=8,
)


def expected_health(path: str):
    return table_health(load_snapshot(LocalStore(path)), small_file_size=SMALL)


@settings(
    max_examples=15,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    partitioned=st.booleans(),
    deletion_vectors=st.booleans(),
    operations=steps,
)
@pytest.mark.parametrize("path_taken", ["parsed JSON", "Arrow"])
def test_incremental_health_equals_the_full_recompute(
    tmp_path_factory, partitioned, deletion_vectors, operations, path_taken
):
    """Both ways the tracker reads a commit (its parsed JSON when small, else Arrow) agree with
    the full recompute; the second run sends every commit the Arrow way."""
    with pytest.MonkeyPatch.context() as patch:
        if path_taken == "Arrow":
            patch.setattr(HealthTracker, "_row_records", lambda self, rows: None)
        check_sequence(tmp_path_factory, partitioned, deletion_vectors, operations)


def check_sequence(tmp_path_factory, partitioned, deletion_vectors, operations):
    path = str(tmp_path_factory.mktemp("health"))
    DeltaTable.create(
        path,
        SCHEMA,
        partition_by=["part"] if partitioned else None,
        configuration={"delta.enableDeletionVectors": str(deletion_vectors).lower()},
    )
    table = DeltaTable(path)
    table.append(batch(0, 30, 3))
    store = LocalStore(path)
    tracker = HealthTracker.from_snapshot(load_snapshot(store), small_file_size=SMALL)
    next_id = 30
    for op, arg in operations:
        if op == "append":
            table.append(batch(next_id, arg, 3))
            next_id += arg
        elif op == "delete":
            table.delete(f"id % {arg} = 0")
        elif op == "update":
            table.update({"id": "id + 1000"}, predicate=f"id % {arg} = 1")
        elif op == "optimize":
            table.optimize(purge=True)
        elif op == "checkpoint":
            table.checkpoint()
        elif op == "restore":
            table.restore(max(0, table.version() - arg))
        elif op == "carry":  # a new process picks the state up
            tracker = HealthTracker.from_json(tracker.to_json())
        before = tracker.version
        applied = tracker.advance(store)
        assert applied == list(range(before + 1, table.version() + 1))
        assert tracker.health() == expected_health(path), (op, arg)
        snapshot = load_snapshot(store)
        removed = tracker.removed_files()
        assert removed["num_files"] == snapshot.tombstones.num_rows
        assert removed["bytes"] == sum(snapshot.tombstones.column("size").to_pylist())
    assert tracker.restarts == 1  # never had to start over


def test_commit_metrics_are_what_each_commit_did(tmp_path):
    path = str(tmp_path)
    DeltaTable.create(path, SCHEMA, configuration={"delta.enableDeletionVectors": "true"})
    table = DeltaTable(path)
    tracker = HealthTracker.from_snapshot(load_snapshot(LocalStore(path)), small_file_size=SMALL)
    table.append(batch(0, 100, 1))
    table.delete("id < 10")
    table.optimize(purge=True)
    tracker.advance(LocalStore(path))
    write, delete, optimize = list(tracker.commits)
    assert (write.operation, write.files_added, write.net_rows, write.rows_inserted) == ("WRITE", 1, 100, 100)
    assert write.bytes_added == table.snapshot.files.column("size").to_pylist()[0] or write.bytes_added > 0
    assert (delete.operation, delete.net_rows, delete.rows_deleted) == ("DELETE", -10, 10)
    assert delete.files_added == delete.files_removed == 1  # the same file, with a deletion vector
    assert (optimize.operation, optimize.net_rows, optimize.files_added) == ("OPTIMIZE", 0, 1)
    assert sum(optimize.added_size_histogram) == 1
    assert tracker.last_optimize.version == optimize.version


def test_foreign_commit_info_shapes_are_unknowns_not_failures(tmp_path):
    store = LocalStore(str(tmp_path))
    write_commit(store, 0, [commit_info(), protocol(), metadata(), add("a.parquet", size=10)])
    tracker = HealthTracker.from_snapshot(load_snapshot(store))
    shapes = [
        commit_info(operation=None, operationMetrics="not a map"),
        commit_info(operation="MERGE", operationMetrics={"numTargetRowsInserted": "x", "numOutputRows": [1]}),
        {"commitInfo": {"operation": "WRITE"}},  # no timestamp: the file's time is used
        commit_info(operation=7, operationMetrics={"numOutputRows": float("inf")}),  # not a string
        commit_info(operation="VACUUM START", operationParameters="not a map"),
        commit_info(operation=["VACUUM END"], operationParameters=["x"]),
    ]
    for v, info in enumerate(shapes, start=1):
        write_commit(store, v, [info, add(f"f{v}.parquet", size=5)])
    assert tracker.advance(store) == [1, 2, 3, 4, 5, 6]
    assert [c.rows_inserted for c in tracker.commits] == [None] * 6
    assert [c.operation for c in tracker.commits][3:] == [None, "VACUUM START", None]
    assert tracker.health().num_files == 7
    assert tracker.commits[2].timestamp > 1_700_000_000_000


def test_foreign_file_action_shapes_count_as_a_full_recompute_counts_them(tmp_path):
    """Parsed file actions the tracker reads without Arrow, and those it leaves to the Arrow
    path (statistics that are not an object, a count that is not an integer): every shape
    counts as the snapshot's health does."""
    store = LocalStore(str(tmp_path))
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "p", "type": "string", "nullable": True, "metadata": {}},
    ]}  # fmt: skip
    features = {"reader_features": ["deletionVectors"], "writer_features": ["deletionVectors"]}
    write_commit(store, 0, [commit_info(), protocol(3, 7, **features), metadata(schema, ["p"])])
    tracker = HealthTracker.from_snapshot(load_snapshot(store), small_file_size=50)
    dv = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 4,
          "sizeInBytes": 40, "cardinality": 2}  # fmt: skip
    commits = [
        [add("a.parquet", {"p": "x"}, size=40, stats={"numRecords": 5})],
        [add("b.parquet", {"p": None}, size=400)],  # no statistics: rows unknown
        [add("c.parquet", {"p": "x"}, size=60, stats={"numRecords": 3}, clusteringProvider="liquid")],
        [remove("a.parquet", size=40), add("a.parquet", {"p": "x"}, size=40, stats={"numRecords": 5}, dv=dv)],
        [add("d.parquet", {"p": "y"}, size=70, stats={"numRecords": 7.0})],  # not an integer
        [add("g.parquet", {"p": "y"}, size=71, stats={"numRecords": 2**64})],  # not a 64-bit one
        [add("e.parquet", {"p": "y"}, size=80, stats={"minValues": {}})],  # no count
        [{"add": {**add("f.parquet", {"p": "z"}, size=90)["add"], "stats": "[1, 2]"}}],  # not an object
        [remove("c.parquet", size=60, deletion_timestamp=1_700_000_000_500)],
        [remove("a.parquet", dv=dv, size=40)],
    ]
    for version, actions in enumerate(commits, start=1):
        write_commit(store, version, [commit_info(), *actions])
        assert tracker.advance(store) == [version]
        expected = table_health(load_snapshot(store), small_file_size=50)
        assert tracker.health() == expected, version
    snapshot = load_snapshot(store)
    assert tracker.removed_files()["num_files"] == snapshot.tombstones.num_rows == 3


def test_size_tiers_count_files_by_powers_of_two_of_the_small_size(tmp_path):
    """Tier k holds the files from 2**k up to 2**(k + 1) small sizes, per partition; small
    files and files of 256 small sizes or more are in none (numbers written out by hand)."""
    store = LocalStore(str(tmp_path))
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "p", "type": "string", "nullable": True, "metadata": {}},
    ]}  # fmt: skip
    write_commit(store, 0, [commit_info(), protocol(), metadata(schema, ["p"])])
    tracker = HealthTracker.from_snapshot(load_snapshot(store), small_file_size=100)
    sizes = {"a": 99, "b": 100, "c": 199, "d": 200, "e": 399, "f": 400, "g": 25_599, "h": 25_600}
    write_commit(
        store, 1, [commit_info()] + [add(f"{n}.parquet", {"p": "x"}, size=v) for n, v in sizes.items()]
    )
    write_commit(store, 2, [commit_info(), add("y.parquet", {"p": "y"}, size=150)])
    tracker.advance(store)
    x, y = tracker.health().partitions
    assert (x.num_small_files, x.tier_files) == (1, (2, 2, 1, 0, 0, 0, 0, 1))
    assert x.tier_bytes == (299, 599, 400, 0, 0, 0, 0, 25_599)
    assert (y.num_small_files, y.tier_files, y.tier_bytes) == (0, (1,) + (0,) * 7, (150,) + (0,) * 7)
    write_commit(store, 3, [commit_info(), remove("c.parquet", size=199, partitionValues={"p": "x"})])
    tracker.advance(store)
    assert tracker.health().partitions[0].tier_files == (1, 2, 1, 0, 0, 0, 0, 1)
    assert tracker.health() == table_health(load_snapshot(store), small_file_size=100)
    carried = HealthTracker.from_json(tracker.to_json())  # the state a trigger carries, recounted
    assert carried.health() == tracker.health()


class CountingStore(LocalStore):
    def __init__(self, root: str):
        super().__init__(root)
        self.gets: list[str] = []

    def get(self, key):
        self.gets.append(key)
        return super().get(key)

    def get_range(self, key, start, length):
        self.gets.append(key)
        return super().get_range(key, start, length)

    def open_input(self, key, *, size=None):
        self.gets.append(key)
        return super().open_input(key, size=size)


def test_advancing_reads_only_the_new_commits_at_100k_files(tmp_path):
    store = LocalStore(str(tmp_path))
    n = 100_000
    stats = {"numRecords": 10}
    lines = [
        commit_info(),
        protocol(),
        metadata(
            partition_columns=["part"],
            schema={
                "type": "struct",
                "fields": [
                    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
                    {"name": "part", "type": "string", "nullable": True, "metadata": {}},
                ],
            },
        ),
    ]
    lines += [
        add(f"part={i % 100}/f{i}.parquet", {"part": str(i % 100)}, size=1000 + i, stats=stats)
        for i in range(n)
    ]
    write_commit(store, 0, lines)
    write_checkpoint(store, 0)
    tracker = HealthTracker.from_snapshot(load_snapshot(store), small_file_size=50_000)
    assert tracker.health().num_files == n and tracker.health().num_partitions == 100
    counting = CountingStore(str(tmp_path))
    for v in range(1, 6):
        write_commit(
            counting,
            v,
            [
                commit_info(operation="WRITE"),
                add(f"part=1/new{v}.parquet", {"part": "1"}, size=10, stats=stats),
                remove(f"part={v}/f{v}.parquet", size=1000 + v, partitionValues={"part": str(v)}),
            ],
        )
    counting.gets.clear()
    started = time.process_time()
    assert tracker.advance(counting) == [1, 2, 3, 4, 5]
    spent = time.process_time() - started
    assert counting.gets == [f"_delta_log/{v:020d}.json" for v in range(1, 6)]  # no checkpoint, no file
    health = tracker.health()
    assert health.num_files == n and health.num_rows == n * 10
    assert health == table_health(load_snapshot(store), small_file_size=50_000)
    print(f"advance over 5 commits at {n} files: {spent * 1000:.1f} ms CPU")


def test_a_position_cleaned_from_the_log_starts_over_from_the_snapshot(tmp_path):
    path = str(tmp_path)
    DeltaTable.create(path, SCHEMA, configuration={"delta.checkpointInterval": "1000"})
    table = DeltaTable(path)
    table.append(batch(0, 10, 2))
    store = LocalStore(path)
    tracker = HealthTracker.from_snapshot(load_snapshot(store), small_file_size=SMALL)
    for i in range(3):
        table.append(batch(100 + i, 5, 2))
    table.checkpoint()
    for v in range(0, table.version()):  # the cleanup a long pause missed
        Path(path, "_delta_log", f"{v:020d}.json").unlink()
    assert tracker.advance(store) == [2, 3, 4]
    assert tracker.restarts == 2
    assert tracker.health() == expected_health(path)
    # a new partitioning (another writer's REPLACE TABLE ... PARTITIONED BY) starts over too
    schema = json.loads(table.metadata.schema_string)
    replace = [
        commit_info(operation="CREATE OR REPLACE TABLE"),
        metadata(schema=schema, partition_columns=["part"]),
        *(remove(p, size=1) for p in table.snapshot.files.column("path").to_pylist()),
        *(
            add(f"part=p{i}/r{i}.parquet", {"part": f"p{i}"}, size=10, stats={"numRecords": 1})
            for i in range(2)
        ),
    ]
    write_commit(store, table.version() + 1, replace)
    tracker.advance(store)
    assert tracker.restarts == 3 and tracker.health() == expected_health(path)
    assert tracker.health().num_partitions == 2


def test_maintenance_events_follow_the_log(tmp_path):
    path = str(tmp_path)
    DeltaTable.create(path, SCHEMA)
    table = DeltaTable(path)
    table.append(batch(0, 10, 2))
    table.delete("id < 5")  # a file removed: something for VACUUM to delete
    tracker = HealthTracker.from_snapshot(load_snapshot(LocalStore(path)))
    assert tracker.removed_files()["num_files"] == 1
    table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert tracker.advance(LocalStore(path)) == [3, 4]
    assert tracker.last_vacuum is not None and tracker.last_vacuum.operation == "VACUUM END"
    assert tracker.health() == table_health(load_snapshot(LocalStore(path)))
    assert tracker.removed_files() == {"num_files": 0, "bytes": 0, "oldest_age_ms": None}  # freed


def test_health_history_is_each_versions_health_with_maintenance_marked(tmp_path):
    from deltaplane.engine.health_tracker import health_history

    path = str(tmp_path / "h")
    t = DeltaTable.create(
        path,
        SCHEMA,
        partition_by=["part"],
        properties={"delta.enableDeletionVectors": "true", "delta.checkpointInterval": "1000"},
    )
    for i in range(4):
        t.append(batch(10 * i, 10, 2))
    t.delete("id = 3")
    t.optimize()
    t.checkpoint()
    t.append(batch(100, 4, 2))
    t.vacuum(retention_hours=0, dry_run=False, enforce_retention=False)
    points = health_history(LocalStore(path), commits=100, small_file_size=SMALL)
    assert [p["version"] for p in points] == list(range(t.version + 1))
    for p in points:  # each point is what a full recompute of that version says
        full = table_health(load_snapshot(LocalStore(path), p["version"]), small_file_size=SMALL)
        assert (p["num_files"], p["num_small_files"], p["size_bytes"]) == (
            full.num_files,
            full.num_small_files,
            full.size_bytes,
        )
        assert abs(p["deleted_rows_ratio"] - full.deleted_rows_ratio) < 1e-12
    marked = [(p["version"], p["operation"]) for p in points if p["maintenance"]]
    assert marked == [(6, "OPTIMIZE"), (9, "VACUUM END")]
    lag = {p["version"]: p["versions_since_checkpoint"] for p in points}
    assert lag[5] == 6 and lag[6] == 0 and lag[7] == 1  # the checkpoint of version 6
    # the last few commits only: starts at that version
    tail = health_history(LocalStore(path), commits=3, small_file_size=SMALL)
    assert [p["version"] for p in tail] == [6, 7, 8, 9] and tail[0]["operation"] is None


def test_removed_files_of_a_snapshot_are_the_trackers(tmp_path):
    from deltaplane.engine.health import removed_files

    path = str(tmp_path / "r")
    t = DeltaTable.create(path, SCHEMA, partition_by=["part"])
    for i in range(3):
        t.append(batch(10 * i, 10, 2))
    t.optimize()
    t.delete("part = 'p0'")
    snapshot = load_snapshot(LocalStore(path))
    tracker = HealthTracker.from_snapshot(snapshot, small_file_size=SMALL)
    for now, retention in ((None, None), (snapshot.timestamp + 10, 5), (snapshot.timestamp, 10**9)):
        assert removed_files(snapshot, now_ms=now, retention_ms=retention) == tracker.removed_files(
            now_ms=now, retention_ms=retention
        )
    assert removed_files(snapshot)["num_files"] == 7  # 6 compacted + the compacted p0 file


def test_maintenance_spending_counts_the_days_optimize_and_reorg_commits(tmp_path):
    from deltaplane.engine.health import DEFAULT_CPU_SECONDS_PER_GIB, maintenance_spending

    path = str(tmp_path / "b")
    t = DeltaTable.create(path, SCHEMA, partition_by=["part"])
    for i in range(4):
        t.append(batch(10 * i, 10, 2))
    first = t.optimize()
    t.append(batch(100, 10, 2))
    t.append(batch(200, 10, 2))
    t.optimize()

    def written(version: int) -> int:  # the adds of that commit, from the log itself
        lines = (Path(path) / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
        return sum(json.loads(x)["add"]["size"] for x in lines if x.startswith('{"add"'))

    def metrics(version: int) -> dict:
        lines = (Path(path) / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
        return next(json.loads(x)["commitInfo"]["operationMetrics"] for x in lines if '"commitInfo"' in x)

    store = LocalStore(path)
    spent = maintenance_spending(store, 8, 0)
    assert spent.bytes_rewritten == written(5) + written(8) and spent.rewrites == 2 and spent.estimated == 0
    # the CPU each OPTIMIZE recorded, read back from the log
    cpu = [int(metrics(v)["cpuTimeMs"]) / 1000 for v in (5, 8)]
    assert int(metrics(5)["executionTimeMs"]) >= 0 and all(c >= 0 for c in cpu)
    assert spent.cpu_seconds == pytest.approx(sum(cpu))
    assert spent.cpu_seconds_per_gib == pytest.approx(sum(cpu) / ((written(5) + written(8)) / (1 << 30)))
    second = load_snapshot(store, 8).timestamp
    assert maintenance_spending(store, 8, second).bytes_rewritten == written(8)
    assert maintenance_spending(store, 8, load_snapshot(store).timestamp + 1).bytes_rewritten == 0
    assert first.num_files_removed == 8
    # A rewrite that recorded no CPU (Delta Spark's OPTIMIZE) is estimated from its bytes at the
    # table's own rate; a foreign value that is not a number is not counted.
    log8 = Path(path) / "_delta_log" / f"{8:020d}.json"
    lines = []
    for line in log8.read_text().splitlines():
        action = json.loads(line)
        if "commitInfo" in action:
            m = action["commitInfo"]["operationMetrics"]
            del m["cpuTimeMs"]
            m["executionTimeMs"] = "soon"
        lines.append(json.dumps(action))
    log8.write_text("\n".join(lines) + "\n")
    spent = maintenance_spending(store, 8, 0)
    assert spent.estimated == 1 and spent.rewrites == 2
    rate = cpu[0] / (written(5) / (1 << 30))
    assert rate != DEFAULT_CPU_SECONDS_PER_GIB
    assert spent.cpu_seconds_per_gib == pytest.approx(rate)
    assert spent.cpu_seconds == pytest.approx(cpu[0] + written(8) / (1 << 30) * rate)


def test_clustering_debt_is_tracked_as_a_full_recompute_counts_it(tmp_path):
    """Files no OPTIMIZE clustered yet (no ``clusteringProvider``) of a liquid-clustered table,
    through appends, an OPTIMIZE, new appends, and CLUSTER BY NONE."""
    path = str(tmp_path / "liquid")
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    t = DeltaTable.create(path, schema, cluster_by=["id"])
    tracker = HealthTracker.from_snapshot(load_snapshot(LocalStore(path)), small_file_size=SMALL)
    steps = [
        lambda: [t.append(pa.table({"id": [i], "v": ["x"]}, schema)) for i in range(3)],
        lambda: t.optimize(),
        lambda: [t.append(pa.table({"id": [i], "v": ["y"]}, schema)) for i in range(10, 12)],
        lambda: t.alter.cluster_by([]),
    ]
    seen = []
    for step in steps:
        step()
        tracker.advance(LocalStore(path))
        full = expected_health(path)
        got = tracker.health()
        assert (got.clustered, got.num_unclustered_files, got.unclustered_bytes) == (
            full.clustered,
            full.num_unclustered_files,
            full.unclustered_bytes,
        )
        seen.append((got.clustered, got.num_unclustered_files))
    assert seen == [(True, 3), (True, 0), (True, 2), (False, 2)]
    again = HealthTracker.from_json(tracker.to_json()).health()
    assert (again.clustered, again.num_unclustered_files) == (False, 2)
