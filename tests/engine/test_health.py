"""Table health, the auto-optimize policy, and auto-compaction after writes."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.auto_optimize import AutoOptimizePolicy, decide_auto_optimize
from deltaplane.engine.health import HISTOGRAM_BOUNDS

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("v", pa.float64())])


def rows(start: int, n: int, day: str | None = "d1") -> pa.Table:
    return pa.table(
        {"id": list(range(start, start + n)), "day": [day] * n, "v": [float(i) for i in range(n)]},
        schema=SCHEMA,
    )


def by_day_with_dvs(tmp_path, batches: list[tuple[int, int, str | None]]) -> DeltaTable:
    """A new table partitioned by day, with deletion vectors, one append of ``rows(*batch)`` each."""
    t = DeltaTable.create(
        str(tmp_path / "t"), SCHEMA, partition_by=["day"], properties={"delta.enableDeletionVectors": "true"}
    )
    for batch in batches:
        t.append(rows(*batch))
    return t


def test_health_counts_what_is_on_disk(tmp_path):
    t = by_day_with_dvs(
        tmp_path, [*((i * 100, 100, "d1") for i in range(5)), (1000, 300, "d2"), (2000, 10, None)]
    )
    t.delete("id < 20")  # 20 rows of the first d1 file, by deletion vector
    h = t.health(small_file_size=1 << 20)
    # independent truth: the Parquet files themselves
    files = {p.removeprefix("file://"): p for p in t.file_uris()}
    sizes = {p: os.path.getsize(p) for p in files}
    physical_rows = sum(pq.ParquetFile(p).metadata.num_rows for p in files)
    assert h.num_files == 7 == len(files)
    assert h.size_bytes == sum(sizes.values())
    assert h.num_rows == physical_rows - 20 == t.to_arrow().num_rows
    assert h.num_deleted_rows == 20 and h.num_files_with_deletion_vectors == 1
    assert h.num_small_files == 7 and h.num_partitions == 3
    by_name = {p.partition: p for p in h.partitions}
    assert set(by_name) == {"day=d1", "day=d2", "day=__HIVE_DEFAULT_PARTITION__"}
    d1 = by_name["day=d1"]
    assert d1.num_files == 5 and d1.num_rows == 480 and d1.num_deleted_rows == 20
    assert d1.deleted_rows_ratio == pytest.approx(20 / 500)
    assert by_name["day=__HIVE_DEFAULT_PARTITION__"].values == {"day": None}
    assert sum(b["num_files"] for b in h.file_size_histogram) == 7
    assert sum(b["bytes"] for b in h.file_size_histogram) == h.size_bytes
    for bucket in h.file_size_histogram:  # every file sits in the bucket its size says
        upper = next((b for b in HISTOGRAM_BOUNDS if b > bucket["min_bytes"]), None)
        inside = [s for s in sizes.values() if s >= bucket["min_bytes"] and (upper is None or s < upper)]
        assert bucket["num_files"] == len(inside)
    assert h.last_checkpoint_version is None and h.versions_since_checkpoint == t.version + 1
    assert h.last_optimize is None and h.last_vacuum is None
    t.optimize()
    t.checkpoint()
    h = t.health()
    assert h.last_optimize.version == t.version and h.last_optimize.operation == "OPTIMIZE"
    assert h.last_checkpoint_version == t.version and h.versions_since_checkpoint == 0
    json.dumps(h.to_dict())  # JSON-able for the CLI and XCom


def test_policy_picks_partitions_with_many_small_files_or_many_deleted_rows(tmp_path):
    t = by_day_with_dvs(
        tmp_path, [*((i * 10, 10, "busy") for i in range(6)), (100, 10, "quiet"), (200, 100, "deleted")]
    )
    t.delete("day = 'deleted' AND id < 250")  # half of that partition's rows
    policy = AutoOptimizePolicy(min_num_small_files=5, max_deleted_rows_ratio=0.2)
    decision = decide_auto_optimize(t.health(), policy)
    assert decision.compact
    assert sorted(decision.partition_names) == ["day=busy", "day=deleted"]
    assert decision.purge
    assert any("6 files" in r for r in decision.reasons) and any("50%" in r for r in decision.reasons)
    assert not decide_auto_optimize(
        t.health(), AutoOptimizePolicy(min_num_small_files=7, max_deleted_rows_ratio=0.6)
    ).compact
    # the decision drives OPTIMIZE: only the chosen partitions are rewritten
    before = sorted(t.to_arrow().column("id").to_pylist())
    plan = t.optimize(dry_run=True, min_num_files=1)
    assert plan.partitions == 3
    from deltaplane.engine.commands.optimize import execute_optimize, plan_optimize

    chosen = plan_optimize(t.snapshot, partitions=list(decision.partitions), purge=decision.purge)
    assert chosen.partitions == 2
    m = execute_optimize(t._store, chosen)
    assert m.num_files_removed == 7
    assert sorted(t.refresh().to_arrow().column("id").to_pylist()) == before


def test_auto_compaction_after_writes(tmp_path):
    props = {"delta.autoOptimize.autoCompact": "true", "deltaplane.autoCompact.minNumFiles": "4"}
    t = DeltaTable.create(str(tmp_path / "t"), SCHEMA, partition_by=["day"], properties=props)
    results = [t.append(rows(i * 10, 10, "a")) for i in range(3)]
    assert all(r.auto_compaction is None for r in results)
    other = t.append(rows(500, 10, "b"))  # another partition: "a" is not touched, nothing happens
    assert other.auto_compaction is None
    fourth = t.append(rows(30, 10, "a"))  # the fourth small file of partition a
    assert fourth.auto_compaction is not None and fourth.auto_compaction.num_files_removed == 4
    assert t.version == fourth.version + 1
    info = t.history(1)[0]
    assert info["operation"] == "OPTIMIZE" and json.loads(info["operationParameters"]["auto"]) is True
    assert len(t.snapshot.files) == 2  # a compacted, b untouched
    assert sorted(t.to_arrow().column("id").to_pylist()) == list(range(40)) + list(range(500, 510))
    plain = DeltaTable.create(str(tmp_path / "plain"), SCHEMA)
    for i in range(6):
        assert plain.append(rows(i, 1)).auto_compaction is None
    assert len(plain.snapshot.files) == 6
