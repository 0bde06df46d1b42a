"""Set up the Delta Spark reference once: its own virtualenv (pyspark + delta-spark pinned in
requirements.txt) and Delta's jars from Maven Central (pom.xml), under one folder.

    python tests/deltaspark/provision.py [--home .cache/delta-spark]

Idempotent: a stamp records the hash of requirements.txt and pom.xml; a matching stamp means
nothing to do. Standard library only (it runs before the project's own virtualenv matters).
Each step says what it runs; a failure names the command and its output and exits non-zero.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT_ROOT = HERE.parent.parent
DEFAULT_HOME = PROJECT_ROOT / ".cache" / "delta-spark"
INPUTS = (HERE / "requirements.txt", HERE / "pom.xml")


def home_dir() -> Path:
    return Path(os.environ.get("DELTAPLANE_DELTA_SPARK_HOME", DEFAULT_HOME)).resolve()


def fingerprint() -> str:
    digest = hashlib.sha256()
    for path in INPUTS:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def is_provisioned(home: Path) -> bool:
    stamp = home / "stamp"
    return stamp.exists() and stamp.read_text().strip() == fingerprint()


def _run(command: list[str], what: str) -> None:
    print(f"[delta-spark] {what}: {' '.join(command)}", flush=True)
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        output = f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        sys.exit(f"[delta-spark] {what} failed (exit {done.returncode}):\n{output}")
    print(f"[delta-spark] {what}: done in {time.monotonic() - started:.0f} s", flush=True)


def provision(home: Path) -> None:
    if is_provisioned(home):
        print(f"[delta-spark] {home} is up to date")
        return
    staging = home.with_name(home.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    venv.EnvBuilder(with_pip=True).create(staging / "venv")
    python = str(staging / "venv" / "bin" / "python")
    _run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", str(INPUTS[0])],
        "pip install the reference's PySpark and delta-spark",
    )
    mvn = shutil.which("mvn")
    if mvn is None:
        sys.exit("[delta-spark] Maven (mvn) is not on PATH: it fetches Delta's jars from Maven Central")
    _run(
        [
            mvn, "-B", "-q", "-f", str(INPUTS[1]), "dependency:copy-dependencies",
            "-DexcludeTransitive=true", f"-DoutputDirectory={staging / 'jars'}",
        ],
        "mvn copy Delta's jars from Maven Central",
    )
    jars = sorted(p.name for p in (staging / "jars").glob("*.jar"))
    if len(jars) != 2:
        sys.exit(f"[delta-spark] expected Delta's two jars, got {jars}")
    (staging / "stamp").write_text(fingerprint() + "\n")
    # Relocating a virtualenv breaks its scripts' shebangs, but the harness only runs
    # `venv/bin/python`, which resolves its prefix from its own location.
    shutil.rmtree(home, ignore_errors=True)
    staging.rename(home)
    print(f"[delta-spark] ready in {home}: {', '.join(jars)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=None, help="default: .cache/delta-spark")
    args = parser.parse_args()
    home = (args.home or home_dir()).resolve()
    provision(home)


if __name__ == "__main__":
    main()
