"""Liquid clustering: CLUSTER BY at create and ALTER, the delta.clustering domain, incremental
OPTIMIZE (Hilbert curve, ZCubes, nothing twice), the refused combinations, and concurrency."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from deltaplane.engine import DeltaTable, write_table
from deltaplane.engine.clustering import ClusteringError
from deltaplane.engine.commands.hilbert import hilbert_index
from deltaplane.engine.commands.optimize import OptimizeError, execute_optimize, plan_optimize
from deltaplane.engine.describe import describe_snapshot
from deltaplane.engine.errors import CommitConflictError, SchemaMismatchError

SCHEMA = pa.schema(
    [
        ("a", pa.int64()),
        ("b", pa.string()),
        ("c", pa.float64()),
        ("s", pa.struct([("x", pa.int32()), ("y", pa.string())])),
        ("flag", pa.bool_()),
    ]
)


def rows(seed: int, n: int = 500) -> pa.Table:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 1000, n)
    return pa.table(
        {
            "a": a,
            "b": [f"k{v:03d}" for v in rng.integers(0, 300, n)],
            "c": rng.random(n),
            "s": [{"x": int(v), "y": f"y{v % 7}"} for v in rng.integers(0, 100, n)],
            "flag": (a % 2 == 0),
        },
        schema=SCHEMA,
    )


def log_actions(path: str, version: int) -> list[dict]:
    text = (Path(path) / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def domain_of(path: str, version: int) -> dict | None:
    for action in log_actions(path, version):
        if "domainMetadata" in action and action["domainMetadata"]["domain"] == "delta.clustering":
            return action["domainMetadata"]
    return None


def domain_columns(path: str, version: int) -> list[list[str]]:
    return json.loads(domain_of(path, version)["configuration"])["clusteringColumns"]


def live_adds(dt: DeltaTable) -> list[dict]:
    """The live files as their add actions in the log (provider and tags included)."""
    live = set(dt.snapshot.files.column("path").to_pylist())
    found = {}
    for version in range(dt.version + 1):
        for action in log_actions(dt.uri, version):
            add = action.get("add")
            if add is not None and add["path"] in live:
                found[add["path"]] = add
    return list(found.values())


def sorted_table(t: pa.Table) -> list[dict]:
    return sorted(t.select(["a", "b", "c"]).to_pylist(), key=lambda r: (r["a"], r["b"], r["c"]))


def clustered(tmp_path, name="t", columns=("a", "b"), appends=4, **kwargs) -> DeltaTable:
    dt = DeltaTable.create(str(tmp_path / name), SCHEMA, cluster_by=list(columns), **kwargs)
    for i in range(appends):
        dt.append(rows(i))
    return dt


# --- create --------------------------------------------------------------------------------------


def test_create_writes_the_feature_and_the_domain(tmp_path):
    dt = DeltaTable.create(str(tmp_path / "t"), SCHEMA, cluster_by=["a", "s.x"])
    protocol = next(a["protocol"] for a in log_actions(dt.uri, 0) if "protocol" in a)
    assert protocol["minWriterVersion"] == 7
    assert {"clustering", "domainMetadata"} <= set(protocol["writerFeatures"])
    domain = domain_of(dt.uri, 0)
    assert json.loads(domain["configuration"]) == {
        "clusteringColumns": [["a"], ["s", "x"]],
        "domainName": "delta.clustering",  # as Delta Spark writes it
    }
    assert domain["removed"] is False
    metadata = next(a["metaData"] for a in log_actions(dt.uri, 0) if "metaData" in a)
    assert metadata["partitionColumns"] == []
    assert not any("cluster" in k.lower() for k in metadata["configuration"])
    assert dt.clustering_columns == ["a", "s.x"]
    assert describe_snapshot(dt.snapshot)["clustering_columns"] == ["a", "s.x"]
    info = next(a["commitInfo"] for a in log_actions(dt.uri, 0) if "commitInfo" in a)
    assert json.loads(info["operationParameters"]["clusterBy"]) == ["a", "s.x"]


def test_unclustered_table_reports_none(tmp_path):
    dt = DeltaTable.create(str(tmp_path / "t"), SCHEMA)
    assert dt.clustering_columns is None
    assert describe_snapshot(dt.snapshot)["clustering_columns"] is None


def test_column_mapping_stores_physical_names(tmp_path):
    dt = DeltaTable.create(
        str(tmp_path / "t"), SCHEMA, cluster_by=["B", "s.y"], properties={"delta.columnMapping.mode": "name"}
    )
    fields = {f["name"]: f for f in json.loads(dt.metadata.schema_string)["fields"]}
    b = fields["b"]["metadata"]["delta.columnMapping.physicalName"]
    s = fields["s"]["metadata"]["delta.columnMapping.physicalName"]
    y = next(f for f in fields["s"]["type"]["fields"] if f["name"] == "y")
    y = y["metadata"]["delta.columnMapping.physicalName"]
    assert b.startswith("col-") and s.startswith("col-")
    assert domain_columns(dt.uri, 0) == [[b], [s, y]]
    assert dt.clustering_columns == ["b", "s.y"]  # logical names, as the schema spells them
    dt.append(rows(1))
    dt.optimize()
    assert sorted_table(dt.to_arrow()) == sorted_table(rows(1))


def test_write_table_creates_clustered_and_checks_later_writes(tmp_path):
    uri = str(tmp_path / "t")
    write_table(uri, rows(0), cluster_by=["a"])
    assert DeltaTable(uri).clustering_columns == ["a"]
    write_table(uri, rows(1), mode="append", cluster_by=["A"])  # same columns: fine
    with pytest.raises(SchemaMismatchError, match=r"clustering columns of .* are \['a'\], not \['b'\]"):
        write_table(uri, rows(2), mode="append", cluster_by=["b"])
    write_table(uri, rows(3), mode="overwrite")
    assert DeltaTable(uri).count() == 500


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"cluster_by": ["a"], "partition_by": ["b"]},
            "clustering and partitioning cannot both be specified",
        ),
        ({"cluster_by": ["nope"]}, r"clustering column 'nope' is not in the schema .*\(a, b, c, s, flag\)"),
        ({"cluster_by": ["s.nope"]}, "clustering column 's.nope' is not in the schema"),
        ({"cluster_by": ["a.x"]}, "clustering column 'a.x' is not in the schema"),
        ({"cluster_by": ["flag"]}, "column flag : boolean does not support data skipping"),
        ({"cluster_by": ["s"]}, "column s : .* does not support data skipping"),
        ({"cluster_by": ["a", "A"]}, "clustering column a is listed twice"),
        ({"cluster_by": ["a", "b", "c", "s.x", "s.y"]}, "up to 4 clustering columns, got 5"),
        ({"cluster_by": "a"}, "cluster_by takes a list of column names"),
        ({"cluster_by": ["a", ""]}, "must be a non-empty column name"),
        ({"cluster_by": ["`a"]}, "unbalanced back-quote"),
        (
            {"cluster_by": ["c"], "properties": {"delta.dataSkippingNumIndexedCols": "2"}},
            "requires statistics for clustering column c",
        ),
        (
            {"cluster_by": ["a"], "properties": {"delta.feature.clustering": "supported"}},
            "delta.feature.clustering is set by cluster_by",
        ),
        ({"properties": {"delta.feature.clustering": "supported"}}, "set by cluster_by"),
    ],
)
def test_refused_create(tmp_path, kwargs, message):
    uri = str(tmp_path / "t")
    with pytest.raises(ClusteringError, match=message):
        DeltaTable.create(uri, SCHEMA, **kwargs)
    assert not DeltaTable.is_deltatable(uri)


def test_variant_columns_are_refused(tmp_path):
    from deltaplane.engine.schema import PrimitiveType, StructField, StructType

    schema = StructType((StructField("a", PrimitiveType("long")), StructField("v", PrimitiveType("variant"))))
    with pytest.raises(ClusteringError, match="v : variant"):
        DeltaTable.create(str(tmp_path / "t"), schema, cluster_by=["v"])


# --- ALTER ---------------------------------------------------------------------------------------


def test_alter_changes_the_domain_and_cluster_by_none(tmp_path):
    dt = clustered(tmp_path, appends=1)
    result = dt.alter.cluster_by(["c", "b"])
    assert domain_columns(dt.uri, result.version) == [["c"], ["b"]]
    assert dt.clustering_columns == ["c", "b"]
    entry = dt.history(1)[0]
    assert entry["operation"] == "CLUSTER BY"
    assert entry["operationParameters"] == {"oldClusteringColumns": "a,b", "newClusteringColumns": "c,b"}
    none = dt.alter.cluster_by(None)
    assert domain_columns(dt.uri, none.version) == []
    assert dt.clustering_columns == []
    assert "clustering" in dt.protocol.writer_features  # features are never dropped this way
    dt.optimize()  # clustered by no columns: a plain compaction
    assert all(a.get("clusteringProvider") is None for a in live_adds(dt))
    assert dt.count() == 500


def test_alter_makes_an_unclustered_table_clustered(tmp_path):
    dt = DeltaTable.create(str(tmp_path / "t"), SCHEMA)
    dt.append(rows(0))
    skipped = dt.alter.cluster_by([])  # CLUSTER BY NONE on a table that is not clustered: nothing
    assert skipped.skipped and dt.version == 1
    result = dt.alter.cluster_by(["b"])
    assert {"clustering", "domainMetadata"} <= set(dt.protocol.writer_features)
    assert domain_columns(dt.uri, result.version) == [["b"]]
    dt.optimize()
    assert {a["clusteringProvider"] for a in live_adds(dt)} == {"liquid"}


def test_alter_refusals(tmp_path):
    parted = DeltaTable.create(str(tmp_path / "p"), SCHEMA, partition_by=["b"])
    with pytest.raises(ClusteringError, match="cannot both be specified"):
        parted.alter.cluster_by(["a"])
    dt = clustered(tmp_path, appends=0)
    with pytest.raises(ClusteringError, match="not in the schema"):
        dt.alter.cluster_by(["zz"])
    with pytest.raises(ClusteringError, match="requires statistics for clustering column b"):
        dt.alter.set_table_properties({"delta.dataSkippingNumIndexedCols": "1"})
    with pytest.raises(Exception, match=r"set by alter\.cluster_by"):
        dt.alter.set_table_properties({"delta.feature.clustering": "supported"})
    assert dt.version == 0 and dt.clustering_columns == ["a", "b"]


# --- OPTIMIZE ------------------------------------------------------------------------------------


def test_optimize_clusters_incrementally(tmp_path):
    dt = clustered(tmp_path)
    before = sorted_table(dt.to_arrow())
    first = dt.optimize(target_file_size=8_000)
    assert first.num_files_removed == 4 and first.num_files_added >= 2
    adds = live_adds(dt)
    assert {a["clusteringProvider"] for a in adds} == {"liquid"}
    assert {a["dataChange"] for a in adds} == {False}
    assert len({a["tags"]["ZCUBE_ID"] for a in adds}) == 1  # one bin, one ZCube
    assert {a["tags"]["ZCUBE_ZORDER_BY"] for a in adds} == {'["a","b"]'}
    assert sorted_table(dt.to_arrow()) == before
    params = dt.history(1)[0]["operationParameters"]
    assert json.loads(params["clusterBy"]) == ["a", "b"] and json.loads(params["zOrderBy"]) == []

    version = dt.version
    second = dt.optimize(target_file_size=8_000)  # nothing new: nothing at all
    assert second.version is None and dt.version == version

    dt.append(rows(10))
    new = [a for a in live_adds(dt) if a.get("clusteringProvider") is None]
    assert len(new) == 1 and "tags" not in new[0]  # appends are not clustered
    # The first cube counts as finished once it reaches min_cube_size: only the new file moves.
    cube_bytes = sum(a["size"] for a in adds)
    third = dt.optimize(target_file_size=8_000, min_cube_size=cube_bytes)
    assert third.num_files_removed == 1
    assert {a["clusteringProvider"] for a in live_adds(dt)} == {"liquid"}
    assert len({a["tags"]["ZCUBE_ID"] for a in live_adds(dt)}) == 2
    assert dt.optimize(target_file_size=8_000, min_cube_size=cube_bytes).version is None
    # With the default minimum (far above these cubes) the two small cubes merge into one.
    merged = dt.optimize(target_file_size=8_000)
    assert merged.num_files_removed == len(adds) + third.num_files_added
    assert len({a["tags"]["ZCUBE_ID"] for a in live_adds(dt)}) == 1
    assert dt.optimize().version is None
    assert sorted_table(dt.to_arrow()) == sorted(
        before + sorted_table(rows(10)), key=lambda r: (r["a"], r["b"], r["c"])
    )


def test_optimize_after_alter_keeps_old_clusters_unless_full(tmp_path):
    dt = clustered(tmp_path)
    dt.optimize(target_file_size=8_000)
    old = {a["path"] for a in live_adds(dt)}
    dt.alter.cluster_by(["c"])
    dt.append(rows(20))
    result = dt.optimize(target_file_size=8_000)
    assert result.num_files_removed == 1  # the new file only: the a,b cube is another layout
    assert old <= {a["path"] for a in live_adds(dt)}
    assert dt.optimize().version is None
    full = dt.optimize(target_file_size=8_000, full=True)
    assert full.num_files_removed == len(old) + result.num_files_added
    assert {a["tags"]["ZCUBE_ZORDER_BY"] for a in live_adds(dt)} == {'["c"]'}
    assert dt.history(1)[0]["operationParameters"]["isFull"] == "true"
    assert dt.optimize(full=True).version is None
    assert dt.count() == 2500


def test_clustered_files_skip_better(tmp_path):
    """Clustering narrows each file's [min, max] in every clustering column."""
    dt = clustered(tmp_path, appends=8)

    def files_read(predicate: str) -> int:
        return len(dt.file_uris(filter=predicate))

    before = [files_read(f"a = {v}") for v in (5, 333, 777)] + [
        files_read(f"b = 'k{v:03d}'") for v in (7, 150)
    ]
    dt.optimize(target_file_size=4_000)
    total = dt.snapshot.num_files
    after = [files_read(f"a = {v}") for v in (5, 333, 777)] + [
        files_read(f"b = 'k{v:03d}'") for v in (7, 150)
    ]
    assert before == [8] * 5  # random appends: every file spans everything
    assert total >= 8
    assert max(after) < total / 2


