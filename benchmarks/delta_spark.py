"""Delta Spark as the performance anchor: the same work, in one run, by

* **Delta Spark** 4.4 on pyspark 4.2, local[2], driven through the test suite's reference harness
  (``tests/deltaspark``: its own virtualenv and JVM; times are measured inside that process,
  around the statement, so the pipe between the processes is not counted);
* **deltaplane in process** (``deltaplane.engine``: ``write_table``, ``DeltaTable``);
* **deltaplane through Spark** (the project's pyspark, local[2]: the ``deltaplane`` data source
  for reads and writes, the ``compact`` and ``dml`` jobs for OPTIMIZE and DELETE, run in the
  same session).

Data (generated once into ``benchmarks/data/delta_spark/`` and reused by later runs):
``--rows`` (10M) rows x 8 columns (``benchmarks/dml.py``'s rows: ids, user ids, timestamps,
doubles, ints, a low-cardinality string, a 30-character string, a boolean) as 10 Parquet files;
the same rows as a deltaplane table of ``--small-files`` (1,000) appends; a 1% MERGE source
(half existing ids, half new); and the Z-order paper's flows (``benchmarks/zorder_skipping.py``,
``--flows`` rows in 100 files).

Operations, each engine on its own table (the one it wrote in the write row, deletion vectors
enabled; the data-source write cannot set table properties, so deltaplane enables them on that
table afterwards, untimed), every mutation on a fresh copy made before the clock starts:

* full scan (every row of every column materialized: Spark into its no-op sink, deltaplane
  ``to_arrow()``); one-column aggregate (``sum(amount)``); a selective filter no statistics can
  help (``qty = 7 AND category = 'beta'``, 0.01%); a range filter on ``id`` that file skipping
  answers from one file; ``count(*)``;
* write of the 10M rows from the Parquet files (read included, for every engine);
* OPTIMIZE of the ``--small-files`` table (the same deltaplane-written table, copied for each
  engine) to 128 MiB files;
* DELETE of 0.01% of the rows (``id % 10000 = 7``) by deletion vectors, and MERGE of the 1%
  source (update matched, insert the rest; the source read from Parquet inside the timing);
* the paper's Figure 5 (VLDB 2020, section 6.2): the flows Z-ordered by the four fields into
  about 100 files by each engine (Delta Spark ``OPTIMIZE ... ZORDER BY``, deltaplane
  ``optimize(zorder_by=...)``, the ``compact --zorder`` job), then ``--queries`` random equality
  probes per field: files read and skipped, and the time per probe.

Every number is the median of ``--repeat`` (3) runs after ``--warmup`` (1) untimed runs; JVM
start-up is not in any row and is reported on its own. The deltaplane data source plans no file
skipping (see docs/spark.md): its filters and probes read every file.

    python benchmarks/delta_spark.py [--quick] [--rows 10000000] [--repeat 3]

Prints the table and writes ``benchmarks/results/delta_spark.json`` (with the machine and its
load average). About 30 minutes on 2 cores (``--quick``: about 5, two JVM start-ups included).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from benchmarks import results_file  # noqa: E402 (the repository root goes on the path first)

DATA_FORMAT = 1  # bump when the generated data changes
FILES = 10
DELETE = "id % 10000 = 7"
FILTER = "qty = 7 AND category = 'beta'"
TARGET = 128 << 20
FLOW_FILES = 100
DV = {"delta.enableDeletionVectors": "true"}
ENGINES = ("delta_spark", "deltaplane", "spark_source")
ROWS = [
    ("scan", "full scan"),
    ("aggregate", "one-column aggregate"),
    ("filter", "selective filter (0.01%)"),
    ("range", "range filter (skipping)"),
    ("count", "count(*)"),
    ("write", "write {rows} rows"),
    ("optimize", "OPTIMIZE {small} small files"),
    ("delete", "DV DELETE 0.01%"),
    ("merge", "MERGE 1% upsert"),
    ("zorder", "Z-order flows (Fig. 5)"),
    ("probe", "Fig. 5 probe (per query)"),
]


def range_filter(rows: int) -> str:
    low = (rows // FILES) * (FILES // 2) + 12_345 % (rows // FILES)
    return f"id BETWEEN {low} AND {low + max(rows // 10_000, 1) - 1}"


# --- data, generated once ------------------------------------------------------------------------


def prepare_data(root: Path, rows: int, small_files: int, flow_rows: int) -> dict[str, Path]:
    """The inputs every engine starts from, built once per size under ``root``."""
    from benchmarks import dml, zorder_skipping

    paths = {
        "source": root / f"v{DATA_FORMAT}-rows-{rows}",
        "merge": root / f"v{DATA_FORMAT}-merge-{rows}",
        "small": root / f"v{DATA_FORMAT}-small-{rows}-{small_files}",
        "flows": root / f"v{DATA_FORMAT}-flows-{flow_rows}",
    }

    def once(path: Path, build) -> None:
        if (path / "_COMPLETE").exists():
            return
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        started = time.perf_counter()
        build(path)
        (path / "_COMPLETE").write_text("")
        print(f"generated {path.name} in {time.perf_counter() - started:.1f}s", file=sys.stderr)

    def source(path: Path) -> None:  # dml.build's rows, as plain Parquet files
        rng = np.random.default_rng(11)
        per_file = rows // FILES
        for f in range(FILES):
            pq.write_table(dml.batch(f * per_file, per_file, rng), path / f"part-{f:05d}.parquet")

    def merge(path: Path) -> None:
        pq.write_table(dml.source_rows(rows), path / "part-00000.parquet")

    def small(path: Path) -> None:  # the same rows as many small appends (a streaming ingest's shape)
        from deltaplane.engine import DeltaTable

        data = pq.ParquetDataset(paths["source"]).read()
        step = -(-rows // small_files)
        table = DeltaTable.create(
            str(path / "table"), data.schema, properties={"delta.checkpointInterval": "100"}
        )
        for offset in range(0, rows, step):
            table.append(data.slice(offset, step))

    def flows(path: Path) -> None:
        data = zorder_skipping.flows(flow_rows)
        for i, part in enumerate(zorder_skipping.in_slices(data, FLOW_FILES)):
            pq.write_table(part, path / f"part-{i:05d}.parquet")

    once(paths["source"], source)
    once(paths["merge"], merge)
    once(paths["small"], small)
    once(paths["flows"], flows)
    paths["small"] = paths["small"] / "table"  # (readers of the folders skip "_COMPLETE")
    return paths


# --- the three implementations -------------------------------------------------------------------


def clock(fn) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def files_with_dv(path: Path) -> int:
    """Live files carrying a deletion vector (in a file or inline in the log)."""
    from deltaplane.engine import DeltaTable

    column = DeltaTable(str(path)).snapshot.files.column("deletion_vector")
    return len(column) - column.null_count


def live_files(path: Path) -> int:
    from deltaplane.engine import DeltaTable

    return len(DeltaTable(str(path)).snapshot.files)


class DeltaSparkRunner:
    """Delta Spark 4.4 through the harness; the seconds come from inside its process."""

    name = "delta_spark"

    def __init__(self, client):
        self.ds = client

    def table(self, path: Path) -> str:
        return f"delta.`{path}`"

    def write(self, source: Path, path: Path):
        props = ", ".join(f"'{k}' = '{v}'" for k, v in DV.items())
        _, seconds = self.ds.timed_sql(
            f"CREATE TABLE {self.table(path)} USING delta TBLPROPERTIES ({props}) "
            f"AS SELECT * FROM parquet.`{source}`"
        )
        return seconds, live_files(path)

    def scan(self, path: Path):
        seconds = self.ds.timed_noop(f"SELECT * FROM {self.table(path)}")
        return seconds, None

    def aggregate(self, path: Path):
        rows, seconds = self.ds.timed_sql(f"SELECT sum(amount) AS s FROM {self.table(path)}")
        return seconds, rows[0]["s"]

    def select(self, path: Path, predicate: str):
        rows, files, seconds = self.ds.timed_files_read(f"SELECT * FROM {self.table(path)} WHERE {predicate}")
        return seconds, {"rows": len(rows), "files_read": files}

    def count(self, path: Path):
        rows, seconds = self.ds.timed_sql(f"SELECT count(*) AS n FROM {self.table(path)}")
        return seconds, rows[0]["n"]

    def optimize(self, path: Path):
        self.ds.sql(f"SET spark.databricks.delta.optimize.maxFileSize = {TARGET}")
        rows, seconds = self.ds.timed_sql(f"OPTIMIZE {self.table(path)}")
        metrics = rows[0]["metrics"]
        return seconds, {"removed": metrics["numFilesRemoved"], "added": metrics["numFilesAdded"]}

    def delete(self, path: Path):
        _, seconds = self.ds.timed_sql(f"DELETE FROM {self.table(path)} WHERE {DELETE}")
        return seconds, None

    def merge(self, path: Path, source: Path):
        _, seconds = self.ds.timed_sql(
            f"MERGE INTO {self.table(path)} t USING parquet.`{source}` s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
        return seconds, None

    def zorder(self, path: Path, columns: list[str], target: int):
        self.ds.sql(f"SET spark.databricks.delta.optimize.maxFileSize = {target}")
        _, seconds = self.ds.timed_sql(f"OPTIMIZE {self.table(path)} ZORDER BY ({', '.join(columns)})")
        return seconds, None

    def create_flows(self, source: Path, path: Path) -> None:
        self.ds.sql(f"CREATE TABLE {self.table(path)} USING delta AS SELECT * FROM parquet.`{source}`")


class DeltaplaneRunner:
    """The engine in this process; a query opens the table (as a Spark query resolves it)."""

    name = "deltaplane"

    def write(self, source: Path, path: Path):
        import pyarrow.dataset as ds

        from deltaplane.engine import write_table

        def run():
            reader = ds.dataset(str(source), format="parquet").scanner().to_reader()
            return write_table(str(path), reader, properties=DV)

        seconds, _ = clock(run)
        return seconds, live_files(path)

    def scan(self, path: Path):
        from deltaplane.engine import DeltaTable

        seconds, table = clock(lambda: DeltaTable(str(path)).to_arrow())
        return seconds, table.num_rows

    def aggregate(self, path: Path):
        from deltaplane.engine import DeltaTable

        return clock(lambda: pc.sum(DeltaTable(str(path)).to_arrow(columns=["amount"])["amount"]).as_py())

    def select(self, path: Path, predicate: str):
        from deltaplane.engine import DeltaTable

        seconds, table = clock(lambda: DeltaTable(str(path)).to_arrow(filter=predicate))
        files = len(DeltaTable(str(path)).file_uris(filter=predicate))
        return seconds, {"rows": table.num_rows, "files_read": files}

    def count(self, path: Path):
        from deltaplane.engine import DeltaTable

        return clock(lambda: DeltaTable(str(path)).count())

    def optimize(self, path: Path):
        from deltaplane.engine import DeltaTable

        seconds, metrics = clock(lambda: DeltaTable(str(path)).optimize(target_file_size=TARGET))
        return seconds, {"removed": metrics.num_files_removed, "added": metrics.num_files_added}

    def delete(self, path: Path):
        from deltaplane.engine import DeltaTable

        seconds, _ = clock(lambda: DeltaTable(str(path)).delete(DELETE))
        return seconds, None

    def merge(self, path: Path, source: Path):
        from deltaplane.engine import DeltaTable

        def run():
            rows = pq.ParquetDataset(str(source)).read()
            return (
                DeltaTable(str(path))
                .merge(rows, "t.id = s.id", source_alias="s", target_alias="t")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute()
            )

        seconds, _ = clock(run)
        return seconds, None

    def zorder(self, path: Path, columns: list[str], target: int):
        from deltaplane.engine import DeltaTable

        seconds, _ = clock(lambda: DeltaTable(str(path)).optimize(target_file_size=target, zorder_by=columns))
        return seconds, None

    def create_flows(self, source: Path, path: Path) -> None:
        from deltaplane.engine import DeltaTable

        files = sorted(source.glob("*.parquet"))
        first = pq.read_table(files[0])
        table = DeltaTable.create(str(path), first.schema)
        for f in files:
            table.append(pq.read_table(f))


class SparkSourceRunner:
    """deltaplane through pyspark 4.3: the ``deltaplane`` data source and the Spark jobs."""

    name = "spark_source"

    def __init__(self, spark):
        self.spark = spark

    def load(self, path: Path):
        return self.spark.read.format("deltaplane").load(str(path))

    def write(self, source: Path, path: Path):
        from deltaplane.engine import DeltaTable

        def run():  # "append" creates the table: the source has no ErrorIfExists mode
            self.spark.read.parquet(str(source)).write.format("deltaplane").mode("append").save(str(path))

        seconds, _ = clock(run)
        DeltaTable(str(path)).alter.set_table_properties(DV)  # the source cannot set properties
        return seconds, live_files(path)

    def scan(self, path: Path):
        seconds, _ = clock(lambda: self.load(path).write.format("noop").mode("overwrite").save())
        return seconds, None

    def aggregate(self, path: Path):
        from pyspark.sql import functions as F

        return clock(lambda: self.load(path).agg(F.sum("amount")).collect()[0][0])

    def select(self, path: Path, predicate: str):
        seconds, rows = clock(lambda: self.load(path).where(predicate).collect())
        return seconds, {"rows": len(rows), "files_read": live_files(path)}  # no skipping: all

    def count(self, path: Path):
        return clock(lambda: self.load(path).count())

    def optimize(self, path: Path):
        from deltaplane.spark_jobs import compact

        args = compact.build_parser().parse_args(["--table", str(path), "--target-size", str(TARGET)])
        seconds, metrics = clock(lambda: compact.main(args))
        return seconds, {"removed": metrics["num_files_removed"], "added": metrics["num_files_added"]}

    def delete(self, path: Path):
        from deltaplane.spark_jobs import dml

        args = dml.build_parser().parse_args(["--table", str(path), "--delete", DELETE])
        seconds, _ = clock(lambda: dml.main(args))
        return seconds, None

    merge = None  # the Spark jobs do DELETE and UPDATE; MERGE is engine-only

    def zorder(self, path: Path, columns: list[str], target: int):
        from deltaplane.spark_jobs import compact

        argv = ["--table", str(path), "--zorder", ",".join(columns), "--target-size", str(target)]
        args = compact.build_parser().parse_args(argv)
        seconds, _ = clock(lambda: compact.main(args))
        return seconds, None

    create_flows = DeltaplaneRunner.create_flows


# --- measuring -----------------------------------------------------------------------------------


def measure(run, *, repeat: int, warmup: int, fresh=None) -> dict:
    """The median of ``repeat`` runs after ``warmup`` untimed ones. ``run(arg)`` returns
    ``(seconds, value)``; ``fresh(i)`` (untimed) makes each run's argument, ``fresh(i, done)``
    tidies up after it."""
    times, value = [], None
    for i in range(warmup + repeat):
        arg = fresh(i) if fresh else None
        seconds, value = run(arg)
        if fresh and hasattr(fresh, "done"):
            fresh.done(arg)
        if i >= warmup:
            times.append(seconds)
    return {"seconds": statistics.median(times), "runs": times, "value": value}


class Copies:
    """A fresh copy of ``base`` for every run, removed after it (or kept for a check)."""

    def __init__(self, base: Path, work: Path, tag: str, check=None):
        self.base, self.work, self.tag, self.check = base, work, tag, check
        self.checked = None

    def __call__(self, i: int) -> Path:
        path = self.work / f"{self.tag}-{i}"
        shutil.copytree(self.base, path)
        return path

    def done(self, path: Path) -> None:
        if self.check is not None:
            self.checked = self.check(path)
        shutil.rmtree(path, ignore_errors=True)


def rows_after(path: Path) -> dict:
    from deltaplane.engine import DeltaTable

    table = DeltaTable(str(path))
    ids = table.to_arrow(columns=["id"])["id"]
    return {"rows": len(ids), "id_sum": pc.sum(ids).as_py(), "files_with_dv": files_with_dv(path)}


def figure5(runner, flows: Path, work: Path, probes: dict[str, list[int]], args) -> dict:
    """Z-order the flows into about 100 files, then probe each field with random values."""
    from deltaplane.engine import DeltaTable

    out: dict = {}
    base = work / f"flows-{runner.name}"
    runner.create_flows(flows, base)
    total = sum(DeltaTable(str(base)).snapshot.files.column("size").to_pylist())
    target = -(-total // FLOW_FILES)
    columns = list(probes)
    copies = Copies(base, work, f"zorder-{runner.name}")
    kept = {}

    def zorder(path):
        seconds, _ = runner.zorder(path, columns, target)
        return seconds, None

    def keep_last(path):
        if kept:
            shutil.rmtree(kept["path"], ignore_errors=True)
        kept["path"] = path

    copies.done = keep_last  # the last Z-ordered copy is the one probed
    out["zorder"] = measure(zorder, repeat=args.repeat, warmup=args.warmup, fresh=copies)
    table_path = kept["path"]
    files = len(DeltaTable(str(table_path)).snapshot.files)
    out["files"] = files
    layout = {}
    read, times, matches = {}, [], 0
    if runner.name == "delta_spark":
        query = f"SELECT * FROM delta.`{table_path}` WHERE {{}}"
        for column, values in probes.items():
            counts = []
            for i, v in enumerate(values):
                rows, n, seconds = runner.ds.timed_files_read(query.format(f"{column} = {v}"))
                counts.append(n)
                matches += len(rows)
                if i >= args.warmup:
                    times.append(seconds)
            read[column] = counts
    elif runner.name == "deltaplane":
        for column, values in probes.items():
            counts = []
            table = DeltaTable(str(table_path))
            for i, v in enumerate(values):
                seconds, result = clock(lambda: table.to_arrow(filter=f"{column} = {v}"))  # noqa: B023
                counts.append(len(table.file_uris(filter=f"{column} = {v}")))
                matches += result.num_rows
                if i >= args.warmup:
                    times.append(seconds)
            read[column] = counts
    else:
        df = runner.load(table_path)
        planner = DeltaTable(str(table_path))
        for column, values in probes.items():
            counts = []
            for i, v in enumerate(values):
                seconds, rows = clock(lambda: df.where(f"{column} = {v}").collect())  # noqa: B023
                counts.append(files)  # the data source reads every file
                layout.setdefault(column, []).append(len(planner.file_uris(filter=f"{column} = {v}")))
                matches += len(rows)
                if i >= args.warmup:
                    times.append(seconds)
            read[column] = counts
    out["probe"] = {"seconds": statistics.median(times), "runs": len(times), "value": matches}
    out["skipped_percent"] = {c: 100.0 * (1 - float(np.mean(n)) / files) for c, n in read.items()}
    out["mean_skipped_percent"] = float(np.mean(list(out["skipped_percent"].values())))
    out["mean_files_read"] = float(np.mean([x for n in read.values() for x in n]))
    if layout:  # what the engine's planner would skip on the layout the Spark job wrote
        out["layout_skipped_percent"] = {
            c: 100.0 * (1 - float(np.mean(n)) / files) for c, n in layout.items()
        }
    return out


def machine() -> dict:
    import pyspark

    return results_file.machine(
        pyspark_for_deltaplane=pyspark.__version__, delta_spark="4.4.0 (pyspark 4.2.0, tests/deltaspark)"
    )


# --- the run -------------------------------------------------------------------------------------


_STARTED = time.perf_counter()


def progress(name: str, phase: str) -> None:
    print(f"[{time.perf_counter() - _STARTED:7.1f}s] {name}: {phase}", file=sys.stderr, flush=True)


def run_engine(runner, paths: dict, work: Path, args, results: dict) -> None:
    name = runner.name
    rows = args.rows
    progress(name, "write")
    own = work / f"own-{name}"

    def write(path):
        return runner.write(paths["source"], path)

    def fresh_write(i):
        return own if i == 0 else work / f"write-{name}-{i}"

    def done_write(path):
        if path != own:
            shutil.rmtree(path, ignore_errors=True)

    fresh_write.done = done_write
    res = results["operations"]
    res["write"][name] = measure(write, repeat=args.repeat, warmup=args.warmup, fresh=fresh_write)
    res["write"][name]["value"] = {"files": live_files(own), **rows_after(own)}

    progress(name, "reads")
    plain = {"repeat": args.repeat, "warmup": args.warmup}
    res["scan"][name] = measure(lambda _: runner.scan(own), **plain)
    res["aggregate"][name] = measure(lambda _: runner.aggregate(own), **plain)
    res["filter"][name] = measure(lambda _: runner.select(own, FILTER), **plain)
    res["range"][name] = measure(lambda _: runner.select(own, range_filter(rows)), **plain)
    res["count"][name] = measure(lambda _: runner.count(own), **plain)

    progress(name, "OPTIMIZE, DELETE, MERGE")
    small = Copies(paths["small"], work, f"optimize-{name}", check=rows_after)
    res["optimize"][name] = measure(lambda p: runner.optimize(p), fresh=small, **plain)
    res["optimize"][name]["after"] = small.checked
    deletes = Copies(own, work, f"delete-{name}", check=rows_after)
    res["delete"][name] = measure(lambda p: runner.delete(p), fresh=deletes, **plain)
    res["delete"][name]["value"] = deletes.checked
    if runner.merge is not None:
        merges = Copies(own, work, f"merge-{name}", check=rows_after)
        res["merge"][name] = measure(lambda p: runner.merge(p, paths["merge"]), fresh=merges, **plain)
        res["merge"][name]["value"] = merges.checked
    shutil.rmtree(own, ignore_errors=True)

    progress(name, "Figure 5")
    fig = figure5(runner, paths["flows"], work, results["probes"], args)
    res["zorder"][name] = {**fig.pop("zorder"), "files": fig["files"]}
    res["probe"][name] = fig.pop("probe")
    results["figure5"][name] = fig
    progress(name, "done")


def main(argv: list[str] | None = None) -> dict:
    parser = results_file.command_line(__doc__, "delta_spark")
    parser.add_argument("--quick", action="store_true", help="small sizes, one run each: to try things")
    parser.add_argument("--rows", type=int, help="rows of the main table (10,000,000; --quick 100,000)")
    parser.add_argument("--small-files", type=int, help="files of the OPTIMIZE table (1,000; --quick 40)")
    parser.add_argument("--flows", type=int, help="rows of the Figure 5 table (1,000,000; --quick 50,000)")
    parser.add_argument("--queries", type=int, help="Figure 5 probes per field (20; --quick 3)")
    parser.add_argument(
        "--repeat", type=int, help="timed runs per operation, the median reported (3; --quick 1)"
    )
    parser.add_argument("--warmup", type=int, help="untimed runs first (1; --quick 0)")
    parser.add_argument("--data", default=str(HERE / "data" / "delta_spark"), help="generated inputs, reused")
    args = parser.parse_args(argv)
    quick = {"rows": 100_000, "small_files": 40, "flows": 50_000, "queries": 3, "repeat": 1, "warmup": 0}
    full = {"rows": 10_000_000, "small_files": 1000, "flows": 1_000_000, "queries": 20, "repeat": 3}
    results_file.sized(args, quick, {**full, "warmup": 1})

    from benchmarks.zorder_skipping import COLUMNS
    from deltaplane.spark_jobs.session import get_spark
    from tests.deltaspark.client import DeltaSpark

    data_root = Path(args.data)
    paths = prepare_data(data_root, args.rows, args.small_files, args.flows)
    rng = np.random.default_rng(99)
    probes = {
        c: rng.integers(0, 2**32 if c.endswith("IP") else 2**16, args.queries + args.warmup).tolist()
        for c in COLUMNS
    }
    results: dict = {
        "sizes": {
            k: getattr(args, k) for k in ("rows", "small_files", "flows", "queries", "repeat", "warmup")
        },
        "machine": machine(),
        "probes": probes,
        "operations": {key: {} for key, _ in ROWS},
        "figure5": {},
        "startup_seconds": {},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(f"{out}.tmp")  # what the finished engines measured, should a later one fail

    def engine(runner) -> None:
        run_engine(runner, paths, work, args, results)
        results_file.write_results(partial, results)

    work = Path(tempfile.mkdtemp(prefix="work-", dir=data_root))
    try:
        started = time.perf_counter()
        with DeltaSpark.start(max_seconds=6 * 3600, driver_memory="4g") as client:
            results["startup_seconds"]["delta_spark"] = {
                "session": client.startup_seconds,
                "with_process": time.perf_counter() - started,
            }
            engine(DeltaSparkRunner(client))
        engine(DeltaplaneRunner())
        conf = {"spark.driver.memory": "4g", "spark.ui.showConsoleProgress": "false"}
        seconds, spark = clock(lambda: get_spark("local[2]", app_name="deltaplane-vs-delta-spark", conf=conf))
        spark.sparkContext.setLogLevel("ERROR")
        results["startup_seconds"]["spark_source"] = {"session": seconds}
        try:
            engine(SparkSourceRunner(spark))
        finally:
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["machine"]["load_average_at_end"] = os.getloadavg()
    results["checks"] = checks(results, args)
    results_file.write_results(out, results)
    partial.unlink(missing_ok=True)
    report(results, args)
    return results


def checks(results: dict, args) -> dict:
    """Did every engine do the same work? (Recorded and printed, never asserted here.)"""
    ops = results["operations"]

    def same(values) -> bool:
        values = list(values)
        return all(v == values[0] for v in values)

    out = {
        "write_rows": same(r["value"]["rows"] for r in ops["write"].values()),
        "write_id_sum": same(r["value"]["id_sum"] for r in ops["write"].values()),
        "count": same([*(r["value"] for r in ops["count"].values()), args.rows]),
        "scan_rows": ops["scan"]["deltaplane"]["value"] == args.rows,
        "aggregate": all(
            abs(r["value"] - ops["aggregate"]["deltaplane"]["value"]) <= 1e-6 * abs(r["value"])
            for r in ops["aggregate"].values()
        ),
        "filter_rows": same(r["value"]["rows"] for r in ops["filter"].values()),
        "range_rows": same(r["value"]["rows"] for r in ops["range"].values()),
        "optimize_rows": same((r["after"]["rows"], r["after"]["id_sum"]) for r in ops["optimize"].values()),
        "delete_rows": same([*((r["value"]["rows"], r["value"]["id_sum"]) for r in ops["delete"].values())]),
        "delete_by_dv": all(r["value"]["files_with_dv"] > 0 for r in ops["delete"].values()),
        "merge_rows": same((r["value"]["rows"], r["value"]["id_sum"]) for r in ops["merge"].values()),
        "probe_matches": same(r["value"] for r in ops["probe"].values()),
    }
    return out


def report(results: dict, args) -> None:
    ops = results["operations"]
    sizes = results["sizes"]
    m = results["machine"]
    print(
        f"\nDelta Spark 4.4 vs deltaplane, {sizes['rows']:,} rows x 8 columns; median of {sizes['repeat']} "
        f"runs after {sizes['warmup']} warm-up; {m['cpus']} CPUs ({m['cpu_model']}), {m['memory_gib']} GiB"
    )
    header = (
        f"{'operation':<30}{'Delta Spark':>12}{'deltaplane':>12}{'via Spark':>11}"
        f"{'deltaplane/DS':>15}{'via Spark/DS':>14}"
    )
    print(header)
    print("-" * len(header))

    def cell(value, width):
        return f"{value:.3f}s".rjust(width) if value is not None else "n/a".rjust(width)

    def ratio(value, anchor, width):
        return f"{value / anchor:.2f}x".rjust(width) if value is not None and anchor else "n/a".rjust(width)

    for key, label in ROWS:
        ds, dp, sp = (ops[key].get(e, {}).get("seconds") for e in ENGINES)
        label = label.format(rows=f"{sizes['rows']:,}", small=f"{sizes['small_files']:,}")
        print(f"{label:<30}{cell(ds, 12)}{cell(dp, 12)}{cell(sp, 11)}{ratio(dp, ds, 15)}{ratio(sp, ds, 14)}")
    fig = results["figure5"]
    print(
        f"\nFigure 5: {sizes['flows']:,} flows Z-ordered into ~{FLOW_FILES} files, "
        f"{sizes['queries']} probes per field"
    )
    print(f"{'field':<12}" + "".join(f"{e:>16}" for e in ENGINES) + "   (% of files skipped)")
    for column in results["probes"]:
        print(f"{column:<12}" + "".join(f"{fig[e]['skipped_percent'][column]:>15.1f}%" for e in ENGINES))
    print(f"{'mean':<12}" + "".join(f"{fig[e]['mean_skipped_percent']:>15.1f}%" for e in ENGINES))
    print(
        f"{'files read':<12}"
        + "".join(f"{fig[e]['mean_files_read']:>9.1f} of {fig[e]['files']:<3}" for e in ENGINES)
    )
    layout = fig["spark_source"].get("layout_skipped_percent")
    if layout:
        print(
            f"(the data source reads every file; on the layout its compact job wrote, deltaplane's planner "
            f"would skip {float(np.mean(list(layout.values()))):.1f}% on average)"
        )
    st = results["startup_seconds"]
    print(
        f"\nJVM start-up (not in any row): Delta Spark session {st['delta_spark']['session']:.1f}s "
        f"({st['delta_spark']['with_process']:.1f}s with its process), deltaplane's Spark session "
        f"{st['spark_source']['session']:.1f}s"
    )
    opt = {e: ops["optimize"][e]["value"] for e in ENGINES}
    print(
        "OPTIMIZE files removed -> added: "
        + ", ".join(f"{e} {v['removed']} -> {v['added']}" for e, v in opt.items())
    )
    bad = [k for k, ok in results["checks"].items() if not ok]
    print("same results everywhere: " + ("yes" if not bad else f"NO: {', '.join(bad)}"))


if __name__ == "__main__":
    main()
