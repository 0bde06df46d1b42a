"""Python processes forked from one interpreter that has already imported what they need, for
tests that run many short ``python -m ...`` / ``python -c ...`` processes (a CLI's errors, DAG
files imported from several directories) and pay the same imports in each.

Each run is still its own process: forked from the warm interpreter, it takes the caller's
current directory, environment and argument vector, writes to its own stdout and stderr, and ends
through the interpreter's own exit (an uncaught exception prints its traceback and exits 1,
``SystemExit`` sets the status, ``atexit`` handlers run), which its exit status reports, as
``subprocess.run`` would. What it cannot do is read again what was read at start-up or import:
``PYTHON*`` variables, and Airflow's configuration (``AIRFLOW__*``, ``AIRFLOW_HOME``,
``AIRFLOW_CONFIG``) where Airflow is preloaded, must be the same as the warm interpreter's, else
``run`` refuses. Only packages the
program imports anyway are preloaded (never the ``-m`` module itself, which runs as
``__main__``), and the warm interpreter starts no thread, so nothing is held at the fork.

Usage::

    warm("pyarrow", "deltaplane.engine.table").run(["-m", "deltaplane.engine.cli", "--version"])
    cli("describe", path)  # the same, with what every ``deltaplane`` command imports preloaded

and, where a test wants a fresh interpreter, ``fresh_json(["-c", CODE])``: the JSON of the last
line it prints.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tests.proctree import stop_group

ROOT = Path(__file__).resolve().parent.parent
_STARTUP = ("PYTHON",)  # variables read once, when an interpreter starts
_AIRFLOW_STARTUP = ("AIRFLOW__", "AIRFLOW_HOME", "AIRFLOW_CONFIG")  # and when it imports Airflow


class WarmPython:
    def __init__(self, preload: Sequence[str]) -> None:
        self.preload = tuple(preload)
        self.env = dict(os.environ)
        self._files = tempfile.TemporaryDirectory(prefix="warm-python-")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.warm_python", *self.preload],
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: stopped by our PID, children too
        )
        ready = self._reply(300)
        assert ready.get("threads") == 1, f"the warm interpreter started threads before forking: {ready}"
        self.startup = _STARTUP + (_AIRFLOW_STARTUP if ready["airflow"] else ())

    def _reply(self, timeout: float) -> dict:
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            raise AssertionError(f"the warm interpreter {self.preload} did not answer in {timeout} s")
        return json.loads(line)

    def run(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess:
        """``subprocess.run([sys.executable, *argv], capture_output=True, text=True, ...)``, with
        ``argv`` one of ``-m MODULE ...``, ``-c CODE ...``, ``SCRIPT ...``; stdin is empty."""
        argv = [os.fspath(a) for a in argv]
        env = dict(os.environ if env is None else env)
        startup = {k for k in {*env, *self.env} if k.startswith(self.startup)}
        changed = sorted(k for k in startup if env.get(k) != self.env.get(k))
        if changed:
            raise ValueError(f"a warm interpreter cannot take new start-up variables: {changed}")
        out, err = (Path(self._files.name) / name for name in ("stdout", "stderr"))
        request = {
            "argv": argv,
            "cwd": os.fspath(cwd if cwd is not None else os.getcwd()),
            "env": env,
            "stdout": str(out),
            "stderr": str(err),
        }
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        pid = self._reply(30)["pid"]
        try:
            code = self._reply(timeout)["code"]
        except AssertionError:
            os.kill(pid, signal.SIGKILL)
            self._reply(30)
            raise subprocess.TimeoutExpired([sys.executable, *argv], timeout) from None
        return subprocess.CompletedProcess(
            [sys.executable, *argv], code, out.read_text(errors="replace"), err.read_text(errors="replace")
        )

    def run_fresh_too(self, argv: Sequence[str | os.PathLike[str]], **kwargs) -> subprocess.CompletedProcess:
        """``run``, and the same in a fresh interpreter (stdin empty too), which must end with the
        same status and output: the check that forking from this interpreter changes nothing for
        that program. Returns the fresh run."""
        fresh = subprocess.run(
            [sys.executable, *argv],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            cwd=kwargs.get("cwd"),
            env=kwargs.get("env"),
            timeout=kwargs.get("timeout", 120),
        )
        forked = self.run(argv, **kwargs)
        outcome = (forked.returncode, forked.stdout, forked.stderr)
        assert outcome == (fresh.returncode, fresh.stdout, fresh.stderr), (argv, outcome, fresh)
        return fresh

    def close(self) -> None:
        """End of input ends the interpreter's loop; one that does not end goes with its group."""
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            stop_group(self.process, signal.SIGKILL)
        self.process.stdout.close()
        self._files.cleanup()


