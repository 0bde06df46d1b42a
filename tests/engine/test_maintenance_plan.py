"""The maintenance planner: a decision per table and kind of work with the numbers behind it, a
ranking across tables by benefit over cost, budgets and the job cap. Health comes from real
tables (their shapes: a streaming table's small files, a quiet table, DV deletes, a checkpoint
lag, removed files past the retention)."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.health import PartitionHealth, Spending, table_health
from deltaplane.engine.health_tracker import HealthTracker
from deltaplane.engine.maintenance_plan import Decision, MaintenancePolicy, decide, rank
from deltaplane.engine.snapshot import load_snapshot
from deltaplane.engine.storage import LocalStore

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string())])
SMALL = 1 << 20


def tracker_of(path) -> HealthTracker:
    return HealthTracker.from_snapshot(load_snapshot(LocalStore(str(path))), small_file_size=SMALL)


def streaming_table(path, commits: int, day: str = "d1") -> DeltaTable:
    DeltaTable.create(
        str(path), SCHEMA, partition_by=["day"], configuration={"delta.checkpointInterval": "1000"}
    )
    t = DeltaTable(str(path))
    for i in range(commits):
        t.append(pa.table({"id": [i], "day": [day]}))
    return t


def by_kind(decisions):
    return {d.kind: d for d in decisions}


def test_each_kind_runs_past_its_threshold_and_says_why(tmp_path):
    streaming_table(tmp_path / "s", 12)
    policy = MaintenancePolicy(small_file_size=SMALL, min_small_files=10, max_versions_since_checkpoint=10)
    t = tracker_of(tmp_path / "s")
    d = by_kind(decide("stream", t.health(), policy, removed=t.removed_files(retention_ms=0)))
    assert d["compaction"].run and d["compaction"].reason.startswith(
        "12 small files (< 1.0 MiB) in 1 partition"
    )
    assert d["compaction"].partitions == ({"day": "d1"},) and d["compaction"].engine == "local"
    assert "in-process" in d["compaction"].reason
    assert d["checkpoint"].run and d["checkpoint"].reason.startswith("13 commits since the last checkpoint")
    assert not d["dv_purge"].run and "hide at most 0%" in d["dv_purge"].reason
    assert not d["vacuum"].run and d["vacuum"].reason.startswith("0 B removed more than 168 h ago")

    quiet = MaintenancePolicy(small_file_size=SMALL)  # defaults: 50 files, 100 commits
    d = by_kind(decide("stream", t.health(), quiet))
    assert not d["compaction"].run and d["compaction"].reason == (
        "12 small files (< 1.0 MiB) in the table; threshold 50"
    )
    assert (
        not d["checkpoint"].run
        and d["checkpoint"].reason == "13 commits since the last checkpoint; threshold 100"
    )
    assert "unknown" in d["vacuum"].reason  # no tracker's removed files given
    # a policy that turns kinds off says so
    off = MaintenancePolicy(small_file_size=SMALL, enabled=("checkpoint",))
    assert by_kind(decide("stream", t.health(), off))["compaction"].reason == "disabled by the table's policy"


def test_deletion_vectors_and_removed_files(tmp_path):
    path = tmp_path / "dv"
    DeltaTable.create(str(path), SCHEMA, configuration={"delta.enableDeletionVectors": "true"})
    t = DeltaTable(str(path))
    t.append(pa.table({"id": list(range(100)), "day": ["d"] * 100}))
    t.delete("id < 30")
    tracker = tracker_of(path)
    policy = MaintenancePolicy(small_file_size=SMALL, max_deleted_rows_ratio=0.2, min_vacuum_bytes=1)
    d = by_kind(decide("dv", tracker.health(), policy, removed=tracker.removed_files(retention_ms=0)))
    assert d["dv_purge"].run and d["dv_purge"].reason.startswith(
        "deletion vectors hide 30 rows (30%) in 1 partition"
    )
    t.optimize(purge=True)  # the purge removes the file: past a 0-hour retention it is VACUUM's
    tracker.advance(LocalStore(str(path)))
    removed = tracker.removed_files(now_ms=tracker.timestamp + 10, retention_ms=0)
    d = by_kind(decide("dv", tracker.health(), policy, removed=removed))
    assert not d["dv_purge"].run
    assert d["vacuum"].run and d["vacuum"].reason.startswith("frees ") and "2 files" in d["vacuum"].reason


def test_ranking_budgets_and_the_job_cap(tmp_path):
    streaming_table(tmp_path / "busy", 30)
    streaming_table(tmp_path / "some", 12)
    policy = MaintenancePolicy(small_file_size=SMALL, min_small_files=10, max_versions_since_checkpoint=1000)
    decisions = []
    for name in ("some", "busy"):
        decisions += decide(name, tracker_of(tmp_path / name).health(), policy)
    policies = {"some": policy, "busy": policy}
    ranked = rank(decisions, policies)
    assert [(d.table, d.kind) for d in ranked if d.run] == [("busy", "compaction"), ("some", "compaction")]
    assert ranked[0].score > ranked[1].score > 0
    # skips come after, in table order
    assert all(not d.run for d in ranked[2:]) and [d.table for d in ranked[2:]] == ["busy"] * 6 + ["some"] * 6
    # a daily budget the busy table already spent
    tight = {
        "some": policy,
        "busy": MaintenancePolicy(small_file_size=SMALL, max_bytes_rewritten_per_day=1000),
    }
    ranked = rank(decisions, tight, spent_today={"busy": Spending(0, bytes_rewritten=900)})
    busy = next(d for d in ranked if d.table == "busy" and d.kind == "compaction")
    assert not busy.run and busy.reason.startswith("over budget: 900 B rewritten today + ")
    assert "(would: 30 small files" in busy.reason
    # a daily budget of CPU seconds: the rewrite's CPU is its bytes at the table's own rate
    rate = Spending(0, cpu_seconds=50.0, cpu_seconds_per_gib=1e6)
    decisions = []
    for name in ("some", "busy"):
        decisions += decide(name, tracker_of(tmp_path / name).health(), policy, spending=rate)
    busy = next(d for d in decisions if d.table == "busy" and d.kind == "compaction")
    assert busy.cpu_seconds == pytest.approx(busy.bytes_rewritten / (1 << 30) * 1e6) and busy.cpu_seconds > 10
    assert busy.to_dict()["cpu_seconds"] == round(busy.cpu_seconds, 3)
    cpu = {"some": policy, "busy": MaintenancePolicy(small_file_size=SMALL, max_cpu_seconds_per_day=60)}
    ranked = rank(decisions, cpu, spent_today={"busy": rate})
    busy = next(d for d in ranked if d.table == "busy" and d.kind == "compaction")
    assert not busy.run and busy.reason.startswith("over budget: 50 CPU-s spent today + ~"), busy.reason
    assert "> 60 CPU-s a day" in busy.reason
    assert next(d for d in ranked if d.table == "some" and d.kind == "compaction").run  # no budget there
    ranked = rank(decisions, cpu, spent_today={"busy": Spending(0, cpu_seconds_per_gib=1e6)})
    assert next(d for d in ranked if d.table == "busy" and d.kind == "compaction").run  # fits a fresh day
    # one job at a time, one already running: everything waits
    ranked = rank(decisions, policies, max_concurrent_jobs=1, running=1)
    assert not any(d.run for d in ranked)
    assert next(d for d in ranked if d.table == "busy" and d.kind == "compaction").reason.startswith(
        "waits: 1"
    )
    ranked = rank(decisions, policies, max_concurrent_jobs=1)
    assert [(d.table, d.kind) for d in ranked if d.run] == [("busy", "compaction")]


def test_spark_above_the_threshold(tmp_path):
    streaming_table(tmp_path / "s", 10)
    policy = MaintenancePolicy(small_file_size=SMALL, min_small_files=10, spark_threshold_bytes=100)
    d = by_kind(decide("s", tracker_of(tmp_path / "s").health(), policy))["compaction"]
    assert d.engine == "spark" and "Spark job (" in d.reason and ">= spark_threshold 100 B" in d.reason


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"enabled": ("compaction", "defrag")}, "unknown kind"),
        ({"max_deleted_rows_ratio": 1.5}, "between 0 and 1"),
        ({"min_small_files": 0}, "at least 1"),
        ({"max_manifest_commits_behind": 0}, "at least 1"),
        ({"min_tier_files": 1}, "at least 2"),
        ({"max_cpu_seconds_per_day": 0}, "positive"),
        ({"max_cpu_seconds_per_day": float("nan")}, "positive"),
    ],
)
def test_bad_policies_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MaintenancePolicy(**kwargs)


def test_a_table_full_of_small_files_across_partitions_is_compacted(tmp_path):
    """Four partitions of 4 small files: no partition reaches 10, the table does (a full read
    opens all 16); only partitions with two or more are chosen, and only their small files are
    rewritten (min_file_size)."""
    path = tmp_path / "t"
    DeltaTable.create(str(path), SCHEMA, partition_by=["day"])
    t = DeltaTable(str(path))
    for i in range(16):
        t.append(pa.table({"id": [i], "day": [f"d{i % 4}"]}))
    policy = MaintenancePolicy(small_file_size=SMALL, min_small_files=10)
    d = by_kind(decide("t", tracker_of(path).health(), policy))["compaction"]
    assert d.run and d.reason.startswith("16 small files (< 1.0 MiB) in the table (>= 10), 4 partition(s)")
    assert len(d.partitions) == 4 and d.details["min_file_size"] == SMALL
    # piled-up files under the target: a full compaction once there are max_files_below_target
    full = MaintenancePolicy(small_file_size=SMALL, min_small_files=100, max_files_below_target=16)
    d = by_kind(decide("t", tracker_of(path).health(), full))["compaction"]
    assert d.run and d.reason.startswith("16 files under the target 128.0 MiB in the table (threshold 16)")
    assert d.partitions == () and d.details["min_file_size"] == full.target_file_size


def _run_compaction(t: DeltaTable, decision, target: int) -> None:
    from deltaplane.engine.commands.optimize import execute_optimize, plan_optimize

    plan = plan_optimize(
        t._latest_for_write(),
        target_file_size=target,
        partitions=list(decision.partitions) or None,
        min_file_size=decision.details["min_file_size"],
    )
    assert plan.bins, decision.reason  # a decision to compact always has something to do
    execute_optimize(t._store, plan)


@pytest.mark.parametrize("tiers", [4, 2, None])
def test_size_tiers_merge_what_small_file_compaction_left_behind(tmp_path, tiers):
    """A streaming table compacted whenever it has 4 small files: each compaction's output is
    past the small size, and small-file compaction never looks at it again. Without size tiers
    those files pile up, one per compaction, forever; with them the next look merges a tier
    under half the target once it holds ``min_tier_files`` files, and the table's file count
    stays bounded while every decision to compact does something."""
    path = tmp_path / "t"
    DeltaTable.create(str(path), SCHEMA, configuration={"delta.checkpointInterval": "1000"})
    t = DeltaTable(str(path))
    t.append(pa.table({"id": list(range(200)), "day": ["d"] * 200}))
    one = t.snapshot.files.column("size").to_pylist()[0]
    small = 2 * one  # an append is small; four compacted together are not
    target = 64 * small
    policy = MaintenancePolicy(
        small_file_size=small, min_small_files=4, target_file_size=target, min_tier_files=tiers
    )
    tracker = HealthTracker.from_snapshot(t.snapshot, small_file_size=small)
    counts, tiered = [], 0
    for round_ in range(40):
        t.append(pa.table({"id": list(range(200 * round_, 200 * round_ + 200)), "day": ["d"] * 200}))
        tracker.advance(t._store)
        before = tracker.health()
        d = by_kind(decide("t", before, policy))["compaction"]
        (p,) = before.partitions
        due = tiers is not None and any(
            n >= tiers for k, n in enumerate(p.tier_files) if small << (k + 1) <= target // 2
        )
        assert ("size tier" in d.reason) == due and (d.run or not due)
        if d.run:
            tiered += due
            _run_compaction(t, d, target)
            tracker.advance(t._store)
        health = tracker.health()
        assert health == table_health(load_snapshot(LocalStore(str(path))), small_file_size=small)
        if tiers is not None:  # a tier under half the target holds at most min_tier_files files
            (p,) = health.partitions  # (the compaction that just ran may have made the last one)
            assert all(n <= tiers for k, n in enumerate(p.tier_files) if small << (k + 1) <= target // 2)
        counts.append(health.num_files)
    assert DeltaTable(str(path)).count() == 200 * 41  # nothing lost or doubled on the way
    if tiers is None:
        assert tiered == 0 and counts[-1] >= 10  # a frozen file every 4 appends, forever
        assert counts[-1] > counts[20] + 3
    else:
        assert tiered > 0 and max(counts) <= 4 + tiers, counts


def test_size_tiers_stop_under_half_the_target(tmp_path):
    """A tier whose files could not pair up inside the target (two of them over it) is never
    merged: such a plan would have nothing to do, and the decision would come back every poll."""
    base = dict(small_file_size=SMALL, min_small_files=50, min_tier_files=2)
    path = tmp_path / "t"
    DeltaTable.create(str(path), SCHEMA)
    health = tracker_of(path).health()
    part = dataclasses.replace(
        _partition("", {}), num_files=3, tier_files=(0, 0, 3, 0, 0, 0, 0, 0),
        tier_bytes=(0, 0, 3 * 5 * SMALL, 0, 0, 0, 0, 0),
    )  # fmt: skip
    health = dataclasses.replace(health, partitions=(part,), num_files=3)
    # tier 2: files of 4 to 8 small sizes; with a target of 16 two fit, with 15 they may not
    d = by_kind(decide("t", health, MaintenancePolicy(**base, target_file_size=16 * SMALL)))["compaction"]
    assert d.run and d.details["min_file_size"] == 8 * SMALL
    assert "1 partition(s) with >= 2 files in a size tier: files under 8.0 MiB merge" in d.reason
    assert d.bytes_rewritten == 15 * SMALL and d.details["files"] == 3
    d = by_kind(decide("t", health, MaintenancePolicy(**base, target_file_size=15 * SMALL)))["compaction"]
    assert not d.run
    off = MaintenancePolicy(**{**base, "min_tier_files": None}, target_file_size=16 * SMALL)
    assert not by_kind(decide("t", health, off))["compaction"].run


def _partition(name, values):
    return PartitionHealth(name, values, 0, 0, 0, 0, 0, 0)


def test_optimize_leaves_files_past_the_min_file_size_alone(tmp_path):
    from deltaplane.engine.commands.optimize import plan_optimize

    path = tmp_path / "t"
    DeltaTable.create(str(path), SCHEMA)
    t = DeltaTable(str(path))
    t.append(pa.table({"id": list(range(50_000)), "day": ["d"] * 50_000}))  # one larger file
    for i in range(3):
        t.append(pa.table({"id": [i], "day": ["d"]}))
    sizes = sorted(t.snapshot.files.column("size").to_pylist())
    big = sizes[-1]
    everything = plan_optimize(t.snapshot, target_file_size=big * 10)
    assert everything.num_files == 4  # OPTIMIZE's default: every file under the target
    small_only = plan_optimize(t.snapshot, target_file_size=big * 10, min_file_size=big)
    assert small_only.num_files == 3 and big not in [s for b in small_only.bins for s in [b.size]]
    t.optimize(min_num_files=2)  # the engine call still compacts everything by default
    assert t.snapshot.num_files == 1


# --- yielding to writers ----------------------------------------------------------------------


def _partitioned(tmp_path, name="yield") -> DeltaTable:
    schema = pa.schema([("id", pa.int64()), ("p", pa.string())])
    t = DeltaTable.create(
        str(tmp_path / name), schema, partition_by=["p"], properties={"delta.enableDeletionVectors": "true"}
    )
    for b in range(3):
        t.append(pa.table({"id": [3 * b, 3 * b + 1, 3 * b + 2], "p": ["a", "b", "c"]}, schema=schema))
    return t


def test_recent_row_changes_name_the_partitions_a_dml_touched(tmp_path):
    from deltaplane.engine.tail import partitions_of, recent_row_changes

    t = _partitioned(tmp_path)
    t.delete("id = 1")  # partition b (a DV)
    t.update({"id": "id + 100"}, "id = 2")  # partition c
    t.optimize()  # not a row change
    t.append(pa.table({"id": [9], "p": ["a"]}, schema=t.schema))  # an append: not a row change
    snapshot = load_snapshot(t._store)
    changes = recent_row_changes(t._store, snapshot, since_ms=0)
    assert [(c.version, c.operation) for c in changes] == [(5, "UPDATE"), (4, "DELETE")]
    assert [partitions_of(c) for c in changes] == [[{"p": "c"}], [{"p": "b"}]]
    # the window: nothing older than since_ms, and at most max_commits looked at
    assert recent_row_changes(t._store, snapshot, since_ms=snapshot.timestamp + 1) == []
    assert recent_row_changes(t._store, snapshot, since_ms=0, max_commits=2) == []


def _compaction(partitions, bytes_rewritten=300) -> Decision:
    return Decision(
        "t", "compaction", True, "3 small files", 2.0, bytes_rewritten, tuple(partitions), "local"
    )


def test_yield_to_writers_leaves_busy_partitions_out_and_says_so():
    from deltaplane.engine.maintenance_plan import yield_to_writers

    wanted = [_compaction([{"p": "a"}, {"p": "b"}, {"p": "c"}]), Decision("t", "checkpoint", True, "lag")]
    busy = [({"p": "b"}, "DELETE v4, 1 min ago")]
    out = yield_to_writers(wanted, busy)
    assert out[0].run and out[0].partitions == ({"p": "a"}, {"p": "c"}) and out[0].bytes_rewritten == 200
    assert out[0].reason.endswith("1 partition(s) left to concurrent DML (DELETE v4, 1 min ago)")
    assert out[1] == wanted[1]  # other kinds are not rewrites: untouched
    every = yield_to_writers(wanted, [*busy, ({"p": "a"}, "MERGE v5, 0 min ago"), ({"p": "c"}, "x")])
    assert not every[0].run and every[0].reason.startswith("yields to writers: 3 partition(s) left")
    # no partitions (an unpartitioned table's {}), or a full compaction (no partition list): no yield
    assert yield_to_writers([_compaction([{}])], [({}, "DELETE v1")])[0].run
    assert yield_to_writers([_compaction([])], busy)[0].partitions == ()
    assert yield_to_writers(wanted, []) == wanted


def test_a_policy_from_settings_names_a_wrong_key():
    from deltaplane.engine.errors import InvalidArgumentError

    policy = MaintenancePolicy.from_dict({"min_small_files": 4, "enabled": ["vacuum"]})
    assert policy.enabled == ("vacuum",) and MaintenancePolicy.from_dict(policy.to_dict()) == policy
    with pytest.raises(InvalidArgumentError, match=r"unknown policy key\(s\) \['min_smal_files'\]"):
        MaintenancePolicy.from_dict({"min_smal_files": 4})
    with pytest.raises(InvalidArgumentError, match="must be at least 1"):
        MaintenancePolicy.from_dict({"min_small_files": 0})


def test_a_liquid_clustered_table_is_clustered_once_enough_new_files_wait(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    t = DeltaTable.create(str(tmp_path / "liquid"), schema, cluster_by=["id"])
    for i in range(6):
        t.append(pa.table({"id": [i], "v": ["x"]}, schema))
    policy = MaintenancePolicy(small_file_size=SMALL, min_small_files=3, min_unclustered_files=5)
    d = by_kind(decide("l", tracker_of(tmp_path / "liquid").health(), policy))
    assert d["clustering"].run and d["clustering"].reason.startswith("6 files (")
    assert "not clustered yet (threshold 5): OPTIMIZE clusters them; in-process" in d["clustering"].reason
    assert not d["compaction"].run and "rewritten by clustering" in d["compaction"].reason
    t.optimize()
    d = by_kind(decide("l", tracker_of(tmp_path / "liquid").health(), policy))
    assert not d["clustering"].run and d["clustering"].reason.startswith("0 files (0 B) not clustered")
    # without the clustering kind, compaction takes the small files as for any table
    only = MaintenancePolicy(small_file_size=SMALL, min_small_files=1, enabled=("compaction",))
    t.append(pa.table({"id": [7], "v": ["y"]}, schema))
    t.append(pa.table({"id": [8], "v": ["y"]}, schema))
    d = by_kind(decide("l", tracker_of(tmp_path / "liquid").health(), only))
    assert d["compaction"].run and d["clustering"].reason == "disabled by the table's policy"
    # a table that is not clustered
    streaming_table(tmp_path / "plain", 3)
    d = by_kind(decide("p", tracker_of(tmp_path / "plain").health(), policy))
    assert d["clustering"].reason == "not a liquid-clustered table"


def age_log(path, days: float) -> None:
    """Every log file written ``days`` ago (what a table that has lived that long looks like)."""
    import os
    import time

    when = time.time() - days * 86400
    for f in (path / "_delta_log").iterdir():
        os.utime(f, (when, when))


def test_log_cleanup_is_due_a_day_past_the_retention_with_a_checkpoint_after(tmp_path):
    import time

    t = streaming_table(tmp_path / "old", 6)
    now = int(time.time() * 1000)
    policy = MaintenancePolicy(small_file_size=SMALL, min_small_files=100)
    d = by_kind(decide("old", tracker_of(tmp_path / "old").health(), policy, now_ms=now))
    assert not d["log_cleanup"].run and "the log keeps 30 days" in d["log_cleanup"].reason
    age_log(tmp_path / "old", 40)
    d = by_kind(decide("old", tracker_of(tmp_path / "old").health(), policy, now_ms=now))
    assert not d["log_cleanup"].run and "no checkpoint follows it" in d["log_cleanup"].reason
    t.checkpoint()
    age_log(tmp_path / "old", 40)
    tracker = tracker_of(tmp_path / "old")
    d = by_kind(decide("old", tracker.health(), policy, now_ms=now))
    assert d["log_cleanup"].run, d["log_cleanup"].reason
    assert d["log_cleanup"].reason.startswith(
        "the oldest commit (v0) is 10.0 days past the 30-day log retention"
    )
    # the cleanup runs (elsewhere); the tracker sees the oldest commit gone at its next look
    t.cleanup_log()
    tracker.advance(LocalStore(str(tmp_path / "old")))
    assert tracker.health().oldest_log_version == 6
    assert tracker.health() == tracker_of(tmp_path / "old").health()
    d = by_kind(decide("old", tracker.health(), policy, now_ms=now))
    assert not d["log_cleanup"].run
