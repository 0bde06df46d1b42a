"""Submitting jobs the same way everywhere: the command line, the package zip, the result.

``spark_submit_command("compact", ["--table", uri], master="spark://127.0.0.1:7077")`` builds the
``spark-submit`` command line (the wheel's own ``spark-submit``, the master URL, ``--py-files``
with a zip of ``engine`` and ``spark_jobs`` built on the fly so every Python worker can import
them, this interpreter for the driver and the workers, extra ``--conf``); ``submit`` runs it with
a time limit and parses the job's JSON metrics line. The Airflow operators call the same
functions. From a shell::

    python -m spark_jobs.submit compact --master spark://127.0.0.1:7077 -- --table s3://lake/t

(everything after ``--`` is passed to the job).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

JOBS = ("ingest", "compact", "dml")
PACKAGES = ("engine", "spark_jobs")
_ROOT = Path(__file__).resolve().parent.parent


def spark_home() -> Path:
    """The Spark distribution inside the pyspark wheel (``bin/spark-submit``, ``bin/spark-class``)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def build_package(directory: str | os.PathLike | None = None) -> Path:
    """A zip of the ``engine`` and ``spark_jobs`` packages for ``--py-files``; named by a hash
    of its contents, so an unchanged tree reuses the zip it built before."""
    files = sorted(
        p for package in PACKAGES for p in (_ROOT / package).rglob("*.py") if "__pycache__" not in p.parts
    )
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(_ROOT)).encode())
        digest.update(path.read_bytes())
    out_dir = (
        Path(directory) if directory is not None else Path(tempfile.gettempdir()) / "deltaplane-packages"
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"deltaplane-{digest.hexdigest()[:16]}.zip"
    if not target.exists():
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in files:
                zf.write(path, str(path.relative_to(_ROOT)))
        os.replace(partial, target)
    return target


def spark_submit_command(
    job: str,
    job_args: Sequence[str],
    *,
    master: str,
    conf: Mapping[str, str] | None = None,
    package: str | os.PathLike | None = None,
    python: str | None = None,
    name: str | None = None,
) -> list[str]:
    """The full ``spark-submit`` command line for one of ``JOBS``."""
    if job not in JOBS:
        raise ValueError(f"unknown job {job!r} (jobs: {', '.join(JOBS)})")
    python = python or sys.executable
    package = Path(package) if package is not None else build_package()
    settings = {
        "spark.pyspark.python": python,
        "spark.pyspark.driver.python": python,
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        **(conf or {}),
    }
    command = [
        str(spark_home() / "bin" / "spark-submit"),
        "--master",
        master,
        "--name",
        name or f"deltaplane-{job}",
        "--py-files",
        str(package),
    ]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, str(_ROOT / "spark_jobs" / f"{job}.py"), *job_args]


@dataclass
class SubmitResult:
    returncode: int
    metrics: dict  # the job's JSON line ({} if it printed none)
    stdout: str
    stderr: str
    command: list[str]

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def submit(
    job: str,
    job_args: Sequence[str],
    *,
    master: str,
    conf: Mapping[str, str] | None = None,
    timeout: float = 3600,
    env: Mapping[str, str] | None = None,
    python: str | None = None,
) -> SubmitResult:
    """Run a job through ``spark-submit`` and return its exit code and metrics."""
    command = spark_submit_command(job, job_args, master=master, conf=conf, python=python)
    environment = {**os.environ, **(env or {})}
    environment.setdefault("PYSPARK_PYTHON", python or sys.executable)
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment)
    return SubmitResult(done.returncode, parse_metrics(done.stdout), done.stdout, done.stderr, command)


def parse_metrics(stdout: str) -> dict:
    """The job's JSON metrics line (the last line of stdout that is a JSON object with "job")."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict) and "job" in value:
                return value
    return {}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="spark_jobs.submit", description="Submit a deltaplane job with spark-submit."
    )
    p.add_argument("job", choices=JOBS)
    p.add_argument("--master", required=True, help="e.g. spark://127.0.0.1:7077 or local[2]")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument(
        "--print-command", action="store_true", help="print the command line instead of running it"
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:split])
    job_args = argv[split + 1 :]
    conf = dict(item.split("=", 1) for item in args.conf)
    if args.print_command:
        print(" ".join(spark_submit_command(args.job, job_args, master=args.master, conf=conf)))
        return 0
    result = submit(args.job, job_args, master=args.master, conf=conf)
    sys.stderr.write(result.stderr[-20000:])
    print(json.dumps(result.metrics) if result.metrics else result.stdout, flush=True)
    return result.returncode


if __name__ == "__main__":
    raise SystemExit(main())
