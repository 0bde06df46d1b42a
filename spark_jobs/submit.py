"""Submitting jobs the same way everywhere: the command line, the package zip, the result.

``spark_submit_command("compact", ["--table", uri], master="spark://127.0.0.1:7077")`` builds the
``spark-submit`` command line (the wheel's own ``spark-submit``, the master URL, ``--py-files``
with a zip of ``deltaplane.engine`` and ``deltaplane.spark_jobs`` built on the fly so every worker can import
them, this interpreter for the driver and the workers, extra ``--conf``); ``submit`` runs it with
a time limit and parses the job's JSON metrics line; ``start_submit`` starts it and returns a
``SparkSubmission`` to wait for or stop. The Airflow operators call the same functions.

* Storage options (``storage_options=``) go to the job in ``$DELTAPLANE_STORAGE_OPTIONS``, never
  on the command line: every user sees command lines (``ps``), and Spark copies its arguments
  into its logs. Spark settings (``conf=``) go in a ``--properties-file`` that only this user can
  read (mode 0600 in a private folder), removed when ``spark-submit`` ends: no setting, secret or
  not, is on any process's command line. (Spark itself still shows settings in its UI and event
  log, redacted by ``spark.redaction.regex``.)
* ``spark-submit`` runs in its own process group; a time limit (or ``stop()``) ends the whole
  tree (the JVM, the Python driver, PySpark's daemon and workers): SIGTERM, then SIGKILL after a
  grace period.
* stderr is handed line by line to ``on_stderr`` while the job runs.

From a shell::

    python -m deltaplane.spark_jobs.submit compact --master spark://127.0.0.1:7077 -- --table s3://lake/t

(everything after ``--`` is passed to the job; put secrets in ``$DELTAPLANE_STORAGE_OPTIONS``,
not in ``--storage-option``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from deltaplane.spark_jobs.job import STORAGE_OPTIONS_ENV

JOBS = ("ingest", "compact", "dml")
PACKAGES = ("engine", "spark_jobs")
_ROOT = Path(__file__).resolve().parent.parent


def spark_home() -> Path:
    """The Spark distribution inside the pyspark wheel (``bin/spark-submit``, ``bin/spark-class``)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def build_package(directory: str | os.PathLike | None = None) -> Path:
    """A zip of ``deltaplane.engine`` and ``deltaplane.spark_jobs`` (``deltaplane/`` a namespace
    package in it) for ``--py-files``; named by a hash of its contents, so an unchanged tree reuses
    the zip it built before."""
    files = sorted(
        p for package in PACKAGES for p in (_ROOT / package).rglob("*.py") if "__pycache__" not in p.parts
    )
    digest = hashlib.sha256(b"deltaplane/")  # the layout inside the zip
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
                zf.write(path, f"deltaplane/{path.relative_to(_ROOT)}")
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
    properties_file: str | os.PathLike | None = None,
) -> list[str]:
    """The full ``spark-submit`` command line for one of ``JOBS``: the settings
    (``submit_settings``) as ``--conf`` arguments, or, with ``properties_file`` (a file holding
    them, see ``write_properties``), ``--properties-file`` and no setting on the command line."""
    if job not in JOBS:
        raise ValueError(f"unknown job {job!r} (jobs: {', '.join(JOBS)})")
    package = Path(package) if package is not None else build_package()
    command = [
        str(spark_home() / "bin" / "spark-submit"),
        "--master",
        master,
        "--name",
        name or f"deltaplane-{job}",
        "--py-files",
        str(package),
    ]
    if properties_file is not None:
        command += ["--properties-file", str(properties_file)]
    else:
        for key, value in submit_settings(conf, python).items():
            command += ["--conf", f"{key}={value}"]
    return [*command, str(_ROOT / "spark_jobs" / f"{job}.py"), *job_args]


def submit_settings(conf: Mapping[str, str] | None = None, python: str | None = None) -> dict[str, str]:
    """The Spark settings of a submit: this interpreter for the driver and the workers, UTC, no
    UI, then ``conf``, and deltaplane's jar (``jar``) in ``spark.jars``."""
    from deltaplane.spark_jobs.session import with_deltaplane_jar

    python = python or sys.executable
    settings = {
        "spark.pyspark.python": python,
        "spark.pyspark.driver.python": python,
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        **{str(k): str(v) for k, v in (conf or {}).items()},
    }
    jars = with_deltaplane_jar(settings.get("spark.jars"))
    if jars:
        settings["spark.jars"] = jars
    return settings


