"""A class-data-sharing archive for the suite's short-lived Spark JVMs.

Each Spark driver the suite starts (a job's spark-submit, a task's submit, a test's local session)
spends about half of its CPU seconds loading and verifying the same ten thousand classes. A dynamic
CDS archive (JDK 13+: ``-XX:ArchiveClassesAtExit`` once, ``-XX:SharedArchiveFile`` after) holds
them already parsed and verified: a trivial job drops from about 16.5 to 8.5 CPU seconds.

The archive is written once per machine by a training run of this file under ``spark-submit``
(``train``, below), under ``.cache/spark-cds/`` and named by everything it depends on (the Java
runtime, Spark's jars, the JVM flags), so a changed JDK or Spark gets a new one. A JVM started while
the archive does not exist yet, or whose class path does not match it, runs as it would without it
(its CDS warnings are turned off): the archive only ever changes how fast a test runs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.proctree import stop_group

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("DELTAPLANE_SPARK_CDS_DIR", ROOT / ".cache" / "spark-cds"))
BUILD_SECONDS = 300  # the training run stops after this, archive or not


def _spark_jars() -> Path | None:
    spec = importlib.util.find_spec("pyspark")  # not imported: every test process asks
    if spec is None or not spec.submodule_search_locations:
        return None
    jars = Path(spec.submodule_search_locations[0]) / "jars"
    return jars if jars.is_dir() else None


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    java = Path(home, "bin", "java") if home else shutil.which("java")
    return str(Path(java).resolve()) if java and Path(java).exists() else None


def archive_path(flags: str) -> Path | None:
    """Where the archive for this Java, this Spark and these JVM ``flags`` lives (or will)."""
    java, jars = _java(), _spark_jars()
    if java is None or jars is None:
        return None
    key = hashlib.sha256()
    stat = os.stat(java)
    key.update(f"{java}\0{stat.st_size}\0{stat.st_mtime_ns}\0{flags}\0".encode())
    for jar in sorted(jars.iterdir()):
        key.update(f"{jar.name}\0{jar.stat().st_size}\0".encode())
    return CACHE / f"spark-{key.hexdigest()[:16]}.jsa"


def use_flags(archive: Path) -> str:
    """The JVM flags that use ``archive`` when it exists and say nothing when it does not fit."""
    return f"-XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"


def start_build(flags: str, archive: Path) -> subprocess.Popen | None:
    """Start the training run that writes ``archive`` (None when it exists or Spark is missing).
    The run writes to a temporary name and renames at the end: a JVM never maps half an archive."""
    spark_submit = Path(sys.executable).parent / "spark-submit"
    if archive.exists() or not spark_submit.exists():
        return None
    CACHE.mkdir(parents=True, exist_ok=True)
    for stale in CACHE.glob("spark-*.jsa"):  # another Java or Spark: never used again
        stale.unlink(missing_ok=True)
    partial = archive.with_suffix(f".{os.getpid()}.partial")
    env = {
        **os.environ,
        "SPARK_SUBMIT_OPTS": f"{flags} -XX:ArchiveClassesAtExit={partial}",
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),  # `tests`
        "DELTAPLANE_SPARK_CDS_PARTIAL": str(partial),
        "DELTAPLANE_SPARK_CDS_ARCHIVE": str(archive),
    }
    command = [
        sys.executable, "-c",
        "import sys, tests.sparkcds as c; sys.exit(c.build(sys.argv[1]))", str(spark_submit),
    ]  # fmt: skip
    with open(CACHE / "build.log", "wb") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            command, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def build(spark_submit: str) -> int:
    """Run the training job under ``spark-submit``; on success move the archive into place."""
    partial = Path(os.environ["DELTAPLANE_SPARK_CDS_PARTIAL"])
    archive = Path(os.environ["DELTAPLANE_SPARK_CDS_ARCHIVE"])
    command = [spark_submit, "--master", "local[2]", "--conf", "spark.ui.enabled=false", __file__, "train"]
    try:
        code = subprocess.run(command, timeout=BUILD_SECONDS).returncode
    except subprocess.TimeoutExpired:
        code = -1
    if code == 0 and partial.exists():
        os.replace(partial, archive)
        return 0
    partial.unlink(missing_ok=True)
    return code or 1


def stop_build(process: subprocess.Popen | None) -> None:
    """Stop a training run the session no longer waits for (by the process group it started)."""
    if process is None or process.poll() is not None:
        return
    stop_group(process, timeout=10)
    for partial in CACHE.glob(f"*.{os.getpid()}.partial"):  # named by the process that started it
        partial.unlink(missing_ok=True)


def train() -> None:
    """What the suite's Spark drivers do, in miniature: SQL, Parquet, Arrow, Python UDFs, and the
    deltaplane data source and native read on a small table (their classes go into the archive)."""
    import tempfile

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import deltaplane.spark_jobs as jobs
    from deltaplane.spark_jobs.native import read_table

    spark = SparkSession.builder.getOrCreate()
    jobs.register(spark)
    with tempfile.TemporaryDirectory(prefix="spark-cds-") as scratch:
        frame = spark.range(2000).select(
            F.col("id"),
            (F.col("id") % 7).alias("k"),
            F.concat(F.lit("v"), F.col("id").cast("string")).alias("s"),
        )
        frame.groupBy("k").agg(F.sum("id"), F.max("s")).orderBy("k").collect()
        frame.write.parquet(f"{scratch}/parquet")
        spark.read.parquet(f"{scratch}/parquet").filter("k = 3").count()
        frame.mapInArrow(lambda batches: batches, frame.schema).count()
        table = f"{scratch}/table"
        frame.write.format("deltaplane").mode("append").save(table)
        spark.read.format("deltaplane").load(table).filter("id > 10").agg(F.count("*")).collect()
        read_table(spark, table).filter("k = 1").select("s").toPandas()
    spark.stop()


if __name__ == "__main__" and sys.argv[1:] == ["train"]:
    train()
