"""OPTIMIZE: compaction, deletion-vector purge, Z-order; rows unchanged, read back by delta-rs."""

from __future__ import annotations

import itertools
import json
import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltaplane.engine import DeltaTable
from deltaplane.engine.commands.optimize import OptimizeError, OptimizePlan, execute_optimize, plan_optimize
from deltaplane.engine.commands.zorder import bits_per_column, interleave, rank_codes, zorder_key
from deltaplane.engine.errors import CommitConflictError, InvalidPredicateError
from tests.engine.test_write import delta_rs_rows
from tests.helpers import assert_same_rows

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("x", pa.float64()), ("day", pa.string())])


def batch(start: int, n: int, days=("d1", "d2")) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": ids,
            "name": [f"n{i % 97}" for i in ids],
            "x": [float((i * 7919) % 1000) for i in ids],
            "day": [days[i % len(days)] for i in ids],
        },
        schema=SCHEMA,
    )


def many_small_files(tmp_path, n_appends: int = 12, props=None, name="t") -> DeltaTable:
    t = DeltaTable.create(str(tmp_path / name), SCHEMA, partition_by=["day"], properties=props or {})
    for i in range(n_appends):
        t.append(batch(i * 50, 50))
    return t


def sorted_rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def commit_actions(t: DeltaTable, version: int) -> list[dict]:
    path = f"{t.uri}/_delta_log/{version:020d}.json"
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def test_compaction_keeps_every_row_and_commits_without_data_change(tmp_path):
    t = many_small_files(tmp_path)
    before = sorted_rows(t.to_arrow())
    assert len(t.snapshot.files) == 24
    m = t.optimize()
    assert m.version == 13 and m.num_files_removed == 24 and m.num_files_added == 2
    assert m.partitions_optimized == 2 and m.num_bins == 2
    assert sorted_rows(t.to_arrow()) == before
    assert len(DeltaTable(t.uri).snapshot.files) == 2
    actions = commit_actions(t, 13)
    adds = [a["add"] for a in actions if "add" in a]
    removes = [a["remove"] for a in actions if "remove" in a]
    assert len(adds) == 2 and len(removes) == 24
    assert not any(a["dataChange"] for a in adds) and not any(r["dataChange"] for r in removes)
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["operation"] == "OPTIMIZE"
    assert info["operationMetrics"]["numRemovedFiles"] == "24"
    assert info["operationMetrics"]["numAddedFiles"] == "2"
    # every added file's statistics count its rows exactly
    for a in adds:
        stats = json.loads(a["stats"])
        assert stats["numRecords"] == 300
    for version in range(t.version + 1):
        ours = DeltaTable(t.uri, version=version).to_arrow()
        assert_same_rows(ours, delta_rs_rows(t.uri, version).select(ours.column_names).cast(ours.schema))


def test_a_second_optimize_has_nothing_to_do(tmp_path):
    t = many_small_files(tmp_path)
    t.optimize()
    m = t.optimize()
    assert m.version is None and m.num_files_removed == 0 and m.total_considered_files == 2
    assert t.version == 13


def test_bins_respect_the_target_size_and_the_minimum_file_count(tmp_path):
    t = many_small_files(tmp_path, n_appends=12)
    sizes = t.snapshot.files.column("size").to_pylist()
    target = int(max(sizes) * 4.5)  # about four files per bin
    plan = t.optimize(target_file_size=target, dry_run=True)
    assert isinstance(plan, OptimizePlan) and plan.read_version == t.version
    assert all(b.size <= target for b in plan.bins)
    assert all(len(b.paths) >= 2 for b in plan.bins)
    assert sum(len(b.paths) for b in plan.bins) == 24
    assert t.version == 12  # a dry run commits nothing
    # a high minimum leaves partitions with fewer small files alone
    assert t.optimize(min_num_files=13, dry_run=True).bins == ()
    assert len(t.optimize(min_num_files=12, dry_run=True).bins) == 2


