"""Symlink manifests: layout, content, refusals and regeneration after commits.

Expected values come from outside the manifest code: directory names are spelled out by hand
(Hive escaping as Presto/Trino undo it), data-file lists come from ``DeltaTable.file_uris()``,
partition membership from reading the listed Parquet files and the table's rows.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.commands.manifest import (
    MANIFEST_DIR,
    MANIFEST_PROPERTY,
    check_manifest_compatible,
    execute_manifest,
    plan_manifest,
    refresh_manifest_after_commit,
)
from deltaplane.engine.errors import UnsupportedOperationError

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
ENABLED = {MANIFEST_PROPERTY: "true"}


def generate(table: DeltaTable):
    return execute_manifest(table._store, plan_manifest(table._store, table.snapshot))


def manifests(root: Path) -> dict[str, list[str]]:
    """Relative manifest directory -> its lines, read straight from disk."""
    base = root / MANIFEST_DIR
    out = {}
    for dirpath, _dirs, files in os.walk(base):
        for name in files:
            assert name == "manifest", f"unexpected file {name} in {dirpath}"
            rel = os.path.relpath(dirpath, base).replace(os.sep, "/")
            text = (Path(dirpath) / name).read_text(encoding="utf-8")
            assert text == "" or text.endswith("\n"), "every line ends with a newline"
            out["" if rel == "." else rel] = text.splitlines()
    return out


def hive_values(directory: str) -> dict[str, str | None]:
    """What a Hive/Presto reader makes of a partition directory: k=v segments, %XX unescaped."""
    out: dict[str, str | None] = {}
    for segment in directory.split("/"):
        key, _, value = segment.partition("=")
        out[unquote(key)] = None if value == "__HIVE_DEFAULT_PARTITION__" else unquote(value)
    return out


def local_path(line: str) -> str:
    assert line.startswith("file:/") and not line.startswith("file://"), line
    return line[len("file:") :]


def assert_manifest_lists_live_files(root: Path) -> dict[str, list[str]]:
    found = manifests(root)
    lines = [line for lines in found.values() for line in lines]
    assert len(lines) == len(set(lines)), "a data file is listed twice"
    assert {local_path(line) for line in lines} == set(DeltaTable(str(root)).file_uris())
    for line in lines:
        assert os.path.isfile(local_path(line)), line
    return found


# --- layout and content ---------------------------------------------------------------------------


def test_partitioned_manifest_escapes_values_and_lists_each_partitions_files(table_dir):
    schema = pa.schema([("id", pa.int64()), ("p", pa.string()), ("n", pa.int32())])
    table = DeltaTable.create(str(table_dir), schema, partition_by=["p", "n"])
    values = ["a b", "x/y", "50%", "k=v", "a:b", "é", None, "", "plain"]
    table.append(
        pa.table(
            {
                "id": pa.array(range(len(values)), pa.int64()),
                "p": values,
                "n": pa.array([1, 1, 2, 2, None, 3, 3, 3, 1], pa.int32()),
            }
        )
    )
    table.append(
        pa.table(
            {"id": pa.array([100, 101], pa.int64()), "p": ["a b", None], "n": pa.array([1, 3], pa.int32())}
        )
    )
    metrics = generate(table)

    found = assert_manifest_lists_live_files(table_dir)
    # Spelled out by hand: Hive's escapePathName, null and "" as the default partition, p before n.
    assert set(found) == {
        "p=a b/n=1",
        "p=x%2Fy/n=1",
        "p=50%25/n=2",
        "p=k%3Dv/n=2",
        "p=a%3Ab/n=__HIVE_DEFAULT_PARTITION__",
        "p=é/n=3",
        "p=__HIVE_DEFAULT_PARTITION__/n=3",
        "p=plain/n=1",
    }
    assert metrics.manifests_written == len(found) == 8 and metrics.full and metrics.partitioned
    assert metrics.data_files == len(table.file_uris())
    assert found["p=a b/n=1"] == sorted(found["p=a b/n=1"]) and len(found["p=a b/n=1"]) == 2

    # Each manifest holds exactly the rows of its partition, as a Hive reader would decode it.
    rows = table.to_arrow()
    for directory, lines in found.items():
        part = hive_values(directory)
        ids = sorted(
            i for line in lines for i in pq.read_table(local_path(line), columns=["id"])["id"].to_pylist()
        )
        p_value, n_value = part["p"], None if part["n"] is None else int(part["n"])
        # "" and null are the same partition, in Hive and in Delta
        p_mask = pc.is_null(rows["p"]) if p_value is None else pc.equal(rows["p"], p_value)
        n_mask = pc.is_null(rows["n"]) if n_value is None else pc.equal(rows["n"], n_value)
        mask = pc.fill_null(pc.and_(p_mask, n_mask), False)
        assert ids == sorted(rows.filter(mask)["id"].to_pylist()), directory


def test_unpartitioned_table_has_one_manifest_even_when_empty(table_dir):
    table = DeltaTable.create(str(table_dir), SCHEMA)
    generate(table)
    assert manifests(table_dir) == {"": []}
    assert (table_dir / MANIFEST_DIR / "manifest").read_bytes() == b""

    table.append(pa.table({"id": pa.array([1, 2], pa.int64()), "p": ["a", "b"]}))
    table.append(pa.table({"id": pa.array([3], pa.int64()), "p": ["c"]}))
    metrics = generate(table)
    found = assert_manifest_lists_live_files(table_dir)
    assert list(found) == [""] and len(found[""]) == 2
    assert metrics.manifests_written == 1 and not metrics.partitioned


def test_absolute_paths_in_the_log_are_written_as_they_are(table_dir, tmp_path):
    """A data file outside the table root (absolute path in the log) stays absolute."""
    import json

    table = DeltaTable.create(str(table_dir), SCHEMA)
    table.append(pa.table({"id": pa.array([1], pa.int64()), "p": ["a"]}))
    relative = table.snapshot.files.column("path")[0].as_py()
    outside = tmp_path / "elsewhere" / "my file.parquet"
    outside.parent.mkdir()
    os.link(table_dir / unquote(relative), outside)
    commit = table_dir / "_delta_log" / f"{table.version:020d}.json"
    lines = commit.read_text().splitlines()
    patched = []
    for line in lines:
        obj = json.loads(line)
        if "add" in obj:
            obj["add"]["path"] = "file://" + str(outside).replace(" ", "%20")
        patched.append(json.dumps(obj))
    commit.write_text("\n".join(patched) + "\n")
    table = DeltaTable(str(table_dir))
    generate(table)
    assert manifests(table_dir) == {"": [f"file:{outside}"]}


def test_stale_partition_manifests_are_deleted_after_an_overwrite(table_dir):
    table = DeltaTable.create(str(table_dir), SCHEMA, partition_by=["p"])
    table.append(pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "p": ["a", "b", "c", "c"]}))
    generate(table)
    assert set(manifests(table_dir)) == {"p=a", "p=b", "p=c"}

    table.overwrite(pa.table({"id": pa.array([10, 11], pa.int64()), "p": ["a", "d"]}))
    metrics = generate(table)
    assert set(assert_manifest_lists_live_files(table_dir)) == {"p=a", "p=d"}
    assert metrics.manifests_deleted == 2

    table.overwrite(pa.table({"id": pa.array([20], pa.int64()), "p": ["d"]}), predicate="p IN ('a', 'd')")
    generate(table)
    assert set(assert_manifest_lists_live_files(table_dir)) == {"p=d"}

    table.delete()
    generate(table)
    assert manifests(table_dir) == {}


# --- refusals -------------------------------------------------------------------------------------


def test_refused_on_tables_with_deletion_vectors(table_dir):
    table = DeltaTable.create(str(table_dir), SCHEMA, properties={"delta.enableDeletionVectors": "true"})
    with pytest.raises(UnsupportedOperationError, match=r"delta\.enableDeletionVectors"):
        generate(table)

    table.append(pa.table({"id": pa.array(range(100), pa.int64()), "p": ["a"] * 100}))
    table.delete("id < 10")
    assert table.snapshot.files.column("deletion_vector").null_count == 0  # a DV was written
    # Even with the property turned off afterwards, files that carry a DV are refused.
    metadata = table.snapshot.metadata
    off = dataclasses.replace(metadata, configuration={"delta.enableDeletionVectors": "false"})
    snapshot = dataclasses.replace(table.snapshot, metadata=off)
    with pytest.raises(UnsupportedOperationError, match="1 live file"):
        plan_manifest(table._store, snapshot)
    assert not (table_dir / MANIFEST_DIR).exists()


def test_refused_on_tables_with_column_mapping(table_dir):
    table = DeltaTable.create(str(table_dir), SCHEMA, properties={"delta.columnMapping.mode": "name"})
    table.append(pa.table({"id": pa.array([1], pa.int64()), "p": ["a"]}))
    with pytest.raises(UnsupportedOperationError, match="column mapping"):
        generate(table)
    assert not (table_dir / MANIFEST_DIR).exists()


def test_enabling_the_property_on_a_dv_table_is_refused(table_dir):
    table = DeltaTable.create(str(table_dir), SCHEMA, properties={"delta.enableDeletionVectors": "true"})
    metadata = table.snapshot.metadata
    both = dataclasses.replace(metadata, configuration={**metadata.configuration, **ENABLED})
    with pytest.raises(UnsupportedOperationError, match=re.escape(MANIFEST_PROPERTY)):
        check_manifest_compatible(both, table.snapshot.files)
    check_manifest_compatible(metadata, table.snapshot.files)  # property off: nothing to check


# --- automatic regeneration -----------------------------------------------------------------------


def commit_and_refresh(table: DeltaTable, action, *args, **kwargs):
    """Commit through the facade; its post-commit hook's manifest metrics (None if it did nothing)."""
    result = getattr(table, action)(*args, **kwargs)
    return result.manifest


