"""The Spark jobs on real Spark (local[2]): ingest (with staging for a quality gate), compact
(bin-packing and a Spark-sorted Z-order), dml; their JSON line and exit codes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import deltalake
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable, StagedWrite, write_table
from deltaplane.spark_jobs import compact, dml, ingest, job
from tests.helpers import assert_same_rows

pytestmark = pytest.mark.xdist_group("spark")


def run(module, argv, capsys) -> tuple[int, dict]:
    code = job.run(module.__name__.rsplit(".", 1)[1], module.build_parser(), module.main, argv)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    return code, json.loads(line)


def delta_rs(uri: str) -> pa.Table:
    table = deltalake.DeltaTable(uri)
    query = deltalake.QueryBuilder().register("t", table).execute("select * from t")
    return pa.RecordBatchReader.from_stream(query).read_all()


def test_ingest_stage_commit_and_rerun(spark, tmp_path, capsys):
    landing = tmp_path / "landing"
    landing.mkdir()
    for day in (1, 2):
        lines = ["id,day,amount"] + [
            f"{i},2026-11-0{day},{i * 1.5}" for i in range(day * 100, day * 100 + 50)
        ]
        (landing / f"day{day}.csv").write_text("\n".join(lines) + "\n")
    uri = str(tmp_path / "t")
    argv = ["--table", uri, "--source", str(landing / "*.csv"), "--partition-by", "day"]
    code, out = run(ingest, [*argv, "--app-id", "ingest.t", "--app-version", "1"], capsys)
    assert code == 0 and out["status"] == "ok" and out["rows"] == 100 and out["version"] == 0
    got = delta_rs(uri)
    assert sorted(got["id"].to_pylist()) == list(range(100, 150)) + list(range(200, 250))
    assert deltalake.DeltaTable(uri).metadata().partition_columns == ["day"]
    # A rerun of the same application version writes nothing.
    code, out = run(ingest, [*argv, "--app-id", "ingest.t", "--app-version", "1"], capsys)
    assert code == 0 and out["skipped"] and DeltaTable(uri).version == 0
    # Staged: files and a manifest, nothing visible until --commit-staged.
    (landing / "day3.csv").write_text("id,day,amount\n900,2026-11-03,1.0\n901,2026-11-03,2.0\n")
    manifest = str(tmp_path / "staged" / "batch-3.json")
    code, out = run(
        ingest, ["--table", uri, "--source", str(landing / "day3.csv"), "--stage", manifest], capsys
    )
    assert code == 0 and out["rows"] == 2 and out["action"] == "stage"
    assert DeltaTable(uri).version == 0
    staged = StagedWrite.loads(Path(manifest).read_bytes())
    assert sorted(staged.read()["id"].to_pylist()) == [900, 901]
    code, out = run(ingest, ["--table", uri, "--commit-staged", manifest], capsys)
    assert code == 0 and out["version"] == 1 and out["rows"] == 2
    assert delta_rs(uri).num_rows == 102
    # Bad input: a source that does not match the table's types.
    (landing / "bad.csv").write_text("id,day,amount\nx,2026-11-04,1.0\n")
    code, out = run(ingest, ["--table", uri, "--source", str(landing / "bad.csv")], capsys)
    assert code == job.EXIT_INPUT and out["status"] == "failed" and "id" in out["message"]
    assert DeltaTable(uri).version == 1


def test_ingest_loads_the_same_files_once_like_copy_into(spark, tmp_path, capsys):
    """Without --app-id the commit is keyed by its source files: loading them again (a rerun with
    a new run id, a backfill, a retry after the commit) writes nothing and reports the version that
    holds them; other files always land; --stage then --commit-staged of files already loaded
    commits nothing; --reprocess loads them again."""
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "a.csv").write_text("id,v\n1,a\n2,b\n")
    uri = str(tmp_path / "t")
    argv = ["--table", uri, "--source", str(landing / "*.csv")]
    code, first = run(ingest, argv, capsys)
    assert code == 0 and first["version"] == 0 and first["rows"] == 2 and not first["skipped"]
    code, again = run(ingest, argv, capsys)
    assert code == 0 and again["skipped"] and again["version"] == 0
    assert DeltaTable(uri).version == 0
    (landing / "b.csv").write_text("id,v\n3,c\n")
    code, out = run(ingest, ["--table", uri, "--source", str(landing / "b.csv")], capsys)
    assert code == 0 and out["version"] == 1 and out["rows"] == 1
    manifest = str(tmp_path / "staged" / "again.json")
    code, out = run(ingest, ["--table", uri, "--source", str(landing / "b.csv"), "--stage", manifest], capsys)
    assert code == 0 and out["skipped"] and out["files"] == 0
    code, out = run(ingest, ["--table", uri, "--commit-staged", manifest], capsys)
    assert code == 0 and out["skipped"] and out["version"] == 1
    assert sorted(DeltaTable(uri).to_arrow()["id"].to_pylist()) == [1, 2, 3]
    code, out = run(ingest, [*argv, "--reprocess"], capsys)
    assert code == 0 and out["version"] == 2
    assert sorted(DeltaTable(uri).to_arrow()["id"].to_pylist()) == [1, 1, 2, 2, 3, 3]


def random_table(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({c: rng.integers(0, 1000, n) for c in ("a", "b", "c", "d")})


def skipped_fraction(uri: str, columns: list[str], seed: int = 7) -> float:
    """Mean fraction of files whose min/max (from the Parquet footers) exclude a random value."""
    paths = deltalake.DeltaTable(uri).file_uris()
    bounds = {c: [] for c in columns}
    for path in paths:
        meta = pq.ParquetFile(path).metadata
        for c in columns:
            index = meta.schema.to_arrow_schema().get_field_index(c)
            stats = [meta.row_group(g).column(index).statistics for g in range(meta.num_row_groups)]
            bounds[c].append((min(s.min for s in stats), max(s.max for s in stats)))
    rng = np.random.default_rng(seed)
    fractions = []
    for c in columns:
        for v in rng.integers(0, 1000, 100):
            fractions.append(np.mean([not (lo <= v <= hi) for lo, hi in bounds[c]]))
    return float(np.mean(fractions))


def test_compact_bin_packs_and_sorts_large_zorder_partitions_with_spark(spark, tmp_path, capsys):
    uri, reference = str(tmp_path / "t"), str(tmp_path / "ref")
    for i in range(16):
        write_table(uri, random_table(5000, i), mode="append")
    shutil.copytree(uri, reference)
    before = DeltaTable(uri).to_arrow()
    size = sum(DeltaTable(uri).get_add_actions()["size_bytes"].to_pylist())
    target = str(size // 16)
    # Z-order, forced onto the distributed sort (every partition is "too large" for one task).
    code, out = run(
        compact,
        ["--table", uri, "--zorder", "a,b", "--target-size", target, "--max-task-bytes", "1k"],
        capsys,
    )
    assert code == 0 and out["sparkSortedPartitions"] == 1, out
    DeltaTable(reference).optimize(zorder_by=["a", "b"], target_file_size=int(target))
    assert_same_rows(delta_rs(uri), before)
    zordered = DeltaTable(uri).history(1)[0]
    assert zordered["operation"] == "OPTIMIZE"
    # what the rewrite cost, for the maintenance budgets (the distributed sort by its wall time)
    assert int(zordered["operationMetrics"]["cpuTimeMs"]) > 0
    assert int(zordered["operationMetrics"]["executionTimeMs"]) > 0
    ours, engines = skipped_fraction(uri, ["a", "b"]), skipped_fraction(reference, ["a", "b"])
    print(json.dumps({"spark_zorder_skipped": ours, "engine_zorder_skipped": engines}))
    assert ours > 0.4 and ours > 0.8 * engines, (ours, engines)
    # Bin-packing: many small files into few.
    small = str(tmp_path / "small")
    for i in range(20):
        write_table(small, random_table(200, i), mode="append")
    code, out = run(compact, ["--table", small, "--target-size", "1m"], capsys)
    assert code == 0 and out["num_files_removed"] == 20 and out["num_files_added"] == 1
    assert delta_rs(small).num_rows == 4000
    history = deltalake.DeltaTable(small).history(1)[0]
    assert history["operation"] == "OPTIMIZE"
    # the Python workers' CPU and the driver's, summed (the worker's own rewrite is most of it)
    assert int(history["operationMetrics"]["cpuTimeMs"]) > 0
    assert all(not a["data_change"] for a in DeltaTable(small).get_add_actions().to_pylist())


def test_dml_job_equals_the_engine(spark, tmp_path, capsys):
    uri, reference = str(tmp_path / "t"), str(tmp_path / "ref")
    for i in range(6):
        write_table(
            uri,
            random_table(3000, i),
            mode="append",
            properties={"delta.enableDeletionVectors": "true"} if i == 0 else None,
        )
    shutil.copytree(uri, reference)
    code, out = run(dml, ["--table", uri, "--delete", "a < 50 AND b > 500", "--task-bytes", "20k"], capsys)
    assert code == 0 and out["tasks"] > 1 and out["strategy"] == "deletion_vectors", out
    DeltaTable(reference).delete("a < 50 AND b > 500")
    code, out = run(
        dml, ["--table", uri, "--update", "c = 7", "--set", "d = d + 1000", "--set", "c = 8"], capsys
    )
    assert code == 0 and out["operation"] == "UPDATE"
    DeltaTable(reference).update({"d": "d + 1000", "c": "8"}, "c = 7")
    assert_same_rows(delta_rs(uri), DeltaTable(reference).to_arrow())
    assert (
        out["operationMetrics"]["numUpdatedRows"]
        == DeltaTable(reference).history(1)[0]["operationMetrics"]["numUpdatedRows"]
    )


def test_exit_codes_and_the_json_line(tmp_path):
    """Run as a user would (python -m); failures before Spark starts are cheap to check."""

    def cli(*argv):
        done = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, timeout=120)
        lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
        return done.returncode, (lines[-1] if lines else {}), done.stderr

    code, out, _ = cli("deltaplane.spark_jobs.dml", "--table", str(tmp_path / "missing"), "--delete", "a = 1")
    assert code == job.EXIT_TABLE and out["status"] == "failed" and out["error"] == "TableNotFoundError"
    write_table(str(tmp_path / "t"), random_table(10, 0))
    code, out, _ = cli("deltaplane.spark_jobs.dml", "--table", str(tmp_path / "t"), "--delete", "nope = 1")
    assert code == job.EXIT_INPUT and "nope" in out["message"]
    code, out, _ = cli("deltaplane.spark_jobs.compact", "--table", str(tmp_path / "t"), "--dry-run")
    assert code == 0 and out["dryRun"] and out["numBins"] == 0
    code, out, err = cli("deltaplane.spark_jobs.ingest", "--table", str(tmp_path / "t"))
    assert code == job.EXIT_INPUT and "--source" in out["message"]
    code, _, err = cli("deltaplane.spark_jobs.dml", "--table", str(tmp_path / "t"))
    assert code == job.EXIT_USAGE and "--delete" in err


def test_spark_dense_ranks_equal_arrows(spark):
    """The distributed ranks are the engine's own (nulls first, ties shared, no gaps), across
    several sorted partitions."""
    import pyarrow.compute as pc

    from deltaplane.spark_jobs.zorder import _dense_ranks

    rng = np.random.default_rng(3)
    values = [None if v % 11 == 0 else int(v) for v in rng.integers(0, 500, 5000)]
    df = spark.createDataFrame([(v,) for v in values], "x long").repartition(3)
    cached: list = []
    got = {r["v"]: r["rank"] for r in _dense_ranks(spark, df, "x", "rank", cached).collect()}
    for frame in cached:
        frame.unpersist()
    arrow = pa.array(values, pa.int64())
    ranks = pc.rank(arrow, sort_keys=[("", "ascending", "at_start")], tiebreaker="dense").to_pylist()
    expected = {v: r - 1 for v, r in zip(values, ranks, strict=True)}
    assert got == expected
    assert sorted(got.values()) == list(range(len(got)))