def test_refused_optimize_combinations(tmp_path):
    dt = clustered(tmp_path, appends=2)
    with pytest.raises(OptimizeError, match=r"cannot specify ZORDER BY\. Please remove ZORDER BY \(c\)"):
        dt.optimize(zorder_by=["c"])
    with pytest.raises(OptimizeError, match="cannot specify ZORDER BY"):
        dt.optimize.z_order(["a"])
    with pytest.raises(OptimizeError, match="doesn't support partition predicates"):
        dt.optimize(filter="a > 1")
    plain = DeltaTable.create(str(tmp_path / "plain"), SCHEMA)
    with pytest.raises(OptimizeError, match="OPTIMIZE FULL is only supported for clustered tables"):
        plain.optimize(full=True)
    assert dt.version == 2


def test_one_column_is_a_plain_sort(tmp_path):
    dt = clustered(tmp_path, columns=["a"], appends=3)
    dt.optimize(target_file_size=4_000)
    ranges = []
    for add in sorted(live_adds(dt), key=lambda a: json.loads(a["stats"])["minValues"]["a"]):
        stats = json.loads(add["stats"])
        ranges.append((stats["minValues"]["a"], stats["maxValues"]["a"]))
    assert len(ranges) >= 3
    assert all(hi <= lo for (_, hi), (lo, _) in itertools.pairwise(ranges))  # disjoint


