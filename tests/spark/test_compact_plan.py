"""``deltaplane.spark_jobs.compact --plan``: the job rewrites a plan made elsewhere, and plans nothing itself.

The Airflow compaction operator hands its plan (made from an auto-optimize decision: chosen
partitions, deletion-vector purge) to the job this way; by hand, ``--dry-run --write-plan`` writes
one to review and ``--plan`` runs it. The job commits at the plan's version, rebased like any
commit: an append in between is fine, a concurrent removal of a planned file is a conflict.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.commands.optimize import plan_optimize
from deltaplane.engine.plans import OPTIMIZE_PLAN, save_plan
from deltaplane.spark_jobs import compact, job
from tests.spark.test_jobs import run

pytestmark = pytest.mark.xdist_group("spark")

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])


def table_with(path: Path, files: dict[str, int], properties=None) -> str:
    dt = DeltaTable.create(str(path), SCHEMA, partition_by=["p"], properties=properties)
    n = 0
    for p, count in files.items():
        for _ in range(count):
            dt.append(pa.table({"id": pa.array(range(n, n + 50), pa.int64()), "p": [p] * 50}))
            n += 50
    return str(path)


def removed_and_added(uri: str, version: int) -> tuple[list[dict], list[dict]]:
    text = (Path(uri) / "_delta_log" / f"{version:020d}.json").read_text()
    actions = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [a["remove"] for a in actions if "remove" in a], [a["add"] for a in actions if "add" in a]


def test_a_written_plan_is_what_the_job_rewrites(spark, tmp_path, capsys):
    uri = table_with(tmp_path / "t", {"a": 3, "b": 2})
    plan_file = tmp_path / "plan.json"
    code, out = run(
        compact, ["--table", uri, "--dry-run", "--filter", "p = 'a'", "--write-plan", str(plan_file)], capsys
    )
    assert code == 0 and out["dryRun"] and out["numFilesToRewrite"] == 3, out
    doc = json.loads(plan_file.read_text())
    assert doc["format"] == OPTIMIZE_PLAN.format and doc["readVersion"] == 5 and len(doc["bins"]) == 1
    assert DeltaTable(uri).version == 5  # a dry run changes nothing

    # An append after the plan was made: the job still commits the plan (OPTIMIZE does not conflict
    # with appends), and the new file is left alone.
    DeltaTable(uri).append(pa.table({"id": pa.array([999], pa.int64()), "p": ["a"]}))
    code, out = run(compact, ["--table", uri, "--plan", str(plan_file)], capsys)
    assert code == 0 and out["num_files_removed"] == 3 and out["plan"] == str(plan_file), out
    removes, adds = removed_and_added(uri, out["version"])
    assert {r["path"] for r in removes} == {p for b in doc["bins"] for p in b["paths"]}
    assert {r["partitionValues"]["p"] for r in removes} == {"a"} and len(adds) == 1
    dt = DeltaTable(uri)
    assert dt.count() == 251 and dt.snapshot.num_files == 4  # a: compacted + the append; b: 2


def test_a_plan_keeps_its_partitions_and_purge(spark, tmp_path, capsys):
    """What the operator ships: a plan restricted to one partition with a DV purge that the job's
    own defaults would not make (one file, 2% of rows deleted, under OPTIMIZE's 5%)."""
    uri = table_with(tmp_path / "t", {"a": 1, "b": 2}, properties={"delta.enableDeletionVectors": "true"})
    DeltaTable(uri).delete("id = 0")
    table = DeltaTable(uri)
    plan = plan_optimize(table.snapshot, partitions=[{"p": "a"}], purge=True)
    key = save_plan(plan, table.snapshot.store)
    assert key.startswith(OPTIMIZE_PLAN.directory + "/")
    code, out = run(compact, ["--table", uri, "--plan", table.snapshot.store.uri(key)], capsys)
    assert code == 0 and out["num_deletion_vectors_removed"] == 1 and out["num_files_removed"] == 1, out
    removes, adds = removed_and_added(uri, out["version"])
    assert removes[0]["partitionValues"] == {"p": "a"} and removes[0].get("deletionVector") is not None
    assert len(adds) == 1 and adds[0].get("deletionVector") is None and adds[0]["dataChange"] is False
    assert DeltaTable(uri).count() == 149
    # Without the plan the job's own planning leaves both alone (b's two files would be one bin
    # with --min-files 2, but a's single file is not worth purging at 2%).
    code, out = run(compact, ["--table", uri, "--dry-run", "--filter", "p = 'a'"], capsys)
    assert code == 0 and out["numBins"] == 0


def test_bad_plans_are_input_errors_and_a_plan_is_not_mixed_with_planning_flags(spark, tmp_path, capsys):
    uri = table_with(tmp_path / "t", {"a": 2})
    other = table_with(tmp_path / "other", {"a": 2})
    plan_file = tmp_path / "plan.json"
    code, _ = run(compact, ["--table", other, "--dry-run", "--write-plan", str(plan_file)], capsys)
    assert code == 0
    code, out = run(compact, ["--table", uri, "--plan", str(plan_file)], capsys)
    assert code == job.EXIT_INPUT and "the plan was made for" in out["message"], out
    code, out = run(compact, ["--table", other, "--plan", str(plan_file), "--zorder", "id"], capsys)
    assert code == job.EXIT_USAGE and "--zorder" in out["message"], out
    code, out = run(compact, ["--table", uri, "--plan", str(tmp_path / "missing.json")], capsys)
    assert code == job.EXIT_INPUT and "no OPTIMIZE plan" in out["message"], out
    (tmp_path / "junk.json").write_text('{"format": "something else"}')
    code, out = run(compact, ["--table", uri, "--plan", str(tmp_path / "junk.json")], capsys)
    assert code == job.EXIT_INPUT and "not an OPTIMIZE plan" in out["message"], out
    # A planned file deleted by a commit after the plan: the OPTIMIZE conflicts, nothing lands.
    DeltaTable(other).delete("id = 0")
    code, out = run(compact, ["--table", other, "--plan", str(plan_file)], capsys)
    assert code == job.EXIT_CONFLICT, out
    assert DeltaTable(other).history(1)[0]["operation"] == "DELETE"
