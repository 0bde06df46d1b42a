"""Errors the ``deltaplane`` command prints name its flags, never the Python keyword arguments of
the engine calls behind them (``--no-enforce-retention``, not ``enforce_retention=False``). The
CLI runs as a process of its own, as a user runs it; the Python API keeps its own wording."""

from __future__ import annotations

import re
import subprocess

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.errors import RetentionTooShortError
from tests.warm_python import cli

# Spellings of the engine's keyword arguments: what a command-line user cannot type.
PYTHON_NAMES = re.compile(
    r"(?<![-\w])(enforce_retention|retention_hours|zorder_by|min_num_files|target_file_size|max_concurrent_bins"
    r"|small_file_size|dry_run|include_missing_deletion_vectors|to_version|limit|version)\b(=| must)"
    r"|a datetime"
)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """The command as its own process, forked from a warm interpreter that has paid its imports
    (``tests.warm_python``; test_cli.py checks that against fresh interpreters)."""
    return cli(*args)


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("deltaplane: error: "), result.stderr
    assert "Traceback" not in result.stderr
    assert not PYTHON_NAMES.search(lines[0]), lines[0]
    return lines[0]


@pytest.fixture
def table(tmp_path) -> str:
    path = str(tmp_path / "t")
    data = pa.table({"id": [1, 2, 3], "part": ["a", "b", "a"]})
    t = DeltaTable.create(path, data=data, partition_by=["part"])
    t.append(pa.table({"id": [4], "part": ["a"]}))
    t.overwrite(pa.table({"id": [5], "part": ["b"]}))  # files to vacuum
    return path


def test_vacuum_retention_error_names_the_flag(table):
    line = one_line_error(run_cli("vacuum", table, "--retention-hours", "1"))
    assert "--no-enforce-retention" in line and "--retention-hours 168 or more" in line
    line = one_line_error(run_cli("vacuum", table, "--retention-hours", "1", "--mode", "lite", "--execute"))
    assert "--no-enforce-retention" in line
    # the flag the message names works, and is safe to rerun
    for _ in range(2):
        done = run_cli("vacuum", table, "--retention-hours", "1", "--no-enforce-retention")
        assert done.returncode == 0, done.stderr
    # the Python API keeps its keyword's name
    with pytest.raises(RetentionTooShortError, match="enforce_retention=False"):
        DeltaTable(table).vacuum(retention_hours=1)


@pytest.mark.parametrize(
    "args, flag",
    [
        (("vacuum", "{t}", "--retention-hours", "nan"), "--retention-hours"),
        (("vacuum", "{t}", "--retention-hours", "inf"), "--retention-hours"),
        (("vacuum", "{t}", "--retention-hours", "-1"), "--retention-hours"),
        (("history", "{t}", "--limit", "-1"), "--limit"),
        (("describe", "{t}", "--version", "-1"), "--version"),
        (("health", "{t}", "--version", "-2"), "--version"),
        (("read", "{t}", "--version", "-1"), "--version"),
        (("read", "{t}", "--limit", "-1"), "--limit"),
        (("read", "{t}", "--columns", "id,id"), "--columns"),
        (("read", "{t}", "--columns", "id,"), "--columns"),
        (("optimize", "{t}", "--min-num-files", "0"), "--min-num-files"),
        (("optimize", "{t}", "--max-concurrent-bins", "-3"), "--max-concurrent-bins"),
        (("optimize", "{t}", "--max-concurrent-bins", "0"), "--max-concurrent-bins"),
        (("optimize", "{t}", "--zorder-by", "id,id"), "--zorder-by"),
        (("optimize", "{t}", "--zorder-by", ",id"), "--zorder-by"),
        (("optimize", "{t}", "--target-file-size", "0"), "--target-file-size"),
        (("optimize", "{t}", "--target-file-size", "lots"), "--target-file-size"),
        (("restore", "{t}", "--to-version", "-1"), "--to-version"),
        (("health", "{t}", "--small-file-size", "0"), "--small-file-size"),
    ],
)
def test_bad_flag_values_name_the_flag(table, args, flag):
    line = one_line_error(run_cli(*(a.format(t=table) for a in args)))
    assert flag in line, line


def test_table_dependent_errors_keep_cli_wording(table):
    # errors that need the table to be found: still no Python spellings
    for args in (
        ("read", table, "--timestamp", "not a time"),
        ("read", table, "--timestamp", "1999-01-01"),
        ("restore", table, "--to-version", "99"),
        ("describe", table, "--version", "99"),
        ("optimize", table, "--zorder-by", "nope"),
        ("optimize", table, "--zorder-by", "part"),
        ("optimize", table, "--filter", "id > 1"),
        ("read", table, "--columns", "nope"),
    ):
        one_line_error(run_cli(*args))
    # the optimize the checks let through still runs
    done = run_cli("optimize", table, "--max-concurrent-bins", "1", "--min-num-files", "1", "--json")
    assert done.returncode == 0, done.stderr


def test_generate_manifest_names_the_command_that_fixes_it(tmp_path):
    path = str(tmp_path / "dv")
    data = pa.table({"id": list(range(10)), "part": ["a", "b"] * 5})
    t = DeltaTable.create(
        path, data=data, partition_by=["part"], properties={"delta.enableDeletionVectors": "true"}
    )
    t.delete("id < 3")  # deletion vectors
    t.alter.set_table_properties({"delta.enableDeletionVectors": "false"})
    line = one_line_error(run_cli("generate-manifest", path))
    assert "deltaplane optimize URI --purge" in line, line
    assert run_cli("optimize", path, "--purge").returncode == 0
    done = run_cli("generate-manifest", path)
    assert done.returncode == 0, done.stderr