def test_dml_and_overwrite_on_a_clustered_table(tmp_path):
    dt = clustered(tmp_path, appends=2, properties={"delta.enableDeletionVectors": "true"})
    dt.optimize()
    dt.delete("a < 100")
    assert all(a.get("clusteringProvider") == "liquid" for a in live_adds(dt))  # DV: same file
    dt.update({"c": "c + 1"}, predicate="a > 900")
    expected = pc.sum(pc.greater_equal(pa.concat_tables([rows(0), rows(1)]).column("a"), 100)).as_py()
    assert dt.count() == expected
    dt.optimize()
    assert {a.get("clusteringProvider") for a in live_adds(dt)} == {"liquid"}
    assert dt.count() == expected
    dt.overwrite(rows(5))
    assert [a.get("clusteringProvider") for a in live_adds(dt)] == [None]
    assert dt.clustering_columns == ["a", "b"]


def test_checkpoint_then_optimize_is_still_incremental(tmp_path):
    dt = clustered(tmp_path, properties={"delta.checkpointInterval": "2"})
    dt.optimize()
    dt.checkpoint()
    fresh = DeltaTable(dt.uri)  # loaded from the checkpoint
    assert fresh.clustering_columns == ["a", "b"]
    assert fresh.optimize().version is None


def test_auto_compaction_clusters(tmp_path):
    props = {"delta.autoOptimize.autoCompact": "true", "deltaplane.autoCompact.minNumFiles": "3"}
    dt = clustered(tmp_path, appends=3, properties=props)
    assert dt.history(1)[0]["operation"] == "OPTIMIZE"
    params = dt.history(1)[0]["operationParameters"]
    assert json.loads(params["clusterBy"]) == ["a", "b"] and params["auto"] == "true"
    assert {a["clusteringProvider"] for a in live_adds(dt)} == {"liquid"}
    assert dt.count() == 1500


