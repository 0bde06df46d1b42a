"""The fast tier (``pytest --fast``, ``make check``) keeps out what it says it keeps out: a test
that starts an external program, itself or through a child, fails there and says which marker
to add; marked tests are not run; the same tests pass in the whole suite."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.tiers import external_program

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["/usr/lib/jvm/java-17/bin/java", "-cp", "x", "Main"], "java"),
        (["/bin/bash", "/opt/spark/bin/spark-submit", "--master", "local[1]"], "spark-submit"),
        (["spark-submit", "job.py"], "spark-submit"),
        (["/usr/bin/weed", "server"], "weed"),
        (["chromium", "--headless"], "chromium"),
        ([sys.executable, "-m", "airflow", "triggerer"], "airflow triggerer"),
        (["airflow", "--verbose", "scheduler"], "airflow scheduler"),
        ([sys.executable, "-m", "airflow", "api-server", "--port", "8080"], "airflow api-server"),
        ([sys.executable, "-m", "airflow", "db", "migrate"], None),  # the metadata database's own code
        ([sys.executable, "-m", "deltaplane.engine.cli", "vacuum"], None),  # a fresh interpreter of ours
        (["java.sh"], None),
        ("java", "java"),
        ([], None),
    ],
)
def test_external_programs_are_named_by_what_they_run(argv, expected):
    assert external_program(argv) == expected


def _fake_program(folder: Path, name: str) -> Path:
    """An executable called ``name`` (what the tier looks at) that only sleeps: 2 s, long enough
    for the watcher (0.2 s), or ``$FAKE_PROGRAM_SECONDS`` where no watcher runs."""
    path = folder / name
    path.write_text('#!/bin/sh\nsleep "${FAKE_PROGRAM_SECONDS:-2}"\n')
    path.chmod(0o755)
    return path


def _run_pytest(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), **env}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.tiers", "-p", "no:cacheprovider", "-q", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_fast_test_that_starts_an_external_program_fails_naming_the_marker(tmp_path):
    weed = _fake_program(tmp_path, "weed")
    (tmp_path / "test_inner.py").write_text(
        textwrap.dedent(
            f"""
            import subprocess, sys
            import pytest

            def test_direct():
                subprocess.run([{str(weed)!r}], timeout=30)

            def test_expects_a_failure():  # must not pass because the guard made one
                with pytest.raises(Exception):
                    subprocess.run([{str(weed)!r}], timeout=30)

            def test_through_a_child():  # a Python child starts it: the guard of Popen cannot see
                code = "import subprocess; subprocess.run([{str(weed)!r}])"
                subprocess.run([sys.executable, "-c", code], timeout=30)

            def test_in_process():
                subprocess.run([sys.executable, "-c", "pass"], check=True)

            @pytest.mark.external
            def test_marked():
                subprocess.run([{str(weed)!r}], timeout=30)
            """
        )
    )
    fast = _run_pytest(tmp_path, "--fast", "-rfE", "test_inner.py")
    out = fast.stdout
    assert fast.returncode == 1, out
    assert "3 failed, 1 passed, 1 deselected" in out, out
    for name in ("test_direct", "test_expects_a_failure", "test_through_a_child"):
        assert f"FAILED test_inner.py::{name}" in out, out
    assert "started 'weed' in the fast tier: mark the test @pytest.mark.external" in out, out
    assert "a child process started 'weed'" in out, out

    # Without --fast no watcher runs: the fake programs need not sleep (three of them ran 2 s each).
    whole = _run_pytest(tmp_path, "-k", "not expects_a_failure", "test_inner.py", FAKE_PROGRAM_SECONDS="0")
    assert whole.returncode == 0, whole.stdout
    assert "4 passed" in whole.stdout, whole.stdout
