"""Add-action ``tags`` survive everything a table goes through: replay of JSON commits (every
parse path), checkpoints written here and by others (classic, classic-named V2, V2 sidecars, the
streaming read of big checkpoints), log cleanup, and re-adds (deletion vectors, RESTORE, row
tracking backfill). Liquid clustering depends on them: its ZCube tags say which files are a
finished cube.

Logs are hand-built (tests/logbuilder.py) where the exact JSON matters; expected tags are the
literals the log was built with.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.commands.log_cleanup import execute_log_cleanup, plan_log_cleanup
from deltaplane.engine.errors import CorruptLogError
from deltaplane.engine.log import checkpoints as checkpoint_reader
from deltaplane.engine.snapshot import load_snapshot
from deltaplane.engine.storage import LocalStore
from tests.helpers import CLUSTERING_SCHEMA, clustering_rows, clustering_values_sql, spark_clustered_table
from tests.logbuilder import (
    CHECKPOINT_TYPES,
    add,
    commit_info,
    metadata,
    protocol,
    remove,
    write_checkpoint,
    write_commit,
    write_parquet,
)

MAP = pa.map_(pa.string(), pa.string())
DAY = 86_400_000

# The tags a writer may put on a file, with the JSON values that are easy to get wrong: a string
# that looks like a timestamp, a long number as a string, a bare JSON number, an empty object.
TAGGED = {
    "cube-1.parquet": {"ZCUBE_ID": "7d1c0e1a", "ZCUBE_ZORDER_BY": '["a","b"]'},
    "insert.parquet": {"INSERTION_TIME": "1700000000000000", "OPTIMIZE_TARGET_SIZE": "268435456"},
    "dated.parquet": {"day": "2021-01-01", "at": "2021-01-01T10:00:00Z"},
    "empty.parquet": {},
}
BARE_NUMBER = ("number.parquet", {"n": 5, "flag": True}, {"n": "5", "flag": "true"})


def tags_of(files: pa.Table) -> dict[str, dict[str, str] | None]:
    """Path -> tags of a live-file table (independent of the engine's own helpers)."""
    return {
        row["path"]: None if row["tags"] is None else dict(row["tags"])
        for row in files.select(["path", "tags"]).to_pylist()
    }


def tagged_commit(filler: int = 0) -> list[dict]:
    actions = [add(path, tags=dict(tags)) for path, tags in TAGGED.items()]
    actions.append(add(BARE_NUMBER[0], tags=BARE_NUMBER[1]))
    actions.append(add("plain.parquet"))
    # Filler files (some tagged) make the commit big enough for the columnar parser and replay.
    actions += [add(f"f{i:05d}.parquet", tags={"k": f"v{i}"} if i % 3 == 0 else None) for i in range(filler)]
    return actions


def expected(filler: int = 0) -> dict[str, dict[str, str] | None]:
    out: dict[str, dict[str, str] | None] = dict(TAGGED)
    out[BARE_NUMBER[0]] = BARE_NUMBER[2]
    out["plain.parquet"] = None
    out.update({f"f{i:05d}.parquet": {"k": f"v{i}"} if i % 3 == 0 else None for i in range(filler)})
    return out


# --- replay ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "filler",
    [
        0,  # a small commit: parsed and replayed in Python
        300,  # a commit past 16 KiB: pyarrow.json, Arrow replay of few actions
        2500,  # more actions than the small replay takes
    ],
)
def test_replay_keeps_tags(tmp_path, filler):
    store = LocalStore(str(tmp_path))
    write_commit(store, 0, [commit_info(), protocol(), metadata(), *tagged_commit(filler)])
    assert tags_of(load_snapshot(store).files) == expected(filler)


def test_the_newest_add_of_a_file_decides_its_tags(tmp_path):
    store = LocalStore(str(tmp_path))
    write_commit(store, 0, [commit_info(), protocol(), metadata(), *tagged_commit()])
    # Re-added with other tags, removed, re-added without tags: tags follow the winning action.
    write_commit(store, 1, [commit_info(), add("cube-1.parquet", tags={"ZCUBE_ID": "second"})])
    write_commit(store, 2, [commit_info(), remove("insert.parquet")])
    write_commit(store, 3, [commit_info(), add("dated.parquet")])
    files = tags_of(load_snapshot(store).files)
    assert files["cube-1.parquet"] == {"ZCUBE_ID": "second"}
    assert "insert.parquet" not in files
    assert files["dated.parquet"] is None
    assert files["empty.parquet"] == {}


