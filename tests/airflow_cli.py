"""`airflow` commands run one after another in one Python process: the CLI's own parser and command
functions, as `python -m airflow` runs them, for a test that needs many (a database migration, a
reserialization, a run per scenario).

Each `airflow` process pays Airflow's import and its first DAG-bag parse, and each `dags test` its
in-process execution API: 14 to 21 CPU seconds for a run that costs 0.8 once they are paid
(measured on the ops view's DAGs). Commands see the environment the process started with; output
goes to a log file whose tail a failed command's assertion shows.

Usage::

    with AirflowCLI(env, log) as airflow:
        airflow("db", "migrate")
        airflow("dags", "test", "my_dag", "2026-11-20T09:00:00+00:00")

``api_server(env, log, home)`` runs Airflow's api-server on 127.0.0.1 for the length of a block.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Done:
    args: tuple[str, ...]
    returncode: int
    error: str | None  # the traceback of an exception the command raised


class AirflowCLI:
    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = Path(log)
        read_fd, write_fd = os.pipe()
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.airflow_cli"],
                env={**env, "AIRFLOW_CLI_REPLY_FD": str(write_fd)},
                cwd=Path(__file__).resolve().parent.parent,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                start_new_session=True,  # its own process group: stopped whole, by our PID
                text=True,
            )
        os.close(write_fd)
        self._replies = os.fdopen(read_fd, "r", buffering=1)

    def __call__(self, *args: str, check: bool = True, timeout: float = 300) -> Done:
        self.process.stdin.write(json.dumps(list(args)) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self._replies], [], [], timeout)
        line = self._replies.readline() if ready else ""
        if not line:
            self.close()
            raise AssertionError(f"airflow {' '.join(args)}: no answer in {timeout} s\n{self.tail()}")
        reply = json.loads(line)
        done = Done(tuple(args), reply["code"], reply["error"])
        if check:
            assert done.returncode == 0, (
                f"airflow {' '.join(args)} -> {done.returncode}\n{done.error or self.tail()}"
            )
        return done

    def tail(self, size: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-size:]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._replies.close()

    def __enter__(self) -> AirflowCLI:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _serve() -> None:
    """The child: one JSON list of arguments per stdin line, one JSON reply per command."""
    reply = os.fdopen(int(os.environ.pop("AIRFLOW_CLI_REPLY_FD")), "w", buffering=1)
    import airflow.configuration  # noqa: F401 - first, as `python -m airflow` does
    from airflow.cli import cli_parser
    from airflow.configuration import write_default_airflow_configuration_if_needed

    parser = cli_parser.get_parser()
    write_default_airflow_configuration_if_needed()
    for line in sys.stdin:
        argv = json.loads(line)
        code, error = 0, None
        print(f"--- airflow {' '.join(argv)}", flush=True)
        try:
            args = parser.parse_args(argv)
            args.func(args)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        except BaseException:
            code, error = 1, traceback.format_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        reply.write(json.dumps({"code": code, "error": error}) + "\n")


@contextmanager
def api_server(
    env: dict[str, str], log: Path, home: Path, *, timeout: float = 120
) -> Iterator[tuple[str, str]]:
    """Airflow's api-server (one worker, 127.0.0.1, a free port, its own process group) with
    ``env``, whose AIRFLOW_HOME is ``home``; yields its base URL and the admin password it
    generated once its health endpoint answers; stopped by its process group at the end."""
    import pytest

    from deltaplane.devstack.ports import free_port
    from tests.proctree import stop_group

    port = free_port()
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "airflow", "api-server", "--host", "127.0.0.1", "--port", str(port),
             "--workers", "1"],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=10) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.time() > deadline:
                pytest.fail("api-server did not start: " + Path(log).read_text()[-3000:])
            time.sleep(0.5)
        passwords = json.loads((Path(home) / "simple_auth_manager_passwords.json.generated").read_text())
        yield base, passwords["admin"]
    finally:
        stop_group(process)


if __name__ == "__main__":
    _serve()