# --- the same object, reused; concurrent writers -------------------------------------------------


def test_one_table_object_reused_through_everything(tmp_path):
    dt = DeltaTable.create(str(tmp_path / "t"), SCHEMA, cluster_by=["a"])
    other = DeltaTable(dt.uri)  # a second handle that falls behind
    for i in range(3):
        dt.append(rows(i))
    dt.optimize()
    dt.alter.cluster_by(["b", "a"])
    dt.append(rows(3))
    dt.optimize()
    assert other.clustering_columns == ["a"]  # not refreshed yet
    other.append(rows(4))  # writes against the latest version
    assert other.clustering_columns == ["b", "a"]
    other.optimize()
    dt.refresh()
    assert dt.clustering_columns == ["b", "a"]
    assert dt.count() == 2500
    assert dt.optimize().version is None and other.optimize().version is None


def test_concurrent_append_during_optimize(tmp_path):
    dt = clustered(tmp_path)
    plan = plan_optimize(dt.snapshot)  # OPTIMIZE reads version 4
    writer = DeltaTable(dt.uri)
    writer.append(rows(50))  # lands first
    metrics = execute_optimize(dt.snapshot.store, plan)
    assert metrics.version == 6  # dataChange=false: no conflict with a blind append
    dt.refresh()
    assert dt.count() == 2500
    providers = [a.get("clusteringProvider") for a in live_adds(dt)]
    assert providers.count(None) == 1  # the concurrent append stays to be clustered next time
    assert dt.optimize().num_files_removed == len(providers)


