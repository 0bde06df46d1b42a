"""The whole suite on a clean clone with a Spark job beside it: the measurement behind the
project's aim of a suite under 30 minutes while another Spark job shares the machine.

The clone is made from this repository's HEAD into a temporary folder and runs ``.ci/run`` (the
README's test command: it installs its own virtualenv, the Delta Spark reference and everything
else, as CI does). As soon as the clone's pytest starts, the neighbour runs for ``--minutes``:
``benchmarks/spark.py --rows 2000000`` (Spark local[2] reading and deleting from a 2M-row table)
back to back, with this interpreter, each run in a session of its own, as another team's job
would be (the kernel's autogroup scheduling, on by default, shares the cores between sessions).

    .venv/bin/python benchmarks/suite_beside.py [--minutes 20] [--keep]

Prints and writes ``benchmarks/results/suite_beside.json``: pytest's own seconds (its summary
line), the whole run's, the outcome line and the neighbour's runs. The conformance corpus is
this checkout's (``DELTAPLANE_CONFORMANCE`` or ``../shared/conformance``), since the clone does
not sit beside it. It takes as long as the suite (about 30 minutes here); run it on an
otherwise idle machine.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from benchmarks.results_file import command_line, write_results  # noqa: E402 (the repository root goes on the path first)

SUMMARY = re.compile(r"^=*\s*(?P<outcome>\d+ (?:passed|failed)[^\n]*?) in (?P<seconds>[\d.]+)s", re.MULTILINE)


def _pytest_started(clone: Path) -> bool:
    """Whether a pytest runs in the clone (a process whose command is ``-m pytest`` and whose
    working directory is the clone)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            if b"pytest" in command and b"-m" in command and Path(os.readlink(entry / "cwd")) == clone:
                return True
        except OSError:  # gone, or not ours to read
            continue
    return False


def _neighbour(minutes: float, log: Path) -> int:
    """Run the Spark benchmark back to back for ``minutes`` in a session of its own; the runs
    started."""
    runs, deadline = 0, time.monotonic() + minutes * 60
    out = log.with_suffix(".json")
    with open(log, "a") as sink:
        while time.monotonic() < deadline:
            subprocess.run(
                [sys.executable, str(HERE / "spark.py"), "--rows", "2000000", "--out", str(out)],
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                timeout=30 * 60,
            )
            runs += 1
    return runs


def main(argv: list[str] | None = None) -> dict:
    parser = command_line(__doc__, "suite_beside")
    parser.add_argument("--minutes", type=float, default=20, help="how long the neighbour runs")
    parser.add_argument("--keep", action="store_true", help="keep the clone (its logs) afterwards")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="deltaplane-suite-beside-"))
    clone = work / "deltaplane"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    commit = subprocess.run(
        ["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout
    corpus = os.environ.get("DELTAPLANE_CONFORMANCE", str(ROOT.parent / "shared" / "conformance"))
    env = {**os.environ, "DELTAPLANE_CONFORMANCE": corpus}
    env.pop("VIRTUAL_ENV", None)
    suite_log = work / "suite.log"
    start = time.monotonic()
    with open(suite_log, "w") as sink:
        suite = subprocess.Popen(
            [str(clone / ".ci" / "run")],
            cwd=clone,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, stopped whole on an interruption
        )
    try:
        while suite.poll() is None and not _pytest_started(clone):
            time.sleep(2)
        runs = _neighbour(args.minutes, work / "neighbour.log") if suite.poll() is None else 0
        returncode = suite.wait()
    except BaseException:
        if suite.poll() is None:
            os.killpg(suite.pid, signal.SIGTERM)
        raise
    total = time.monotonic() - start
    text = suite_log.read_text(errors="replace")
    found = SUMMARY.findall(text)
    results = {
        "commit": commit.strip(),
        "returncode": returncode,
        "outcome": found[-1][0] if found else None,
        "pytest_s": float(found[-1][1]) if found else None,
        "total_s": round(total, 1),
        "neighbour": f"benchmarks/spark.py --rows 2000000, back to back, own session, {args.minutes:g} min",
        "neighbour_runs": runs,
        "goal_s": 1800,
    }
    print(results)
    write_results(args.out, results)
    if args.keep:
        print(f"clone and logs kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return results


if __name__ == "__main__":
    main()