def test_manifest_follows_every_commit_and_rewrites_only_changed_partitions(table_dir):
    table = DeltaTable.create(str(table_dir), SCHEMA, partition_by=["p"], properties=ENABLED)
    first = commit_and_refresh(
        table,
        "append",
        pa.table({"id": pa.array(range(6), pa.int64()), "p": ["a", "b", "c", "d", "e", None]}),
    )
    assert first.full and first.manifests_written == 6  # no manifest yet: full generation
    assert_manifest_lists_live_files(table_dir)

    mtimes = {d: (table_dir / MANIFEST_DIR / d / "manifest").stat().st_mtime_ns for d in manifests(table_dir)}
    metrics = commit_and_refresh(
        table, "append", pa.table({"id": pa.array([10, 11], pa.int64()), "p": ["b", "b"]})
    )
    assert not metrics.full and metrics.manifests_written == 1 and metrics.manifests_deleted == 0
    found = assert_manifest_lists_live_files(table_dir)
    assert len(found["p=b"]) == 2
    for d, before in mtimes.items():
        after = (table_dir / MANIFEST_DIR / d / "manifest").stat().st_mtime_ns
        assert (after != before) == (d == "p=b"), d

    metrics = commit_and_refresh(table, "delete", "p = 'c' OR p IS NULL")
    assert metrics.manifests_deleted == 2 and metrics.manifests_written == 0
    assert set(assert_manifest_lists_live_files(table_dir)) == {"p=a", "p=b", "p=d", "p=e"}

    metrics = commit_and_refresh(table, "delete", "id = 10")  # rewrites a file of p=b
    assert metrics.manifests_written == 1
    assert_manifest_lists_live_files(table_dir)

    metrics = commit_and_refresh(table, "overwrite", pa.table({"id": pa.array([7], pa.int64()), "p": ["z"]}))
    assert set(assert_manifest_lists_live_files(table_dir)) == {"p=z"}
    assert metrics.manifests_deleted == 4


