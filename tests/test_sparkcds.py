"""The suite's Spark CDS archive (tests/sparkcds.py): every Spark driver the suite starts can map it,
and an archive that is missing or does not fit changes nothing but speed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import sparkcds
from tests.conftest import SPARK_JVM_FLAGS

SPARK_SUBMIT = str(Path(sys.executable).parent / "spark-submit")


def _submit_version(opts: str, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "SPARK_SUBMIT_OPTS": opts,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    return subprocess.run(
        [SPARK_SUBMIT, *args, "--version"], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.external
def test_spark_drivers_started_by_the_suite_map_the_archive():
    """``-Xshare:on`` turns "the archive does not fit this JVM" into a failed start; the session
    builds the archive beside its first tests (waited for here, as long as a build may take)."""
    archive = sparkcds.archive_path(SPARK_JVM_FLAGS)
    assert archive is not None, "Java or pyspark not found"
    if sparkcds.use_flags(archive) not in os.environ["SPARK_SUBMIT_OPTS"]:
        pytest.fail(f"the suite's Spark drivers do not use the archive: {os.environ['SPARK_SUBMIT_OPTS']!r}")
    deadline = time.monotonic() + sparkcds.BUILD_SECONDS
    while not archive.exists():
        assert time.monotonic() < deadline, (
            f"no archive after {sparkcds.BUILD_SECONDS} s: {sparkcds.CACHE}/build.log"
        )
        time.sleep(2)
    used = _submit_version(f"{os.environ['SPARK_SUBMIT_OPTS']} -Xshare:on")
    assert used.returncode == 0, used.stdout + used.stderr
    # The check can fail: a driver whose class path differs from the training run's cannot map it.
    foreign = _submit_version(
        f"{os.environ['SPARK_SUBMIT_OPTS']} -Xshare:on", "--driver-class-path", str(Path(__file__).parent)
    )
    assert foreign.returncode != 0 and "shared archive" in foreign.stdout + foreign.stderr


@pytest.mark.external
def test_a_missing_archive_changes_no_output():
    java = shutil.which("java")
    assert java is not None
    plain = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    flags = sparkcds.use_flags(Path("/nonexistent/spark.jsa")).split()
    missing = subprocess.run([java, *flags, "-version"], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 0
    assert missing.stdout == plain.stdout == ""
    # The version banner names the sharing mode ("mixed mode, sharing"): compare its first lines.
    assert missing.stderr.splitlines()[0] == plain.stderr.splitlines()[0]


def test_the_archive_is_named_by_the_jvm_flags():
    first = sparkcds.archive_path(SPARK_JVM_FLAGS)
    assert first is not None and first == sparkcds.archive_path(SPARK_JVM_FLAGS)
    assert first != sparkcds.archive_path(f"{SPARK_JVM_FLAGS} -Xmx1g")


@pytest.mark.external
def test_a_build_stopped_by_the_session_leaves_no_partial_archive(tmp_path, monkeypatch):
    """The session stops an unfinished training run (by its process group) and removes what its
    JVM dumped on the way out: the next session builds again from nothing."""
    monkeypatch.setattr(sparkcds, "CACHE", tmp_path)
    archive = tmp_path / "spark-test.jsa"
    process = sparkcds.start_build(SPARK_JVM_FLAGS, archive)
    assert process is not None
    deadline = time.monotonic() + 120
    while "log4j" not in (tmp_path / "build.log").read_text(errors="replace"):
        assert process.poll() is None and time.monotonic() < deadline, (tmp_path / "build.log").read_text()
        time.sleep(0.5)
    (tmp_path / f"spark-test.{os.getpid()}.partial").write_bytes(b"half")  # as a JVM's exit dump leaves it
    sparkcds.stop_build(process)
    assert process.poll() is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build.log"]