_WARM: dict[tuple[str, ...], WarmPython] = {}


def warm(*preload: str) -> WarmPython:
    """The warm interpreter of this test process that preloaded ``preload`` (started on first use,
    stopped at exit)."""
    if preload not in _WARM:
        if not _WARM:
            atexit.register(lambda: [w.close() for w in _WARM.values()])
        _WARM[preload] = WarmPython(preload)
    return _WARM[preload]


# What every `deltaplane` command imports (the CLI's own imports and the entry points it loads),
# short of deltaplane.engine.cli itself.
CLI_PRELOAD = (
    "pyarrow",
    "deltaplane.engine.describe",
    "deltaplane.engine.errors",
    "deltaplane.engine.table",
    "deltaplane.engine.units",
    "deltaplane.engine.version",
    "deltaplane.operators.factory.config",
    "deltaplane.operators.factory.maintenance",
)


def cli(*args: str | os.PathLike[str], fresh_too: bool = False, **kwargs) -> subprocess.CompletedProcess:
    """``python -m deltaplane.engine.cli ARGS`` as its own process, forked from a warm interpreter
    (``kwargs``: those of ``WarmPython.run``); ``fresh_too``: also in a fresh interpreter, which
    must print and exit the same (``WarmPython.run_fresh_too``)."""
    w = warm(*CLI_PRELOAD)
    return (w.run_fresh_too if fresh_too else w.run)(["-m", "deltaplane.engine.cli", *args], **kwargs)


def fresh_json(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 300,
):
    """``python ARGV`` in a fresh interpreter (``subprocess.run``, not forked from a warm one: for
    a program whose start-up, start-up variables or imports are what a test looks at), which must
    exit 0: the JSON value of the last line it prints."""
    argv = [sys.executable, *map(os.fspath, argv)]
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (argv[1:3], done.returncode, done.stdout[-2000:], done.stderr[-4000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the warm interpreter ---------------------------------------------------------------------


def _serve(preload: list[str]) -> dict:
    """Answer requests until stdin closes; returns only in a forked child, with its request."""
    import gc
    import importlib
    import threading

    for name in preload:
        importlib.import_module(name)
    # What the preloading made is kept out of the children's garbage collections, as Python's
    # documentation advises for a parent that forks: else their last collection, at exit, walks
    # (and so copies) the whole inherited heap, 0.5 s for Airflow's.
    gc.collect()
    gc.freeze()
    print(json.dumps({"threads": threading.active_count(), "airflow": "airflow" in sys.modules}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            return request
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), flush=True)
    sys.exit(0)


def _become(request: dict) -> None:
    """The child: the caller's directory, environment, standard streams and argv, then the program,
    whose end is this interpreter's end."""
    import runpy
    import types

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path, flags in (
        (0, os.devnull, os.O_RDONLY),
        (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
    ):
        opened = os.open(path, flags, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    argv = request["argv"]
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]  # run_module puts the module's file first, as -m does
        sys.path[0] = os.getcwd()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        sys.path[0] = ""
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        exec(compile(argv[1], "<string>", "exec"), main.__dict__)
    else:
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    _become(_serve(sys.argv[1:]))
