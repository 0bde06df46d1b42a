"""The benchmarks run end to end at a tiny scale (their numbers are not asserted here)."""

from __future__ import annotations

import json

import pytest

from benchmarks.snapshot_load import main as snapshot_load


def test_snapshot_load_benchmark_runs(tmp_path, capsys):
    out = tmp_path / "result.json"
    snapshot_load(["--files", "2000", "--commits", "4", "--tail", "2", "--repeat", "1", "--out", str(out)])
    result = json.loads(out.read_text())
    for scenario in ("json_only", "checkpoint_plus_tail"):
        ours, theirs = result[scenario]["deltaplane"], result[scenario]["deltalake"]
        assert ours["files"] == theirs["files"] and ours["version"] == theirs["version"]
        assert result[scenario]["time_ratio"] > 0
    # tail: 2 commits of a tenth of a commit (500 files) each = 100 more files
    assert result["checkpoint_plus_tail"]["deltaplane"]["files"] == 2000 + 100
    assert "ratio" in capsys.readouterr().out


def test_dml_benchmark_runs_and_every_engine_ends_with_the_same_rows(tmp_path):
    from benchmarks.dml import main as dml

    out = tmp_path / "dml.json"
    dml(["--rows", "20000", "--out", str(out)])
    result = json.loads(out.read_text())
    # delete 0.01% (id % 10000 = 7): 2 rows; update keeps the count; merge inserts 100 new ids
    expected = {"delete": 20000 - 2, "update": 20000, "merge": 20000 + 100}
    for op, rows in expected.items():
        assert result[op]["rows_after"] == {"deltaplane_dv": rows, "deltaplane_cow": rows, "deltalake": rows}
    assert result["scan_ratio"] > 0


@pytest.mark.slow  # a benchmark run
def test_zorder_benchmark_runs_and_beats_the_global_sort(tmp_path):
    from benchmarks.zorder_skipping import main as zorder

    result = zorder(["--rows", "20000", "--queries", "20", "--out", str(tmp_path / "z.json")])
    assert result["global_sort"]["files"] == 100 and result["zorder"]["files"] == 100
    assert result["global_sort"]["skipped_percent"]["sourceIP"] > 90
    assert result["zorder"]["mean"] > result["global_sort"]["mean"]


def test_optimize_benchmark_runs_and_both_engines_keep_every_row(tmp_path):
    from benchmarks.optimize_compact import main as optimize

    result = optimize(
        [
            "--files",
            "6",
            "--target-mb",
            "64",
            "--repeat",
            "1",
            "--no-spark",
            "--out",
            str(tmp_path / "o.json"),
        ]
    )
    assert result["deltaplane_ids_match"] and result["deltalake_ids_match"]
    assert result["deltaplane"]["files_removed"] == 6 and result["deltaplane"]["files_added"] == 1


def test_page_checksum_benchmark_runs(tmp_path):
    from benchmarks.page_checksums import main as page_checksums

    result = page_checksums(["--gb", "0.02", "--repeat", "1", "--out", str(tmp_path / "c.json")])
    assert result["rows"] > 0 and result["files"] >= 1
    assert result["write_checksum_cost"] > 0 and result["scan_ratio_vs_deltalake"] > 0


def test_everyday_benchmark_runs(tmp_path):
    from benchmarks.everyday import main as everyday

    result = everyday(
        ["--reps", "3", "--warmup", "1", "--history-versions", "12", "--out", str(tmp_path / "e.json")]
    )
    for case in (
        "open_5_commits",
        "append_1000_rows",
        "open_and_history_200_versions",
        "history_200_versions",
    ):
        assert result[case]["deltaplane_ms"] > 0 and result[case]["ratio"] > 0


def test_maintenance_policy_benchmark_runs_both_policies_on_the_same_day(tmp_path):
    """Two simulated hours: both policies replay the same writes (same rows in the end), no user
    write fails, and each runs maintenance (the fixed one hourly, the health one by its plan)."""
    from benchmarks.maintenance_policy import main as maintenance

    out = tmp_path / "mp.json"
    assert maintenance(["--hours", "2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    fixed, health = result["results"]["fixed"], result["results"]["health"]
    assert fixed["failed_user_writes"] == health["failed_user_writes"] == 0
    assert fixed["maintenance_runs"]["compaction"] > 0 and fixed["maintenance_runs"]["vacuum"] == 10
    assert health["tracking_cpu_s"] > 0 and len(fixed["hourly"]) == len(health["hourly"]) == 2
    assert set(result["health_over_fixed"]) == {
        "query_p95",
        "maintenance_cpu",
        "bytes_rewritten",
        "files_read_mean",
    }
    assert (result["policy"]["min_small_files"], result["policy"]["min_tier_files"]) == (8, 2)
    # the files the queries open are counted, and the same table and hour open the same files
    assert fixed["files_read_mean"] > 0 and health["files_read_p95"] >= 1
    assert fixed["peak_unvacuumed_bytes"] >= 0 and health["mean_unvacuumed_bytes"] >= 0


def test_maintenance_policy_sizes_scale_with_the_data_and_reruns_start_from_the_defaults(tmp_path):
    """``--size-scale`` multiplies the policy's sizes (the same day in bigger files); a second run
    in the same process with the defaults gets the defaults again, not the first run's sizes."""
    from benchmarks.maintenance_policy import main as maintenance

    scaled, default = tmp_path / "scaled.json", tmp_path / "default.json"
    args = ["--hours", "1", "--poll-minutes", "20"]
    scaling = ["--scale", "2", "--size-scale", "2", "--min-tier-files", "0"]
    assert maintenance([*args, *scaling, "--out", str(scaled)]) == 0
    assert maintenance(["--hours", "1", "--out", str(default)]) == 0
    scaled, default = json.loads(scaled.read_text()), json.loads(default.read_text())
    assert scaled["size_scale"] == 2 and default["size_scale"] == 1
    assert (scaled["policy"]["small_file_size"], scaled["policy"]["target_file_size"]) == (256 << 10, 2 << 20)
    assert scaled["policy"]["min_vacuum_bytes"] == 12 << 20 and scaled["policy"]["poll_minutes"] == 20
    assert (default["policy"]["small_file_size"], default["policy"]["target_file_size"]) == (
        128 << 10,
        1 << 20,
    )
    assert default["policy"]["min_vacuum_bytes"] == 6 << 20 and default["policy"]["poll_minutes"] == 30
    assert (scaled["policy"]["min_tier_files"], default["policy"]["min_tier_files"]) == (None, 2)
