"""The compact job's Spark-sorted Z-order on a row-tracking table: every row keeps its row id and
row commit version through the distributed sort, as the commit's ``delta.rowTracking.preserved``
tag says (an OPTIMIZE changes no data, so no row may look new)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.spark_jobs import compact, job

pytestmark = pytest.mark.xdist_group("spark")

TRACKED = {"delta.enableRowTracking": "true", "delta.enableDeletionVectors": "true"}


def run(module, argv, capsys) -> tuple[int, dict]:
    code = job.run(module.__name__.rsplit(".", 1)[1], module.build_parser(), module.main, argv)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    return code, json.loads(line)


def batch(seed: int, n: int = 2000) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "k": pa.array(np.arange(seed * n, (seed + 1) * n), pa.int64()),
            "a": rng.integers(0, 1000, n),
            "b": rng.integers(0, 1000, n),
            "v": rng.random(n),
        }
    )


def lineage(dt: DeltaTable) -> dict[int, tuple[int, int]]:
    """Each row's (row id, row commit version), by its key."""
    t = dt.to_arrow(["k"], row_tracking=True)
    return {
        k: (row_id, version)
        for k, row_id, version in zip(
            t["k"].to_pylist(),
            t["_metadata.row_id"].to_pylist(),
            t["_metadata.row_commit_version"].to_pylist(),
            strict=True,
        )
    }


def test_spark_sorted_zorder_keeps_row_ids(spark, tmp_path, capsys):
    uri = str(tmp_path / "t")
    dt = DeltaTable.create(uri, batch(0).schema, properties=TRACKED)
    for seed in range(6):
        dt.append(batch(seed))
    # Rows whose ids are already materialized (an UPDATE rewrote them) and rows hidden by a
    # deletion vector, besides rows that still have their file's fresh ids.
    dt.update({"v": "v + 1"}, predicate="k < 500")
    dt.delete("k % 7 = 0")
    before = lineage(dt)
    assert len(before) == 12000 - len(range(0, 12000, 7))
    assert len({row_id for row_id, _ in before.values()}) == len(before)

    code, out = run(
        compact, ["--table", uri, "--zorder", "a,b", "--target-size", "20k", "--max-task-bytes", "1k"], capsys
    )
    assert code == 0 and out["sparkSortedPartitions"] == 1, out
    dt.refresh()
    info = dt.history(1)[0]
    assert info["operation"] == "OPTIMIZE" and info["tags"]["delta.rowTracking.preserved"] == "true"
    assert dt.snapshot.num_files > 1
    assert lineage(dt) == before

    # The same table object keeps going: the next rewrite (the engine's own) keeps them too.
    dt.optimize(target_file_size=1 << 30)
    assert lineage(dt) == before