def test_files_at_the_target_size_are_left_alone(tmp_path):
    t = many_small_files(tmp_path, n_appends=4)
    big = DeltaTable.create(str(tmp_path / "big"), SCHEMA, partition_by=["day"])
    big.append(batch(0, 20000))
    big.append(batch(20000, 50))
    big.append(batch(20050, 50))
    big_size = max(big.snapshot.files.column("size").to_pylist())
    plan = big.optimize(target_file_size=big_size, dry_run=True)
    assert big_size not in {b.size for b in plan.bins}  # the big files are not candidates
    assert plan.total_files_skipped == 2
    assert len(plan.bins) == 2 and all(len(b.paths) == 2 for b in plan.bins)
    assert t.optimize(dry_run=True).total_considered_files == 8


def test_partition_filter(tmp_path):
    t = many_small_files(tmp_path)
    m = t.optimize(filter="day = 'd1'")
    assert m.num_files_removed == 12 and m.partitions_optimized == 1
    files = t.snapshot.files
    per_day = pc.value_counts(pc.struct_field(files.column("partition_values"), "day")).to_pylist()
    assert {d["values"]: d["counts"] for d in per_day} == {"d1": 1, "d2": 12}
    info = t.history(1)[0]
    assert info["operationParameters"]["predicate"] == json.dumps(["day = 'd1'"])
    with pytest.raises(InvalidPredicateError, match="partition columns"):
        t.optimize(filter="id > 5")


