"""Expired log cleanup: old commits and checkpoints go, every kept version stays loadable.

Commit ages are set on the commit files with ``os.utime`` (their modification time is the commit
timestamp unless in-commit timestamps are on); ``now_ms`` stays the real time.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.commands.log_cleanup import execute_log_cleanup, plan_log_cleanup
from deltaplane.engine.errors import RetentionTooShortError, VersionNotFoundError
from deltaplane.engine.snapshot import load_snapshot
from deltaplane.engine.storage import LocalStore
from tests.helpers import assert_same_rows
from tests.logbuilder import (
    CHECKPOINT_TYPES,
    add,
    checkpoint_parquet,
    commit_info,
    metadata,
    protocol,
    simple_table,
    write_commit,
    write_parquet,
)

DAY = 86_400_000
SCHEMA = pa.schema([("id", pa.int64())])
NO_AUTO_CHECKPOINT = {"delta.checkpointInterval": "1000"}


def now_ms() -> int:
    return int(time.time() * 1000)


def log_dir(root: Path) -> Path:
    return root / "_delta_log"


def set_mtime(path: Path, ms: int) -> None:
    os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000))


def age_commits(root: Path, versions, days: float) -> None:
    """Give commits increasing modification times ``days`` ago (a minute apart)."""
    base = now_ms() - int(days * DAY)
    for i, v in enumerate(versions):
        set_mtime(log_dir(root) / f"{v:020d}.json", base + i * 60_000)


def commit_versions(root: Path) -> list[int]:
    return sorted(
        int(p.name[:20])
        for p in log_dir(root).glob("*.json")
        if p.name[:20].isdigit() and p.name.count(".") == 1
    )


def checkpoint_versions(root: Path) -> list[int]:
    return sorted({int(p.name[:20]) for p in log_dir(root).glob("*.checkpoint*")})


def cleanup(table: DeltaTable, **kwargs):
    plan = plan_log_cleanup(table._store, DeltaTable(table.uri).snapshot, **kwargs)
    return plan, execute_log_cleanup(table._store, plan)


def build(root: Path, versions: int, checkpoints: set[int], properties: dict | None = None) -> list[pa.Table]:
    """A table with ``versions`` commits (create + appends), checkpoints where asked; the rows of
    every version."""
    t = DeltaTable.create(str(root), SCHEMA, properties={**NO_AUTO_CHECKPOINT, **(properties or {})})
    for v in range(1, versions):
        t.append(pa.table({"id": pa.array([v], pa.int64())}))
        if v in checkpoints:
            t.checkpoint()
    return [DeltaTable(str(root), version=v).to_arrow() for v in range(versions)]


def assert_readable_from(root: Path, earliest: int, expected: list[pa.Table]) -> None:
    store = LocalStore(str(root))
    for v in range(len(expected)):
        if v < earliest:
            with pytest.raises(VersionNotFoundError, match=f"earliest available version is {earliest}"):
                load_snapshot(store, v)
        else:
            assert load_snapshot(store, v).version == v
            assert_same_rows(DeltaTable(str(root), version=v).to_arrow(), expected[v])


def test_keeps_the_newest_expired_checkpoint_and_everything_after_it(tmp_path):
    root = tmp_path / "t"
    expected = build(root, 9, {3, 6})
    age_commits(root, range(0, 7), days=40)
    store = LocalStore(str(root))
    store.put(f"_delta_log/{2:020d}.crc", b"{}")
    store.put(f"_delta_log/{6:020d}.crc", b"{}")
    store.put(f"_delta_log/{1:020d}.{2:020d}.compacted.json", b"")
    store.put(f"_delta_log/{7:020d}.{8:020d}.compacted.json", b"")
    store.put("_delta_log/.00000000000000000001.json.crc", b"hadoop")  # Spark's local-FS side file

    plan, metrics = cleanup(DeltaTable(str(root)))

    assert (plan.cutoff_version, plan.checkpoint_version) == (6, 6)
    assert commit_versions(root) == [6, 7, 8] and checkpoint_versions(root) == [6]
    names = {p.name for p in log_dir(root).iterdir()}
    assert f"{2:020d}.crc" not in names and f"{6:020d}.crc" in names
    assert f"{1:020d}.{2:020d}.compacted.json" not in names and f"{7:020d}.{8:020d}.compacted.json" in names
    assert ".00000000000000000001.json.crc" not in names and "_last_checkpoint" in names
    assert metrics.num_deleted_commits == 6 and metrics.num_deleted_checkpoint_files == 1
    assert metrics.num_deleted_files == len(plan.files) == 10 and metrics.earliest_version == 6
    assert_readable_from(root, 6, expected)
    for name in (f"{6:020d}.crc", f"{7:020d}.{8:020d}.compacted.json"):  # placeholders, not real ones
        (log_dir(root) / name).unlink()
    theirs = deltalake.DeltaTable(str(root)).to_pyarrow_table()
    assert_same_rows(DeltaTable(str(root)).to_arrow(), theirs.select(["id"]).cast(SCHEMA))


def test_the_newest_commit_before_the_cutoff_decides_which_checkpoint_is_kept(tmp_path):
    root = tmp_path / "t"
    expected = build(root, 9, {3, 6})
    age_commits(root, range(0, 5), days=40)  # 5..8 are recent
    plan, _ = cleanup(DeltaTable(str(root)))
    assert (plan.cutoff_version, plan.checkpoint_version) == (4, 3)
    assert commit_versions(root) == list(range(3, 9)) and checkpoint_versions(root) == [3, 6]
    assert_readable_from(root, 3, expected)


def test_the_cutoff_is_midnight_utc_of_the_retention_day(tmp_path):
    root = tmp_path / "t"
    build(root, 4, {2})
    now = now_ms()
    cutoff = (now - 30 * DAY) // DAY * DAY  # the start of the UTC day 30 days ago
    assert cutoff % DAY == 0 and now - 31 * DAY < cutoff <= now - 30 * DAY
    for v, t in ((0, cutoff - 2000), (1, cutoff - 1000), (2, cutoff + 1000), (3, cutoff + 2000)):
        set_mtime(log_dir(root) / f"{v:020d}.json", t)
    plan, _ = cleanup(DeltaTable(str(root)), now_ms=now)
    assert plan.cutoff_ms == cutoff and plan.cutoff_version == 1
    assert plan.checkpoint_version is None and plan.files == ()  # the checkpoint at 2 is newer
    set_mtime(log_dir(root) / f"{2:020d}.json", cutoff)  # at the cutoff counts as expired
    plan, _ = cleanup(DeltaTable(str(root)), now_ms=now)
    assert plan.checkpoint_version == 2 and commit_versions(root) == [2, 3]


def test_nothing_is_deleted_without_a_qualifying_checkpoint(tmp_path):
    root = tmp_path / "t"
    build(root, 6, set())
    age_commits(root, range(6), days=40)
    before = sorted(p.name for p in log_dir(root).iterdir())
    plan, metrics = cleanup(DeltaTable(str(root)))
    assert plan.files == () and "no complete, readable checkpoint" in plan.skipped_reason
    assert metrics.num_deleted_files == 0 and metrics.skipped_reason == plan.skipped_reason
    assert sorted(p.name for p in log_dir(root).iterdir()) == before
    assert load_snapshot(LocalStore(str(root)), 0).version == 0


def test_a_torn_checkpoint_is_never_the_one_kept(tmp_path):
    root = tmp_path / "t"
    expected = build(root, 9, {3, 6})
    age_commits(root, range(9), days=40)
    (log_dir(root) / f"{6:020d}.checkpoint.parquet").write_bytes(b"PAR1 torn")
    plan, _ = cleanup(DeltaTable(str(root)))
    assert plan.checkpoint_version == 3
    assert commit_versions(root) == list(range(3, 9))
    assert_readable_from(root, 3, expected)  # version 6 and later: from checkpoint 3 and the commits


def test_disabled_by_the_table_property(tmp_path):
    root = tmp_path / "t"
    build(root, 5, {3}, {"delta.enableExpiredLogCleanup": "false"})
    age_commits(root, range(5), days=40)
    plan, metrics = cleanup(DeltaTable(str(root)))
    assert plan.files == () and "delta.enableExpiredLogCleanup" in metrics.skipped_reason
    assert commit_versions(root) == list(range(5))


def test_a_shorter_retention_needs_an_explicit_override(tmp_path):
    root = tmp_path / "t"
    build(root, 5, {3})
    age_commits(root, range(5), days=3)
    with pytest.raises(RetentionTooShortError, match="30 days"):
        cleanup(DeltaTable(str(root)), retention_ms=DAY)
    assert commit_versions(root) == list(range(5))
    plan, _ = cleanup(DeltaTable(str(root)), retention_ms=DAY, enforce_retention=False)
    assert plan.checkpoint_version == 3 and commit_versions(root) == [3, 4]


def test_in_commit_timestamps_decide_the_age_of_commits(tmp_path):
    root = tmp_path / "t"
    build(root, 5, {3}, {"delta.enableInCommitTimestamps": "true"})
    age_commits(root, range(5), days=40)  # file times say old, the commits themselves say now
    plan, _ = cleanup(DeltaTable(str(root)))
    assert plan.cutoff_version is None and commit_versions(root) == list(range(5))
    plan, _ = cleanup(DeltaTable(str(root)), now_ms=now_ms() + 40 * DAY)
    assert plan.checkpoint_version == 3 and commit_versions(root) == [3, 4]


# --- multi-part and V2 checkpoints ---------------------------------------------------------------


def write_multipart(
    store: LocalStore, version: int, parts: list[list[dict]], *, write: set[int] | None = None
):
    """A multi-part checkpoint (only the parts in ``write``, to leave a set incomplete)."""
    for i, actions in enumerate(parts, 1):
        if write is not None and i not in write:
            continue
        key = f"_delta_log/{version:020d}.checkpoint.{i:010d}.{len(parts):010d}.parquet"
        store.put(key, checkpoint_parquet(actions))


def multipart_table(root: Path) -> LocalStore:
    """Versions 0..5 adding part-0..part-5; a 2-part checkpoint at 2, an incomplete one at 1."""
    store = LocalStore(str(root))
    simple_table(store, versions=6)
    actions = [protocol(), metadata()]
    adds = [add(f"part-{v:05d}.parquet") for v in range(3)]
    write_multipart(store, 2, [[*actions, adds[0]], adds[1:]])
    write_multipart(store, 1, [actions, adds[:1]], write={1})
    return store


def test_multi_part_checkpoints_are_deleted_whole_and_can_be_the_one_kept(tmp_path):
    root = tmp_path / "t"
    store = multipart_table(root)
    assert load_snapshot(store, 2).segment.checkpoint.version == 2
    age_commits(root, range(6), days=40)
    plan, _ = cleanup(DeltaTable(str(root)))
    assert plan.checkpoint_version == 2
    assert [p.name for p in sorted(log_dir(root).glob("*.checkpoint.*"))] == [
        f"{2:020d}.checkpoint.0000000001.0000000002.parquet",
        f"{2:020d}.checkpoint.0000000002.0000000002.parquet",
    ]  # the incomplete set at 1 went with the commits
    for v in range(2, 6):
        assert sorted(load_snapshot(store, v).files.column("path").to_pylist()) == [
            f"part-{i:05d}.parquet" for i in range(v + 1)
        ]
    DeltaTable(str(root)).checkpoint()  # a classic checkpoint at 5: now the multi-part one goes
    plan, _ = cleanup(DeltaTable(str(root)))
    assert plan.checkpoint_version == 5 and len(plan.checkpoints) == 2
    assert checkpoint_versions(root) == [5] and commit_versions(root) == [5]
    assert DeltaTable(str(root)).to_arrow().num_rows == 18


def test_v2_sidecars_are_deleted_only_when_unreferenced_and_old(tmp_path):
    root = tmp_path / "t"
    store = LocalStore(str(root))
    v2 = protocol(3, 7, ["v2Checkpoint"], ["v2Checkpoint"])
    write_commit(store, 0, [commit_info(), v2, metadata(), add("a")])
    for v, name in ((1, "b"), (2, "c"), (3, "d")):
        write_commit(store, v, [commit_info(), add(name)])
    for version, sidecar, paths in ((1, "old-1.parquet", "ab"), (3, "keep-3.parquet", "abcd")):
        write_sidecar(store, sidecar, list(paths))
        manifest = [
            {"checkpointMetadata": {"version": version}},
            v2,
            metadata(),
            {"sidecar": {"path": sidecar, "sizeInBytes": 1, "modificationTime": 1}},
        ]
        store.put(
            f"_delta_log/{version:020d}.checkpoint.3a0d65cd-4056-49b8-937b-95f9e3ee90e{version}.json",
            "\n".join(json.dumps(a) for a in manifest).encode(),
        )
    write_sidecar(store, "orphan-old.parquet", ["z"])
    write_sidecar(store, "orphan-fresh.parquet", ["z"])  # an in-flight checkpoint's sidecar
    age_commits(root, range(4), days=40)
    for name in ("old-1.parquet", "keep-3.parquet", "orphan-old.parquet"):
        set_mtime(log_dir(root) / "_sidecars" / name, now_ms() - 40 * DAY)

    plan, _ = cleanup(DeltaTable(str(root)))

    assert plan.checkpoint_version == 3
    assert plan.sidecars == ("_delta_log/_sidecars/old-1.parquet", "_delta_log/_sidecars/orphan-old.parquet")
    assert sorted(p.name for p in (log_dir(root) / "_sidecars").iterdir()) == [
        "keep-3.parquet",
        "orphan-fresh.parquet",
    ]
    assert commit_versions(root) == [3] and checkpoint_versions(root) == [3]
    assert sorted(load_snapshot(store, 3).files.column("path").to_pylist()) == ["a", "b", "c", "d"]


def write_sidecar(store: LocalStore, name: str, paths: list[str]) -> None:
    typ = CHECKPOINT_TYPES["add"]
    adds = [
        {
            "path": p,
            "partitionValues": [],
            "size": 1,
            "modificationTime": 1,
            "dataChange": True,
            "stats": None,
        }
        for p in paths
    ]
    write_parquet(store, f"_delta_log/_sidecars/{name}", pa.table({"add": pa.array(adds, typ)}))


# --- checkpointProtection ------------------------------------------------------------------------


@pytest.mark.parametrize(("protected_before", "deleted"), [(5, False), (3, True)])
def test_checkpoint_protection_allows_only_a_cleanup_reaching_the_protected_version(
    tmp_path, protected_before, deleted
):
    root = tmp_path / "t"
    store = LocalStore(str(root))
    config = {"delta.requireCheckpointProtectionBeforeVersion": str(protected_before)}
    write_commit(
        store,
        0,
        [
            commit_info(),
            protocol(1, 7, None, ["checkpointProtection"]),
            metadata(configuration=config),
            add("a"),
        ],
    )
    for v in range(1, 6):
        write_commit(store, v, [commit_info(), add(f"f{v}")])
    DeltaTable(str(root), version=3).checkpoint()
    age_commits(root, range(6), days=40)
    plan, metrics = cleanup(DeltaTable(str(root)))
    if deleted:
        assert plan.checkpoint_version == 3 and commit_versions(root) == [3, 4, 5]
    else:
        assert "checkpointProtection" in metrics.skipped_reason and "5" in metrics.skipped_reason
        assert commit_versions(root) == list(range(6))
    assert load_snapshot(store).version == 5
