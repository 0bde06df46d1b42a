"""benchmarks/spark_planning.py runs end to end at its --quick sizes (its times are not asserted)."""

from __future__ import annotations

import json

import pytest

from benchmarks.spark_planning import main as spark_planning


@pytest.mark.xdist_group("spark")
def test_every_file_is_planned_into_tasks(tmp_path):
    out = tmp_path / "p.json"
    result = spark_planning(["--quick", "--data", str(tmp_path / "data"), "--out", str(out)])
    assert json.loads(out.read_text())["files"].keys() == {"50", "250"}
    for n, both in result["files"].items():
        for r in (both, both["expressions"]):  # deltaplane's Spark classes, and the expressions
            assert r["files_planned"] == int(n)  # one file per partition, all of them in the scan
            assert r["tasks_planned"] >= 1
            assert r["total"] >= r["dataframe"] > 0