def test_deletion_vectors_are_purged(tmp_path):
    props = {"delta.enableDeletionVectors": "true"}
    t = DeltaTable.create(str(tmp_path / "dv"), SCHEMA, properties=props)
    t.append(batch(0, 1000, days=("d1",)))
    t.append(batch(1000, 1000, days=("d1",)))
    t.delete("id < 10")  # 1% of the first file: below the 5% ratio
    t.delete("id >= 1000 AND id < 1200")  # 20% of the second file
    expected = sorted_rows(t.to_arrow())
    size = max(t.snapshot.files.column("size").to_pylist())
    # both files are at the target size: only the heavily deleted one is rewritten (alone)
    plan = t.optimize(target_file_size=size // 2, dry_run=True)
    assert len(plan.bins) == 1 and plan.bins[0].deleted_rows == 200
    m = t.optimize(target_file_size=size // 2)
    assert m.num_deletion_vectors_removed == 1 and m.num_deleted_rows_purged == 200
    assert sorted_rows(t.to_arrow()) == expected
    dvs = t.snapshot.files.column("deletion_vector")
    assert len(dvs) - dvs.null_count == 1
    # purge=True rewrites every file that still has a deletion vector
    m = t.optimize(target_file_size=size // 2, purge=True)
    assert m.num_deletion_vectors_removed == 1
    assert t.snapshot.files.column("deletion_vector").null_count == len(t.snapshot.files)
    assert sorted_rows(t.to_arrow()) == expected
    ours = t.to_arrow()
    assert_same_rows(ours, delta_rs_rows(t.uri).select(ours.column_names).cast(ours.schema))


def test_zorder_keeps_rows_and_makes_every_column_skippable(tmp_path):
    rng = np.random.default_rng(3)
    n = 40_000
    data = pa.table(
        {
            "a": rng.integers(0, 1_000_000, n),
            "b": rng.integers(0, 1_000_000, n),
            "s": pa.array([f"k{v:07d}" for v in rng.integers(0, 10_000_000, n)]),
        }
    )
    schema = data.schema
    t = DeltaTable.create(str(tmp_path / "z"), schema)
    for chunk in range(16):
        t.append(data.slice(chunk * (n // 16), n // 16))
    before = t.to_arrow()

    def files_read(column: str, value) -> int:
        literal = f"'{value}'" if isinstance(value, str) else str(value)
        return len(t.file_uris(filter=f"{column} = {literal}"))

    probes = {c: data.column(c).to_pylist()[:: n // 20] for c in ("a", "b", "s")}
    unordered = {c: np.mean([files_read(c, v) for v in vs]) for c, vs in probes.items()}
    target = int(sum(t.snapshot.files.column("size").to_pylist()) / 64)
    m = t.optimize(target_file_size=target, zorder_by=["a", "b", "s"])
    assert m.num_files_removed == 16 and 56 <= m.num_files_added <= 72  # about 64
    assert_same_rows(t.to_arrow(), before)
    num_files = len(t.snapshot.files)
    ordered = {c: np.mean([files_read(c, v) for v in vs]) for c, vs in probes.items()}
    for c in probes:
        assert unordered[c] == 16  # random data: every file's range covers every value
        # ~6 bits of the curve over 3 columns: each column's range is cut in about four
        assert ordered[c] <= num_files * 0.35, (c, ordered[c], num_files)
    info = t.history(1)[0]
    assert json.loads(info["operationParameters"]["zOrderBy"]) == ["a", "b", "s"]
    ours = t.to_arrow()
    assert_same_rows(ours, delta_rs_rows(t.uri).select(ours.column_names).cast(ours.schema))


def test_zorder_refuses_columns_that_cannot_help(tmp_path):
    t = many_small_files(tmp_path)
    with pytest.raises(OptimizeError, match="partition column"):
        t.optimize(zorder_by=["day"])
    with pytest.raises(OptimizeError, match="no such column"):
        t.optimize(zorder_by=["nope"])
    with pytest.raises(OptimizeError, match="twice"):
        t.optimize(zorder_by=["id", "id"])
    narrow = DeltaTable.create(
        str(tmp_path / "narrow"), SCHEMA, properties={"delta.dataSkippingNumIndexedCols": "1"}
    )
    narrow.append(batch(0, 10))
    with pytest.raises(OptimizeError, match="statistics"):
        narrow.optimize(zorder_by=["x"])
    assert narrow.version == 1 and t.version == 12


def test_appends_committed_while_optimize_runs_do_not_conflict_and_are_kept(tmp_path):
    t = many_small_files(tmp_path)
    plan = plan_optimize(t.snapshot)
    other = DeltaTable(t.uri)
    for i in range(3):
        other.append(batch(10_000 + i * 10, 10))  # lands between planning and committing
    m = execute_optimize(t._store, plan)
    assert m.version == 16 and m.commit.attempts == 2
    ids = DeltaTable(t.uri).to_arrow().column("id").to_pylist()
    assert sorted(ids) == list(range(600)) + list(range(10_000, 10_030))


def test_a_concurrent_appender_never_fails_and_loses_nothing(tmp_path):
    t = many_small_files(tmp_path, n_appends=20)
    errors: list[BaseException] = []
    stop = threading.Event()
    appended: list[int] = []

    def appender():
        writer = DeltaTable(t.uri)
        i = 0
        try:
            while not stop.is_set() or i < 5:
                rows = batch(100_000 + i * 5, 5)
                writer.append(rows)
                appended.extend(rows.column("id").to_pylist())
                i += 1
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=appender)
    thread.start()
    try:
        for _ in range(3):
            DeltaTable(t.uri).optimize()
    finally:
        stop.set()
        thread.join()
    assert errors == []
    final = DeltaTable(t.uri)
    ids = final.to_arrow().column("id").to_pylist()
    assert len(ids) == len(set(ids))
    assert sorted(ids) == sorted(list(range(1000)) + appended)
    ops = [h["operation"] for h in final.history()]
    assert ops.count("OPTIMIZE") >= 1 and len(appended) >= 25


def test_a_concurrent_delete_of_a_file_being_compacted_fails_the_optimize(tmp_path):
    t = many_small_files(tmp_path, props={"delta.enableDeletionVectors": "true"})
    plan = plan_optimize(t.snapshot)
    DeltaTable(t.uri).delete("id = 3")  # replaces one of the planned files (new DV)
    with pytest.raises(CommitConflictError):
        execute_optimize(t._store, plan)
    fresh = DeltaTable(t.uri)
    assert fresh.version == 13 and fresh.to_arrow(filter="id = 3").num_rows == 0
    assert fresh.history(1)[0]["operation"] == "DELETE"


def test_optimize_commits_are_not_changes(tmp_path):
    t = many_small_files(tmp_path, props={"delta.enableChangeDataFeed": "true"}, n_appends=3)
    t.optimize()
    assert t.changes(4, 4).num_rows == 0
    assert t.changes(1, 3).num_rows == 150


def test_append_only_and_column_mapped_tables_can_be_optimized(tmp_path):
    append_only = many_small_files(tmp_path, props={"delta.appendOnly": "true"}, n_appends=3, name="ao")
    assert append_only.optimize().num_files_removed == 6
    mapped = many_small_files(tmp_path, props={"delta.columnMapping.mode": "name"}, n_appends=3, name="cm")
    before = sorted_rows(mapped.to_arrow())
    mapped.optimize(zorder_by=["x"])
    assert sorted_rows(mapped.to_arrow()) == before
    ours = mapped.to_arrow()
    assert_same_rows(ours, delta_rs_rows(mapped.uri).select(ours.column_names).cast(ours.schema))


# --- the Z-order curve ---------------------------------------------------------------------------


def _naive_interleave(values: list[int], bits: int) -> int:
    key = 0
    for bit in range(bits - 1, -1, -1):
        for v in values:
            key = (key << 1) | ((v >> bit) & 1)
    return key


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda k: st.lists(
            st.lists(st.integers(0, 2 ** bits_per_column(k) - 1), min_size=k, max_size=k),
            min_size=1,
            max_size=30,
        )
    )
)
def test_interleave_matches_bit_by_bit_definition(rows):
    k = len(rows[0])
    bits = bits_per_column(k)
    codes = [np.array([r[c] for r in rows], dtype=np.uint64) for c in range(k)]
    got = interleave(codes, bits).tolist()
    assert got == [_naive_interleave(r, bits) for r in rows]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-1000, 1000)), min_size=1, max_size=50))
def test_rank_codes_preserve_order_and_ties(values):
    codes = rank_codes(pa.array(values, pa.int64()), 8).tolist()
    key = [(-1 if v is None else 0, v or 0) for v in values]  # nulls first
    for i in range(len(values)):
        for j in range(len(values)):
            if key[i] < key[j]:
                assert codes[i] < codes[j]
            elif key[i] == key[j]:
                assert codes[i] == codes[j]
    assert all(0 <= c < 256 for c in codes)


def test_rank_codes_spread_over_the_whole_code_space():
    codes = rank_codes(pa.array(["x", "a", "m"]), 16).tolist()
    assert sorted(codes) == [0, 21845, 43690]
    assert zorder_key(pa.table({"a": [1, 2]}), ["a"]).tolist() == [0, 2**31]


def test_cut_points_line_files_up_with_curve_cells():
    from deltaplane.engine.commands.zorder import cut_points

    keys = np.sort(np.random.default_rng(1).integers(0, 2**63, 10_000, dtype=np.uint64) * np.uint64(2))
    cuts = cut_points(keys, 8, 64)
    assert len(cuts) == 7 and cuts == sorted(cuts)
    bounds = [0, *cuts, len(keys)]
    for lo, hi in itertools.pairwise(bounds):
        assert 0.7 * 1250 <= hi - lo <= 1.3 * 1250  # sizes stay near the target
        assert len(np.unique(keys[lo:hi] >> np.uint64(61))) == 1  # one top-level cell per file
    # no boundaries at all (every key equal): cut evenly
    assert cut_points(np.zeros(100, dtype=np.uint64), 4, 64) == [25, 50, 75]
    assert cut_points(keys, 1, 64) == []


def test_a_one_bin_compaction_runs_on_the_calling_thread_and_a_failure_commits_nothing(tmp_path, monkeypatch):
    """A compaction of one bin (a streaming table's usual one) starts no thread; if its file
    cannot be written nothing commits, and the same table object compacts once the store is back."""
    from deltaplane.engine.errors import StorageError
    from tests.engine.faults import break_data_files, thread_starts

    t = DeltaTable.create(str(tmp_path / "t"), SCHEMA)
    for i in range(6):
        t.append(batch(i * 10, 10))
    broken = break_data_files(monkeypatch)
    started = thread_starts(monkeypatch)
    with pytest.raises(StorageError, match="the disk went away"):
        t.optimize()
    assert t.version == DeltaTable(t.uri).version == 6
    broken["on"] = False
    m = t.optimize()
    assert m.num_files_removed == 6 and m.num_files_added == 1
    assert [n for n in started if n.startswith("deltaplane")] == []
    assert sorted(DeltaTable(t.uri).to_arrow()["id"].to_pylist()) == list(range(60))
