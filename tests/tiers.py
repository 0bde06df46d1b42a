"""The fast tier: ``pytest --fast`` runs every test that starts no external process (no Spark JVM,
spark-submit, Delta Spark, Airflow component, SeaweedFS or Chromium), as ``make check`` does.

A test is external when it says so (``@pytest.mark.external``, or a module's ``pytestmark``),
when it belongs to an xdist group (the groups exist to share one such process per worker), or
when it asks for a fixture that starts one (``EXTERNAL_FIXTURES``). The rest is the fast tier,
and under ``--fast`` the tier is enforced rather than trusted: a test that starts one of those
processes anyway fails, naming the process and the marker to add. Python children (the CLI in
a fresh interpreter, a writer killed with SIGKILL) and ``airflow db migrate`` are not external:
they are the engine's and the metadata database's own code, started and gone in seconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time

import pytest

from tests import proctree

# Fixtures that start one: Delta Spark, a Spark session, SeaweedFS (plain and authenticating),
# Chromium, and the Airflow api-server of the ops view's tests.
EXTERNAL_FIXTURES = frozenset(
    {"delta_spark", "spark", "s3_server", "auth_s3", "chromium", "browser", "ops_server"}
)

# What counts as external, by the program a test starts.
_PROGRAMS = frozenset(
    {
        "java",
        "spark-submit",
        "spark-class",
        "pyspark",
        "weed",
        "chromium",
        "chromium-browser",
        "unshare",
        "nsenter",
    }
)
_AIRFLOW_COMPONENTS = frozenset(
    {"scheduler", "triggerer", "dag-processor", "api-server", "webserver", "standalone", "celery"}
)
_VIOLATIONS = pytest.StashKey[list]()


class ExternalProcessStarted(BaseException):
    """Raised where a fast-tier test starts an external process: a ``BaseException``, so that
    code which retries or reports ``Exception`` (an operator's submit, a pool) stops at once."""


_current: list[list[str]] = []  # the running test's violations (one test at a time per worker)


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="only the tests that start no external process (Spark, Delta Spark, Airflow components, "
        "SeaweedFS, Chromium); one that starts one fails (the fast tier of `make check`)",
    )


def pytest_configure(config) -> None:
    if config.getoption("--fast"):
        _guard_subprocesses()
        threading.Thread(target=_watch_descendants, name="fast-tier-watch", daemon=True).start()


def is_external(item) -> bool:
    return (
        item.get_closest_marker("external") is not None
        or item.get_closest_marker("xdist_group") is not None
        or bool(EXTERNAL_FIXTURES & set(getattr(item, "fixturenames", ())))
    )


@pytest.hookimpl(trylast=True)  # after the conftest's own grouping (delta_spark users)
def pytest_collection_modifyitems(config, items) -> None:
    if not config.getoption("--fast"):
        return
    keep, drop = [], []
    for item in items:
        (drop if is_external(item) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def external_program(argv) -> str | None:
    """The external program ``argv`` starts (a name for the message), or ``None``."""
    if isinstance(argv, (str, bytes, os.PathLike)):
        argv = [argv]
    args = [os.fsdecode(a) for a in argv]
    if not args:
        return None
    name = os.path.basename(args[0])
    for arg in args[:2]:  # the program, or the script a shell runs (`bash .../spark-submit`)
        if os.path.basename(arg) in _PROGRAMS:
            return os.path.basename(arg)
    # `airflow <component>` or `python -m airflow <component>`
    for i, arg in enumerate(args):
        is_airflow = (i == 0 and name == "airflow") or (arg == "airflow" and i > 0 and args[i - 1] == "-m")
        if is_airflow:
            command = next((a for a in args[i + 1 :] if not a.startswith("-")), None)
            return f"airflow {command}" if command in _AIRFLOW_COMPONENTS else None
    return None


def _guard_subprocesses() -> None:
    original = subprocess.Popen._execute_child

    def execute_child(self, args, executable, *rest, **kwargs):
        program = external_program(args if executable is None else [executable, *list(args)[1:]])
        if program is not None and _current:
            message = f"started {program!r} in the fast tier: mark the test @pytest.mark.external"
            _current[-1].append(message)
            raise ExternalProcessStarted(message)
        return original(self, args, executable, *rest, **kwargs)

    subprocess.Popen._execute_child = execute_child


def _watch_descendants(interval: float = 0.2) -> None:
    """What the Popen guard cannot see: a process started by a child (an Airflow task's own
    process, a script). Every descendant of this worker running an external program while a test
    runs is recorded against it and killed, so that the test fails at once instead of waiting.
    Nested pytest runs (the tests of this module start some, with and without ``--fast``) are
    left alone with everything below them: they are the harness's own subjects."""
    me = os.getpid()
    while True:
        time.sleep(interval)
        if not _current:
            continue
        for proc in proctree.descendants(me, prune=lambda p: "pytest" in p.cmdline).values():
            program = external_program(proc.cmdline)
            if program is None or not _current:
                continue
            _current[-1].append(
                f"a child process started {program!r} in the fast tier (pid {proc.pid}: "
                f"{proc.text[:200]}): mark the test @pytest.mark.external"
            )
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Collect what the test started (setup, call and teardown alike), then fail it in its report:
    a test that expects a failure must not pass because the guard made one."""
    violations: list[str] = []
    item.stash[_VIOLATIONS] = violations
    _current.append(violations)
    try:
        yield
    finally:
        _current.remove(violations)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    violations = item.stash.get(_VIOLATIONS, None)
    if violations and call.when == "call":
        report = outcome.get_result()
        report.outcome = "failed"
        report.longrepr = "\n".join(dict.fromkeys(violations))