def test_incremental_refresh_repairs_nothing_it_did_not_touch_but_a_missing_manifest_means_full(table_dir):
    table = DeltaTable.create(str(table_dir), SCHEMA, partition_by=["p"], properties=ENABLED)
    commit_and_refresh(table, "append", pa.table({"id": pa.array([1, 2], pa.int64()), "p": ["a", "b"]}))
    (table_dir / MANIFEST_DIR / "p=a" / "manifest").unlink()
    metrics = commit_and_refresh(table, "append", pa.table({"id": pa.array([3], pa.int64()), "p": ["a"]}))
    assert metrics.full  # the read snapshot's manifest was missing: incremental had no base
    assert set(assert_manifest_lists_live_files(table_dir)) == {"p=a", "p=b"}


def test_unpartitioned_table_refresh_and_disabled_tables(table_dir, tmp_path):
    table = DeltaTable.create(str(table_dir), SCHEMA, properties=ENABLED)
    for i in range(3):
        metrics = commit_and_refresh(table, "append", pa.table({"id": pa.array([i], pa.int64()), "p": ["x"]}))
        assert metrics.manifests_written == 1
        assert len(assert_manifest_lists_live_files(table_dir)[""]) == i + 1

    plain_dir = tmp_path / "plain"
    plain = DeltaTable.create(str(plain_dir), SCHEMA)
    assert (
        commit_and_refresh(plain, "append", pa.table({"id": pa.array([1], pa.int64()), "p": ["x"]})) is None
    )
    assert not (plain_dir / MANIFEST_DIR).exists()