def test_concurrent_delete_of_a_file_being_clustered_conflicts(tmp_path):
    dt = clustered(tmp_path, appends=2)
    plan = plan_optimize(dt.snapshot)
    DeltaTable(dt.uri).delete("a < 500")  # rewrites files the OPTIMIZE is about to replace
    with pytest.raises(CommitConflictError):
        execute_optimize(dt.snapshot.store, plan)
    dt.refresh()
    assert all(a.get("clusteringProvider") is None for a in live_adds(dt))


def test_concurrent_alter_and_optimize(tmp_path):
    dt = clustered(tmp_path, appends=2)
    plan = plan_optimize(dt.snapshot)
    DeltaTable(dt.uri).alter.cluster_by(["c"])
    execute_optimize(dt.snapshot.store, plan)  # commits files clustered by a, b (tagged so)
    dt.refresh()
    assert {a["tags"]["ZCUBE_ZORDER_BY"] for a in live_adds(dt)} == {'["a","b"]'}
    assert dt.optimize().version is None  # another layout: kept until FULL
    assert dt.optimize(full=True).num_files_added >= 1


# --- the curve -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("dims", "bits"), [(2, 1), (2, 4), (3, 3), (4, 3)])
def test_hilbert_index_walks_between_neighbours(dims, bits):
    side = 1 << bits
    grid = np.meshgrid(*[np.arange(side, dtype=np.uint64)] * dims, indexing="ij")
    codes = [g.ravel() for g in grid]
    index = hilbert_index(codes, bits)
    assert sorted(index.tolist()) == list(range(side**dims))  # every cell exactly once
    order = np.argsort(index)
    points = np.stack([c[order].astype(np.int64) for c in codes], axis=1)
    steps = np.abs(np.diff(points, axis=0)).sum(axis=1)
    assert set(steps.tolist()) == {1}  # consecutive cells are adjacent
    assert points[0].tolist() == [0] * dims  # starts in the origin's corner


def test_the_spark_jobs_plan_clusters_too(tmp_path):
    """The compaction path of the operators and the Spark job: the plan chosen once, shipped as
    JSON, rewritten bin by bin where the tasks run, committed by the driver."""
    from deltaplane.engine.commands.optimize import bin_tasks, commit_optimize, run_bin_task
    from deltaplane.engine.plans import OPTIMIZE_PLAN, plan_from_json, plan_to_json

    dt = clustered(tmp_path, appends=3)
    plan = plan_optimize(dt.snapshot, target_file_size=8_000)
    doc = json.loads(json.dumps(plan_to_json(plan, dt.snapshot.store.root)))
    assert doc["clusterBy"] == ["a", "b"] and doc["zOrderBy"] == []
    _, shipped = plan_from_json(OPTIMIZE_PLAN, doc, dt.uri)
    assert shipped.cluster_by == ("a", "b") and [b.paths for b in shipped.bins] == [
        b.paths for b in plan.bins
    ]
    adds = [a for task in bin_tasks(shipped, uri=dt.uri) for a in run_bin_task(task)]
    commit_optimize(dt.snapshot.store, shipped, adds)
    dt.refresh()
    assert {a["clusteringProvider"] for a in live_adds(dt)} == {"liquid"}
    assert len({a["tags"]["ZCUBE_ID"] for a in live_adds(dt)}) == 1
    assert dt.optimize().version is None and dt.count() == 1500