@pytest.mark.parametrize("filler", [0, 300])
@pytest.mark.parametrize("tags", ['"a string"', "[1, 2]", '{"nested": {"x": "1"}}'])
def test_tags_that_are_not_an_object_of_strings_are_a_corrupt_log(tmp_path, tags, filler):
    store = LocalStore(str(tmp_path))
    write_commit(store, 0, [commit_info(), protocol(), metadata()])
    line = '{"add": {"path": "x.parquet", "partitionValues": {}, "size": 1, "modificationTime": 1, '
    line += f'"dataChange": true, "tags": {tags}}}}}\n'
    others = "".join(json.dumps(a) + "\n" for a in tagged_commit(filler))  # a big commit or not
    write_commit(store, 1, [], raw=json.dumps(commit_info()) + "\n" + others + line)
    with pytest.raises(CorruptLogError, match="tags"):
        load_snapshot(store)


# --- checkpoints -----------------------------------------------------------------------------------


def drop_commits(root: Path, up_to: int) -> None:
    for v in range(up_to + 1):
        (root / "_delta_log" / f"{v:020d}.json").unlink(missing_ok=True)


@pytest.mark.parametrize("filler", [0, 300])
def test_checkpoint_keeps_tags(tmp_path, filler):
    store = LocalStore(str(tmp_path))
    write_commit(store, 0, [commit_info(), protocol(), metadata(), *tagged_commit(filler)])
    dt = DeltaTable(str(tmp_path))
    dt.checkpoint()

    # The checkpoint itself, read with plain pyarrow: each add's tags as the commit had them.
    table = pq.read_table(tmp_path / "_delta_log" / f"{0:020d}.checkpoint.parquet", columns=["add"])
    adds = [a for a in table.column("add").to_pylist() if a is not None]
    assert {a["path"]: None if a["tags"] is None else dict(a["tags"]) for a in adds} == expected(filler)

    # Loaded from the checkpoint alone.
    drop_commits(tmp_path, 0)
    assert tags_of(load_snapshot(store).files) == expected(filler)
    # Commits after the checkpoint replay over it: a re-add with new tags wins, the rest stay.
    write_commit(store, 1, [commit_info(), add("plain.parquet", tags={"late": "yes"})])
    files = tags_of(load_snapshot(store).files)
    assert files == {**expected(filler), "plain.parquet": {"late": "yes"}}
    # A checkpoint over a checkpoint (the same table object, refreshed) still has them.
    dt.refresh()
    dt.checkpoint()
    drop_commits(tmp_path, 1)
    assert tags_of(load_snapshot(store).files) == files


def test_v2_checkpoint_keeps_tags(tmp_path):
    store = LocalStore(str(tmp_path))
    v2 = protocol(3, 7, ["v2Checkpoint"], ["v2Checkpoint"])
    policy = metadata(configuration={"delta.checkpointPolicy": "v2"})
    write_commit(store, 0, [commit_info(), v2, policy, *tagged_commit()])
    DeltaTable(str(tmp_path)).checkpoint()
    checkpoint = pq.read_table(tmp_path / "_delta_log" / f"{0:020d}.checkpoint.parquet")
    assert "checkpointMetadata" in checkpoint.column_names  # a classic-named V2 checkpoint
    drop_commits(tmp_path, 0)
    assert tags_of(load_snapshot(store).files) == expected()


ADD_WITH_TAGS = pa.struct([*CHECKPOINT_TYPES["add"], ("tags", MAP)])


def test_tags_are_read_from_another_writers_checkpoint(tmp_path):
    store = LocalStore(str(tmp_path))
    adds = [add(path, tags=tags) for path, tags in expected().items()]  # a map holds strings
    actions = [protocol(), metadata(), *adds]
    write_checkpoint(store, 0, actions, types={"add": ADD_WITH_TAGS})
    store.put("_delta_log/_last_checkpoint", b'{"version":0,"size":8}')
    assert tags_of(load_snapshot(store).files) == expected()