def test_idempotent_skip_does_not_touch_the_manifest(table_dir):
    table = DeltaTable.create(str(table_dir), SCHEMA, properties=ENABLED)
    data = pa.table({"id": pa.array([1], pa.int64()), "p": ["x"]})
    commit_and_refresh(table, "append", data, app_id="job", app_version=1)
    assert commit_and_refresh(table, "append", data, app_id="job", app_version=1) is None
    assert len(assert_manifest_lists_live_files(table_dir)[""]) == 1


def test_a_table_that_cannot_have_a_manifest_cannot_ask_for_one(table_dir):
    for extra in ({"delta.columnMapping.mode": "name"}, {"delta.enableDeletionVectors": "true"}):
        with pytest.raises(UnsupportedOperationError, match="symlinkFormatManifest"):
            DeltaTable.create(str(table_dir), SCHEMA, properties={**ENABLED, **extra})
        assert not table_dir.exists() or not any(table_dir.rglob("*.json"))  # nothing committed


def test_the_hook_reports_a_refusal_after_the_commit(table_dir):
    table = DeltaTable.create(str(table_dir), SCHEMA, properties={"delta.columnMapping.mode": "name"})
    read = table.snapshot
    result = table.append(pa.table({"id": pa.array([1], pa.int64()), "p": ["x"]}))
    # as if the commit had turned the property on (no command here can): the hook names the commit
    metadata = dataclasses.replace(
        result.snapshot.metadata,
        configuration={**result.snapshot.metadata.configuration, **ENABLED},
    )
    result.snapshot = dataclasses.replace(result.snapshot, metadata=metadata)
    with pytest.raises(UnsupportedOperationError, match=r"commit 1 .* succeeded"):
        refresh_manifest_after_commit(table._store, read, result)


# --- S3 -------------------------------------------------------------------------------------------


@pytest.mark.xdist_group("s3")
def test_manifest_on_s3_holds_s3_uris_of_existing_objects(s3_server):
    uri = s3_server.uri()
    options = s3_server.options()
    table = DeltaTable.create(uri, SCHEMA, partition_by=["p"], storage_options=options, properties=ENABLED)
    commit_and_refresh(
        table, "append", pa.table({"id": pa.array([1, 2, 3], pa.int64()), "p": ["a b", "x/y", None]})
    )
    commit_and_refresh(table, "append", pa.table({"id": pa.array([4], pa.int64()), "p": ["a b"]}))

    client = s3_server.client()
    prefix = uri[len(f"s3://{s3_server.bucket}/") :]
    listed = client.list_objects_v2(Bucket=s3_server.bucket, Prefix=f"{prefix}/{MANIFEST_DIR}/")
    keys = sorted(o["Key"][len(prefix) + 1 :] for o in listed.get("Contents", []))
    assert keys == [
        f"{MANIFEST_DIR}/p=__HIVE_DEFAULT_PARTITION__/manifest",
        f"{MANIFEST_DIR}/p=a b/manifest",
        f"{MANIFEST_DIR}/p=x%2Fy/manifest",
    ]
    lines = []
    for key in keys:
        body = client.get_object(Bucket=s3_server.bucket, Key=f"{prefix}/{key}")["Body"].read().decode()
        lines += body.splitlines()
    assert sorted(lines) == sorted(DeltaTable(uri, storage_options=options).file_uris())
    for line in lines:
        assert line.startswith(f"s3://{s3_server.bucket}/{prefix}/"), line
        client.head_object(Bucket=s3_server.bucket, Key=line[len(f"s3://{s3_server.bucket}/") :])


