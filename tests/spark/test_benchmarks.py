"""The Spark benchmarks run end to end at a tiny scale (their numbers are not asserted here)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.xdist_group("spark")


def test_spark_benchmark_runs_and_both_paths_agree(spark, tmp_path):
    from benchmarks.spark import main as spark_bench

    result = spark_bench(["--rows", "50000", "--out", str(tmp_path / "s.json")])
    assert result["read_rows_match"] and result["delete_rows_match"]
    assert result["spark_noop_vs_engine"] > 0 and result["spark_delete_vs_engine"] > 0


def test_optimize_benchmark_with_spark_keeps_every_row(tmp_path):
    from benchmarks.optimize_compact import main as optimize

    result = optimize(
        ["--files", "4", "--target-mb", "64", "--repeat", "1", "--out", str(tmp_path / "o.json")]
    )
    assert result["spark_ids_match"] and result["spark"]["files_removed"] == 4
    assert result["spark"]["files_added"] == 1
