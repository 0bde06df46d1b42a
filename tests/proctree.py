"""Processes as ``ps`` sees them, from ``/proc`` (Linux): command lines, parents, start times.

Tests use these to find the processes a submit started (by parentage, from a PID they know),
to check that none of them is left (by PID and start time, so a reused PID is not mistaken for
a survivor) and to look for a secret in every command line on the machine; ``stop_group``
stops a process group a test started, by its leader's PID.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    start: int  # clock ticks after boot: with the pid, names one process
    state: str
    cmdline: tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join(self.cmdline)


def stop_group(process: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    """Stop the process group a test started (``start_new_session=True``) by its leader's PID:
    ``sig``, then SIGKILL if the leader has not exited after ``timeout`` seconds."""
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout)


def _fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name: [0] state, [1] ppid, [2] pgid, [11:15] utime,
    stime, cutime, cstime (clock ticks), [19] start time."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    return data[data.rfind(")") + 2 :].split()


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    fields = _fields(pid)
    if fields is None:
        return None
    return fields[0], int(fields[1]), int(fields[2]), int(fields[19])


def cpu_seconds(pid: int) -> float:
    """CPU seconds used by ``pid`` and the children it reaped (0 if it is gone)."""
    fields = _fields(pid)
    return 0.0 if fields is None else sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def read(pid: int) -> Proc | None:
    stat = _stat(pid)
    if stat is None:
        return None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        raw = b""
    args = tuple(a.decode(errors="replace") for a in raw.split(b"\0") if a)
    return Proc(pid, stat[1], stat[2], stat[3], stat[0], args)


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def snapshot() -> dict[int, Proc]:
    out = {}
    for pid in all_pids():
        proc = read(pid)
        if proc is not None:
            out[pid] = proc
    return out


def descendants(
    root: int, procs: dict[int, Proc] | None = None, *, prune: Callable[[Proc], bool] | None = None
) -> dict[int, Proc]:
    """Every process below ``root`` (not ``root`` itself); ``prune``: processes left out with
    everything below them."""
    procs = snapshot() if procs is None else procs
    children: dict[int, list[int]] = {}
    for proc in procs.values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    out, todo = {}, list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid in procs and pid not in out and not (prune is not None and prune(procs[pid])):
            out[pid] = procs[pid]
            todo.extend(children.get(pid, ()))
    return out


def alive(proc: Proc) -> bool:
    """The same process (pid and start time) still exists and is not a zombie."""
    stat = _stat(proc.pid)
    return stat is not None and stat[3] == proc.start and stat[0] not in ("Z", "X")


def survivors(procs, within: float = 0.0) -> list[Proc]:
    """The processes of ``procs`` still alive after waiting up to ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        left = [p for p in procs if alive(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


@dataclass
class SubmitWatcher:
    """Watches the descendants of this process for a ``spark-submit`` of ``job`` and records every
    process of its tree that it ever sees (the JVM, the Python driver, PySpark's daemon and
    workers), so a test can check afterwards that none is left."""

    job: str
    root: int = field(default_factory=os.getpid)
    seen: dict[tuple[int, int], Proc] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def submits(self, procs: dict[int, Proc]) -> list[Proc]:
        return [
            p
            for p in descendants(self.root, procs).values()
            if any(a.endswith(f"spark_jobs/{self.job}.py") for a in p.cmdline)
            and (p.ppid == self.root or procs.get(p.ppid) is None or "spark_jobs" not in procs[p.ppid].text)
        ]

    def tree(self) -> dict[int, Proc]:
        procs = snapshot()
        out = {}
        for top in self.submits(procs):
            out[top.pid] = top
            out.update(descendants(top.pid, procs))
        return out

    def record(self) -> dict[int, Proc]:
        tree = self.tree()
        for proc in tree.values():
            self.seen[(proc.pid, proc.start)] = proc
        return tree

    def driver(self, tree: dict[int, Proc]) -> Proc | None:
        """The job's Python driver (a python process running the job's file)."""
        for proc in tree.values():
            if (
                proc.cmdline
                and "python" in os.path.basename(proc.cmdline[0])
                and any(a.endswith(f"spark_jobs/{self.job}.py") for a in proc.cmdline)
            ):
                return proc
        return None

    def wait_for(self, predicate, timeout: float = 120.0, interval: float = 0.02):
        """Record the tree until ``predicate(tree)`` returns something true; that value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            tree = self.record()
            found = predicate(tree)
            if found:
                return found
            time.sleep(interval)
        raise TimeoutError(f"no spark-submit of {self.job} reached the expected state in {timeout} s")

    def start_recording(self, interval: float = 0.05) -> None:
        def loop():
            while not self._stop.is_set():
                self.record()
                self._stop.wait(interval)

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop_recording(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)


class CmdlineSampler:
    """Samples ``/proc/*/cmdline`` of every process on the machine (what ``ps`` shows to any
    user) in a thread, and keeps each command line that contains ``needle``."""

    def __init__(self, needle: str, interval: float = 0.02):
        self.needle = needle.encode()
        self.interval = interval
        self.hits: list[tuple[int, str]] = []
        self.samples = 0
        self.commands_seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.is_set():
            for pid in all_pids():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        raw = f.read()
                except OSError:
                    continue
                if self.needle in raw:
                    self.hits.append((pid, raw.replace(b"\0", b" ").decode(errors="replace")[:300]))
                if b"spark_jobs/" in raw:
                    self.commands_seen.add(raw.replace(b"\0", b" ").decode(errors="replace"))
            self.samples += 1
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)