def _lag(table: DeltaTable, **kwargs):
    from deltaplane.engine.commands.manifest import manifest_lag

    return manifest_lag(table._store, table.version, **kwargs)


def test_manifest_lag_counts_the_commits_that_moved_files_since_the_newest_manifest(table_dir):
    """The planner's ``manifest`` kind: due with no manifest, or once a commit added or removed
    files after the newest manifest was written (storage's clock on both sides); a commit that
    changed no file (a property) does not make the manifests stale."""
    import time

    from deltaplane.engine.maintenance_plan import MaintenancePolicy, decide

    t = DeltaTable.create(str(table_dir), SCHEMA, partition_by=["p"])
    for i in range(2):
        t.append(pa.table({"id": [i], "p": ["a"]}))
    lag = _lag(t)
    assert (lag.manifests, lag.written_ms, lag.commits_behind, lag.first_behind) == (0, None, 2, 1)

    def manifest_decision(lag, **policy):
        health = t.health()
        policy = MaintenancePolicy(enabled=("manifest",), **policy)
        return next(d for d in decide("t", health, policy, manifest=lag) if d.kind == "manifest")

    d = manifest_decision(lag)
    assert d.run and d.reason.startswith("no symlink manifest yet")
    time.sleep(0.01)  # the manifests written in a later clock tick than the last commit
    generate(t)
    lag = _lag(t)
    assert lag.manifests == 1 and lag.commits_behind == 0 and lag.written_ms is not None
    d = manifest_decision(lag)
    assert not d.run and d.reason == "the manifests are 0 commit(s) behind v2; threshold 1"
    t.alter.set_table_properties({"comment.owner": "ops"})  # v3: no file moved
    assert _lag(t).commits_behind == 0
    t.append(pa.table({"id": [7], "p": ["b"]}))  # v4
    t.optimize()  # v5: dataChange=false, but the manifest names files it removed
    lag = _lag(t)
    assert (lag.commits_behind, lag.first_behind, lag.version, lag.capped) == (2, 4, 5, False)
    d = manifest_decision(lag)
    assert d.run and d.reason.startswith("the manifests are 2 commit(s) behind v5 (first v4; threshold 1)")
    assert not manifest_decision(lag, max_manifest_commits_behind=3).run
    capped = _lag(t, max_commits=1)  # only the newest commit read: a floor, said as such
    assert capped.capped and capped.commits_behind == 1
    assert "1+ commit(s) behind" in manifest_decision(capped).reason
    d = next(d for d in decide("t", t.health(), MaintenancePolicy(), manifest=lag) if d.kind == "manifest")
    assert not d.run and d.reason == "disabled by the table's policy"  # opt-in: off by default
    time.sleep(0.01)
    generate(t)
    assert _lag(t).commits_behind == 0
    assert_manifest_lists_live_files(table_dir)


def test_a_table_that_keeps_its_manifests_after_each_commit_is_never_behind(table_dir):
    t = DeltaTable.create(str(table_dir), SCHEMA, partition_by=["p"], properties=ENABLED)
    for i in range(3):
        commit_and_refresh(t, "append", pa.table({"id": [i], "p": ["a" if i % 2 else "b"]}))
        lag = _lag(t)  # the hook wrote after the commit: at most that commit, in the same clock tick
        assert lag.commits_behind == 0 or (lag.commits_behind, lag.first_behind) == (1, t.version)
    assert _lag(t).manifests == 2