def _properties_escape(text: str, key: bool) -> str:
    """``text`` in ``java.util.Properties`` file syntax (what Spark's ``--properties-file``
    loads): backslash escapes for the separators, comment marks and control characters, and
    ``\\uXXXX`` for everything outside printable ASCII (so the file's encoding does not matter)."""
    out = []
    for i, char in enumerate(text):
        code = ord(char)
        if char == "\\":
            out.append("\\\\")
        elif char in "=:#!":
            out.append("\\" + char)
        elif char == " " and (key or i == 0):
            out.append("\\ ")
        elif 0x20 <= code < 0x7F:
            out.append(char)
        else:  # UTF-16 code units, as Java strings hold them (a surrogate pair above U+FFFF)
            raw = char.encode("utf-16-be")
            out += [f"\\u{int.from_bytes(raw[j : j + 2], 'big'):04x}" for j in range(0, len(raw), 2)]
    return "".join(out)


def write_properties(settings: Mapping[str, str], directory: str | os.PathLike | None = None) -> Path:
    """Write ``settings`` as a properties file readable only by this user: mode 0600, in a new
    folder of mode 0700 (under ``directory`` or the temporary directory). Remove the folder when
    done (``SparkSubmission`` does, when ``spark-submit`` ends)."""
    folder = Path(tempfile.mkdtemp(prefix="deltaplane-submit-", dir=directory))  # mode 0700
    path = folder / "spark.properties"
    text = "".join(
        f"{_properties_escape(str(k), True)}={_properties_escape(str(v), False)}\n"
        for k, v in settings.items()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(text)
    return path


@dataclass
class SubmitResult:
    returncode: int  # the job's exit code; negative: killed by that signal
    metrics: dict  # the job's JSON line ({} if it printed none)
    stdout: str
    stderr: str  # the last STDERR_TAIL_LINES lines (all of them were handed to ``on_stderr``)
    command: list[str]

    @property
    def ok(self) -> bool:
        return self.returncode == 0


STDERR_TAIL_LINES = 2000
STOP_GRACE_SECONDS = 3.0  # under the 5 s Airflow's supervisor waits before SIGKILLing a task
TREE_RECORD_SECONDS = 1.0  # how often a waiting submission notes the processes of its tree
# Spark's default ``spark.redaction.regex`` and a few more words; an access key *id* is not secret.
_SECRET = re.compile(
    r"secret|password|passwd|token|credential|private[._-]?key|access[._-]?key(?![._-]?id)", re.I
)


def is_secret_name(name: str) -> bool:
    """Whether an option or configuration key names a secret (Spark's own default
    ``spark.redaction.regex`` plus a few more words)."""
    return bool(_SECRET.search(name))


def redact_command(command: Sequence[str]) -> list[str]:
    """``command`` with the value of every ``key=value`` argument whose key names a secret
    replaced by ``***`` (``--conf``, ``--storage-option`` and ``--flag=key=value`` forms): the
    form of a command line that may be logged or printed."""
    out = []
    for arg in command:
        head, sep, value = arg.partition("=")
        if sep and head.startswith("--") and "=" in value:  # --storage-option=key=value
            key, _, _ = value.partition("=")
            out.append(f"{head}={key}=***" if is_secret_name(key) else arg)
        elif sep and is_secret_name(head):
            out.append(f"{head}=***")
        else:
            out.append(arg)
    return out


def submission_environment(
    storage_options: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    python: str | None = None,
) -> dict[str, str]:
    """The environment of a ``spark-submit``: this one, ``env``, and the storage options as a JSON
    object in ``$DELTAPLANE_STORAGE_OPTIONS``, where only this user (and root) can read them,
    unlike a command line, which ``ps`` shows to everyone and Spark copies into its logs."""
    environment = {**os.environ, **(env or {})}
    environment.setdefault("PYSPARK_PYTHON", python or sys.executable)
    if storage_options:
        environment[STORAGE_OPTIONS_ENV] = json.dumps({str(k): str(v) for k, v in storage_options.items()})
    return environment


class SparkSubmission:
    """A running ``spark-submit``, started in its own session (and so its own process group), so
    that stopping it reaches the JVM, the Python driver and everything they started, and a signal
    meant for the caller's group does not hit it by accident.

    Output is read by two threads; ``wait`` hands each stderr line to ``on_stderr`` in the
    calling thread as it arrives (so a caller can log it live) and returns a ``SubmitResult``.
    ``stop`` (safe from any thread and from a signal handler) sends SIGTERM to the process group
    and to every process of the tree that left it (PySpark's daemon makes its own group), then
    SIGKILL to whatever is left after a grace period. ``cleanup``: folders removed once
    ``spark-submit`` has ended (its properties file's); a job that ends leaving processes of its
    tree behind (a driver killed with SIGKILL can orphan them) has them stopped too."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cleanup: Sequence[str | os.PathLike] = (),
    ):
        self.command = list(command)
        self._cleanup = [Path(p) for p in cleanup]
        self._lines: queue.Queue = queue.Queue()
        self._stdout: list[str] = []
        self._stderr: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self._stop_lock = threading.RLock()
        self.stopped_by: str | None = None  # "timeout" / "stop" when this side ended it
        try:
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=dict(env) if env is not None else None,
                text=True,
                errors="replace",
                bufsize=1,
                start_new_session=True,
            )
        except BaseException:
            self.close()
            raise
        self.pid = self.process.pid
        # pid -> start time of every process seen in the tree (a pid is only ever signalled
        # while it still names the same process)
        self._seen: dict[int, int] = {}
        start = _processes().get(self.pid)
        if start is not None:
            self._seen[self.pid] = start[1]
        self._readers = [
            threading.Thread(target=self._read, args=(self.process.stdout, "out"), daemon=True),
            threading.Thread(target=self._read, args=(self.process.stderr, "err"), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream, name: str) -> None:
        try:
            for line in stream:
                self._lines.put((name, line.rstrip("\n")))
        except (OSError, ValueError):
            pass
        finally:
            self._lines.put((name, None))

    def poll(self) -> int | None:
        return self.process.poll()

    def wait(
        self, timeout: float | None = None, *, on_stderr: Callable[[str], None] | None = None
    ) -> SubmitResult:
        """Wait for the job (at most ``timeout`` seconds: then stop it and raise
        ``subprocess.TimeoutExpired``); any exception while waiting (a KeyboardInterrupt, an
        Airflow task timeout) stops it too before it propagates."""
        deadline = None if timeout is None else time.monotonic() + timeout
        open_streams = 2
        recorded = 0.0
        try:
            while open_streams:
                if time.monotonic() - recorded > TREE_RECORD_SECONDS:  # who to stop if it dies
                    with self._stop_lock:
                        self._tree()
                    recorded = time.monotonic()
                if deadline is not None and time.monotonic() > deadline:
                    self.stopped_by = "timeout"
                    self.stop()
                    raise subprocess.TimeoutExpired(self.command, timeout)
                try:
                    name, line = self._lines.get(timeout=0.2)
                except queue.Empty:
                    continue
                if line is None:
                    open_streams -= 1
                elif name == "out":
                    self._stdout.append(line)
                else:
                    self._stderr.append(line)
                    if on_stderr is not None:
                        on_stderr(line)
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.1)
            try:
                returncode = self.process.wait(remaining)
            except subprocess.TimeoutExpired:
                self.stopped_by = "timeout"
                self.stop()
                raise
        except BaseException:
            self.stop()
            self.close()
            raise
        self.stop()  # anything of the tree that outlived spark-submit (nothing, normally)
        self.close()
        stdout = "\n".join(self._stdout)
        return SubmitResult(returncode, parse_metrics(stdout), stdout, "\n".join(self._stderr), self.command)

    # --- stopping ----------------------------------------------------------------------------

    def _tree(self) -> dict[int, int]:
        """Record the processes under the submit now (pid -> start time): the children of every
        process seen before that still lives, so processes re-parented when their parent died
        are followed too."""
        procs = _processes()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _start) in procs.items():
            children.setdefault(ppid, []).append(pid)
        todo = [pid for pid, start in self._seen.items() if pid in procs and procs[pid][1] == start]
        found: set[int] = set()
        while todo:
            pid = todo.pop()
            if pid in procs and pid not in found:
                found.add(pid)
                self._seen.setdefault(pid, procs[pid][1])
                todo.extend(children.get(pid, ()))
        return {pid: procs[pid][1] for pid in found}

    def _alive(self) -> list[int]:
        procs = _processes()
        return [pid for pid, start in self._seen.items() if pid in procs and procs[pid][1] == start]

    def _signal(self, sig: int) -> None:
        alive = self._alive()
        # The group id stays ours while spark-submit is unreaped or any member lives.
        if self.process.returncode is None or alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def close(self) -> None:
        """Remove the ``cleanup`` folders (the properties file). Safe to call again."""
        for folder in self._cleanup:
            shutil.rmtree(folder, ignore_errors=True)

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """SIGTERM (and SIGCONT, so a stopped process can act on it) to the group and to every
        process of the tree, SIGKILL after ``grace`` seconds to whatever is left. Safe to call
        again, from another thread or from a signal handler. ``stopped_by`` says "stop" only when
        ``spark-submit`` itself was still running."""
        with self._stop_lock:
            self._tree()
            running = self.process.poll() is None
            if running or self._alive():
                if self.stopped_by is None and running:
                    self.stopped_by = "stop"
                self._signal(signal.SIGTERM)
                self._signal(signal.SIGCONT)
                deadline = time.monotonic() + grace
                while time.monotonic() < deadline:
                    self.process.poll()
                    self._tree()
                    if not self._alive():
                        break
                    time.sleep(0.05)
                self._tree()
                self._signal(signal.SIGKILL)
            if self.process.poll() is not None:  # reaped: the properties file is read and done with
                self.close()


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start time) of every live process (Linux ``/proc``; elsewhere empty,
    and stopping relies on the process group alone). Zombies count as gone."""
    out: dict[int, tuple[int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read().decode(errors="replace")
        except OSError:
            continue
        fields = data[data.rfind(")") + 2 :].split()
        if len(fields) > 19 and fields[0] not in ("Z", "X"):
            out[int(name)] = (int(fields[1]), int(fields[19]))
    return out


def start_submit(
    job: str,
    job_args: Sequence[str],
    *,
    master: str,
    conf: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    python: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> SparkSubmission:
    """Start a job through ``spark-submit`` (see ``SparkSubmission``); ``storage_options`` reach
    the job through its environment and ``conf`` through a private properties file, never its
    command line."""
    if job not in JOBS:
        raise ValueError(f"unknown job {job!r} (jobs: {', '.join(JOBS)})")
    properties = write_properties(submit_settings(conf, python))
    try:
        command = spark_submit_command(
            job, job_args, master=master, python=python, properties_file=properties
        )
    except BaseException:
        shutil.rmtree(properties.parent, ignore_errors=True)
        raise
    return SparkSubmission(
        command, env=submission_environment(storage_options, env, python), cleanup=[properties.parent]
    )


def submit(
    job: str,
    job_args: Sequence[str],
    *,
    master: str,
    conf: Mapping[str, str] | None = None,
    timeout: float = 3600,
    env: Mapping[str, str] | None = None,
    python: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    on_stderr: Callable[[str], None] | None = None,
) -> SubmitResult:
    """Run a job through ``spark-submit`` and return its exit code and metrics. After ``timeout``
    seconds the whole process tree is stopped and ``subprocess.TimeoutExpired`` raised."""
    submission = start_submit(
        job, job_args, master=master, conf=conf, env=env, python=python, storage_options=storage_options
    )
    return submission.wait(timeout, on_stderr=on_stderr)


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
        prog="deltaplane.spark_jobs.submit", description="Submit a deltaplane job with spark-submit."
    )
    p.add_argument("job", choices=JOBS)
    p.add_argument("--master", required=True, help="e.g. spark://127.0.0.1:7077 or local[2]")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--timeout", type=float, default=24 * 3600, help="seconds before the job is stopped")
    p.add_argument(
        "--print-command",
        action="store_true",
        help="print the command line (secret-looking values as ***) instead of running it",
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:split])
    job_args = argv[split + 1 :]
    conf = dict(item.split("=", 1) for item in args.conf)
    if args.print_command:
        print(
            " ".join(redact_command(spark_submit_command(args.job, job_args, master=args.master, conf=conf)))
        )
        return 0
    try:
        result = submit(
            args.job,
            job_args,
            master=args.master,
            conf=conf,
            timeout=args.timeout,
            on_stderr=lambda line: print(line, file=sys.stderr, flush=True),
        )
    except subprocess.TimeoutExpired:
        print(
            f"deltaplane.spark_jobs.{args.job} did not finish in {args.timeout:g} s: stopped", file=sys.stderr
        )
        return 1
    print(json.dumps(result.metrics) if result.metrics else result.stdout, flush=True)
    return result.returncode if result.returncode >= 0 else 128 - result.returncode


if __name__ == "__main__":
    raise SystemExit(main())