def test_tags_are_read_from_v2_sidecars(tmp_path):
    store = LocalStore(str(tmp_path))
    v2 = protocol(3, 7, ["v2Checkpoint"], ["v2Checkpoint"])
    adds = []
    for path, tags in expected().items():
        adds.append(
            {
                "path": path,
                "partitionValues": [],
                "size": 1,
                "modificationTime": 1,
                "dataChange": False,
                "stats": None,
                "tags": None if tags is None else list(tags.items()),
            }
        )
    write_parquet(store, "_delta_log/_sidecars/s1.parquet", pa.table({"add": pa.array(adds, ADD_WITH_TAGS)}))
    manifest = [
        {"checkpointMetadata": {"version": 0}},
        v2,
        metadata(),
        {"sidecar": {"path": "s1.parquet", "sizeInBytes": 1, "modificationTime": 1}},
    ]
    store.put(
        "_delta_log/00000000000000000000.checkpoint.3a0d65cd-4056-49b8-937b-95f9e3ee90e0.json",
        "\n".join(json.dumps(a) for a in manifest).encode(),
    )
    assert tags_of(load_snapshot(store).files) == expected()


def test_big_checkpoints_stream_tags_too(tmp_path, monkeypatch):
    """Checkpoints past 16 MiB are decoded a field and a batch at a time: tags included."""
    store = LocalStore(str(tmp_path))
    write_commit(store, 0, [commit_info(), protocol(), metadata(), *tagged_commit(300)])
    DeltaTable(str(tmp_path)).checkpoint()
    drop_commits(tmp_path, 0)
    monkeypatch.setattr(checkpoint_reader, "_SMALL_CHECKPOINT_BYTES", 0)
    assert tags_of(load_snapshot(store).files) == expected(300)


# --- liquid clustering: tags decide the cubes ----------------------------------------------------

SCHEMA = CLUSTERING_SCHEMA


def rows(seed: int) -> pa.Table:
    return clustering_rows(seed, 400)


def commit_adds(path: str, version: int) -> list[dict]:
    text = (Path(path) / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line)["add"] for line in text.splitlines() if line.startswith('{"add"')]


def live_tags(dt: DeltaTable) -> dict[str, dict[str, str] | None]:
    return tags_of(dt.snapshot.files)


def test_a_deletion_vector_re_add_keeps_the_cube(tmp_path):
    dt = DeltaTable.create(
        str(tmp_path / "t"), SCHEMA, cluster_by=["a", "b"], properties={"delta.enableDeletionVectors": "true"}
    )
    for seed in range(4):
        dt.append(rows(seed))
    dt.optimize(target_file_size=6_000)  # one cube of several files
    cube = {a["path"]: a["tags"] for a in commit_adds(dt.uri, dt.version)}
    assert len(cube) > 2 and len({t["ZCUBE_ID"] for t in cube.values()}) == 1

    dt.delete("a < 50")  # some files get a deletion vector, re-added in this commit
    re_added = commit_adds(dt.uri, dt.version)
    assert re_added and len(re_added) < len(cube) and all(a.get("deletionVector") for a in re_added)
    assert {a["path"]: a.get("tags") for a in re_added} == {a["path"]: cube[a["path"]] for a in re_added}
    assert dt.optimize(target_file_size=6_000).version is None  # still one cube
    assert live_tags(dt) == cube


def test_log_cleanup_past_the_clustering_commit_keeps_optimize_incremental(tmp_path):
    root = tmp_path / "t"
    dt = DeltaTable.create(str(root), SCHEMA, cluster_by=["a", "b"])
    for seed in range(4):
        dt.append(rows(seed))
    dt.optimize(target_file_size=6_000)
    old_cube = set(dt.snapshot.files.column("path").to_pylist())
    dt.alter.cluster_by(["c"])  # the a,b cube is another layout now: left alone unless FULL
    dt.checkpoint()
    checkpointed = dt.version
    # Every commit up to the checkpoint expires; cleanup deletes them, the checkpoint stays.
    old = int(time.time() * 1000) - 40 * DAY
    for v in range(checkpointed + 1):
        f = root / "_delta_log" / f"{v:020d}.json"
        os.utime(f, ns=((old + v * 60_000) * 1_000_000,) * 2)
    dt.append(rows(9))  # a fresh commit after the checkpoint
    plan = plan_log_cleanup(dt._store, DeltaTable(str(root)).snapshot)
    execute_log_cleanup(dt._store, plan)
    assert not (root / "_delta_log" / f"{checkpointed - 1:020d}.json").exists()

    fresh = DeltaTable(str(root))
    result = fresh.optimize(target_file_size=6_000)
    assert result.num_files_removed == 1  # only the new file
    assert {live_tags(fresh)[p]["ZCUBE_ZORDER_BY"] for p in old_cube} == {'["a","b"]'}
    assert fresh.optimize().version is None
    full = fresh.optimize(full=True)
    assert full.num_files_removed == len(old_cube) + result.num_files_added
    assert {t["ZCUBE_ZORDER_BY"] for t in live_tags(fresh).values()} == {'["c"]'}
    assert fresh.count() == 2000


