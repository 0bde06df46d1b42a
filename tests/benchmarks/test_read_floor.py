"""benchmarks/read_floor.py runs end to end at its --quick sizes (its numbers are not asserted)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from benchmarks.read_floor import main as read_floor


def test_in_process_cases_read_the_same_rows_and_reuse_their_data(tmp_path, capsys):
    data, out = tmp_path / "data", tmp_path / "r.json"
    argv = ["--quick", "--only", "filter", "--only", "fig4", "--only", "dv", "--data", str(data)]
    result = read_floor([*argv, "--out", str(out)])
    assert json.loads(out.read_text())["checks"] == result["checks"]
    assert result["checks"] == {"filter rows": True, "Fig. 4 sums": True, "DV rows": True}
    cases = result["cases"]
    # --quick: 200,000 rows in 10 files; the 0.1% range lies inside one of them
    assert cases["filter"]["deltaplane"]["value"]["rows"] == 200
    assert cases["filter"]["files_after_skipping"] == 1
    # one file per partition value, written 100 partition values per commit
    assert {n: (r["layout"]["files"], r["layout"]["commits"]) for n, r in cases["fig4"].items()} == {
        "50": (50, 1),
        "250": (250, 3),
    }
    assert cases["dv"]["layout"]["files_with_dv"] == 10
    assert cases["dv"]["after_delete"]["value"] == 200_000 - 10_000
    assert all(line["ratio"] > 0 for line in result["ratios"])
    printed = capsys.readouterr()
    assert "same results everywhere: yes" in printed.out and "generated" in printed.err

    again = read_floor([*argv[:3], "--data", str(data)])  # the same data, not written again
    assert again["checks"] == {"filter rows": True}
    assert "generated" not in capsys.readouterr().err


def test_an_unknown_case_is_refused_by_name(capsys):
    with pytest.raises(SystemExit) as refused:
        read_floor(["--only", "scan"])
    assert refused.value.code == 2
    assert "invalid choice: 'scan'" in capsys.readouterr().err


@pytest.mark.xdist_group("spark")
def test_spark_cases_agree_with_sparks_parquet_reader(tmp_path):
    argv = [
        "--quick",
        "--stream-commits",
        "10",
        "--data",
        str(tmp_path / "data"),
        "--out",
        str(tmp_path / "s.json"),
    ]
    dv_cases = ("spark_dv_sum", "spark_dv_count", "spark_dv_filter")
    for case in ("spark_aggregate", "spark_count", "spark_dv", *dv_cases, "streaming"):
        argv += ["--only", case]
    result = read_floor(argv)
    assert result["checks"] == {
        "Spark sums": True,
        "Spark counts": True,
        **{f"{c} rows": True for c in dv_cases},
        "stream batches and rows": True,
    }
    # the DV cases' own expectations, not the code's: 200,000 ids, every id % 20 == 3 deleted
    assert result["cases"]["spark_dv_count"]["native"]["value"] == 190_000
    assert result["cases"]["spark_dv_filter"]["native_built"]["value"] == 190  # ids below 200
    # 10 single-file commits after the one that created the table, 5 files per micro-batch
    assert result["cases"]["streaming"]["layout"]["files"] == 10
    assert result["cases"]["streaming"]["source"]["value"] == {"batches": 2, "rows": 10_000}
    for name in ("source", "file_source"):  # Spark's durationMs phases, and the query start and stop
        assert {"addBatch", "latestOffset", "outside_triggers"} <= result["cases"]["streaming"][name].keys()
    native = importlib.util.find_spec("deltaplane.spark_jobs.native") is not None
    assert result["native_read_path"] is native
    spark_lines = [line for line in result["ratios"] if line["case"].startswith("Spark")]
    # sum 2, count 2, DV scan 4 (one reused, one without deltaplane's jar), 3 per DV case, stream 1
    assert len(spark_lines) == 18
    for case in dv_cases:  # deltaplane's Spark classes, and the expressions without them, agree
        assert (
            result["cases"][case]["native_expressions"]["value"] == result["cases"][case]["native"]["value"]
        )
    ours = ("native read_table", "its DataFrame, reused", "read_table, expressions")
    for line in spark_lines:
        assert (line["ratio"] is not None) is (native or line["deltaplane"] not in ours), line
