"""benchmarks/suite_beside.py's two judgements on a real pytest run: when the clone's pytest has
started (the neighbour starts then) and what its summary line says."""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks.suite_beside import SUMMARY, _pytest_started


def test_a_pytest_in_the_clone_is_seen_and_its_summary_read(tmp_path):
    clone, elsewhere = tmp_path / "clone", tmp_path / "elsewhere"
    clone.mkdir(), elsewhere.mkdir()
    (clone / "test_sleepy.py").write_text(
        "import time\n\ndef test_waits():\n    time.sleep(2)\n\ndef test_fails():\n    assert False\n"
    )
    assert not _pytest_started(clone)
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "test_sleepy.py"],
        cwd=clone,
        stdout=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not _pytest_started(clone):
        assert run.poll() is None and time.monotonic() < deadline, "the running pytest was not seen"
        time.sleep(0.1)
    assert not _pytest_started(elsewhere)  # a pytest in another folder is not the clone's
    output, _ = run.communicate(timeout=120)
    (outcome, seconds), *rest = SUMMARY.findall(output)
    assert rest == [] and outcome == "1 failed, 1 passed", output[-500:]
    assert 2 <= float(seconds) < 120
    assert not _pytest_started(clone)