def test_restore_brings_back_the_tags(tmp_path):
    dt = DeltaTable.create(str(tmp_path / "t"), SCHEMA, cluster_by=["a"])
    for seed in range(2):
        dt.append(rows(seed))
    dt.optimize()
    clustered_version = dt.version
    cube = {a["path"]: a["tags"] for a in commit_adds(dt.uri, dt.version)}
    dt.delete("a < 500")  # copy-on-write: the cube's files are replaced
    dt.restore(clustered_version)
    assert {a["path"]: a.get("tags") for a in commit_adds(dt.uri, dt.version)} == cube
    assert live_tags(dt) == cube
    assert dt.optimize().version is None


def test_enabling_row_tracking_keeps_the_tags(tmp_path):
    dt = DeltaTable.create(str(tmp_path / "t"), SCHEMA, cluster_by=["a"])
    for seed in range(2):
        dt.append(rows(seed))
    dt.optimize()
    cube = {a["path"]: a["tags"] for a in commit_adds(dt.uri, dt.version)}
    dt.alter.set_table_properties({"delta.enableRowTracking": "true"})  # re-adds every file with ids
    re_added = commit_adds(dt.uri, dt.version)
    assert re_added and all("baseRowId" in a for a in re_added)
    assert {a["path"]: a.get("tags") for a in re_added} == cube
    assert dt.optimize().version is None
    assert live_tags(dt) == cube


# --- Delta Spark keeps its tags through deltaplane's checkpoint ------------------------------------


def json_live_tags(path: str, live: set[str]) -> dict[str, dict[str, str] | None]:
    """Tags of the live files as Delta Spark wrote them in its JSON commits."""
    found: dict[str, dict[str, str] | None] = {}
    for f in sorted(Path(path, "_delta_log").glob("*.json")):
        for line in f.read_text().splitlines():
            add_action = json.loads(line).get("add") if line.strip() else None
            if add_action is not None and add_action["path"] in live:
                found[add_action["path"]] = add_action.get("tags")
    return found


def test_delta_spark_tags_survive_a_deltaplane_checkpoint(delta_spark, tmp_path):
    path = str(tmp_path / "spark_clustered")
    spark_clustered_table(delta_spark, path, range(3))
    delta_spark.sql(f"OPTIMIZE delta.`{path}`")  # Delta Spark's own ZCube
    delta_spark.sql(f"INSERT INTO delta.`{path}` VALUES {clustering_values_sql(3)}")
    live = set(DeltaTable(path).snapshot.files.column("path").to_pylist())
    written = json_live_tags(path, live)
    assert sum(1 for t in written.values() if t and "ZCUBE_ID" in t) >= 1

    dt = DeltaTable(path)
    info = dt.checkpoint()
    # Delta Spark reads deltaplane's checkpoint file: each live add carries the tags it wrote.
    in_checkpoint = delta_spark.sql(
        f"SELECT add.path AS path, add.tags AS tags FROM parquet.`{path}/{info.key}` WHERE add IS NOT NULL"
    )
    assert {r["path"]: r["tags"] for r in in_checkpoint} == written
    # The commits before the checkpoint go (as log cleanup would): both engines now know the
    # files only from deltaplane's checkpoint.
    for v in range(info.version):
        Path(path, "_delta_log", f"{v:020d}.json").unlink()
    assert tags_of(DeltaTable(path).snapshot.files) == written
    # Delta Spark clusters the new file (with its small cube); once deltaplane has checkpointed
    # that too and the older commits are gone, Delta Spark still knows its cube: nothing to do.
    delta_spark.sql(f"OPTIMIZE delta.`{path}`")
    after = DeltaTable(path)
    assert after.version == info.version + 1
    info = after.checkpoint()
    for v in range(info.version):
        Path(path, "_delta_log", f"{v:020d}.json").unlink(missing_ok=True)
    delta_spark.sql(f"OPTIMIZE delta.`{path}`")
    assert DeltaTable(path).version == info.version
    assert after.optimize().version is None  # and deltaplane agrees
    assert len(delta_spark.sql(f"SELECT * FROM delta.`{path}`")) == after.count() == 800
