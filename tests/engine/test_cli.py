"""The ``deltaplane`` command line, run as users run it."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from deltaplane.engine.cli import main
from tests.warm_python import cli


@pytest.fixture
def path(tmp_path):
    p = str(tmp_path / "t")
    write_deltalake(
        p,
        pa.table({"id": pa.array([1, 2, 3], pa.int64()), "city": ["Oslo", "Rome", "Oslo"]}),
        partition_by=["city"],
    )
    write_deltalake(p, pa.table({"id": pa.array([4], pa.int64()), "city": ["Lima"]}), mode="append")
    return p


def test_describe_json(path, capsys):
    assert main(["describe", path, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["version"] == 1 and info["num_files"] == 3 and info["num_rows"] == 4
    assert info["partition_columns"] == ["city"]
    assert main(["describe", path, "--version", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_rows"] == 3


def test_describe_text(path, capsys):
    assert main(["describe", path]) == 0
    out = capsys.readouterr().out
    assert "version      1" in out and "partitions   city" in out and "id" in out


def test_history(path, capsys):
    assert main(["history", path, "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert [e["version"] for e in entries] == [1, 0]
    assert all(e["operation"] == "WRITE" for e in entries)
    assert main(["history", path, "--limit", "1", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 1
    assert main(["history", path]) == 0
    assert "WRITE" in capsys.readouterr().out


def test_read_with_filter_limit_and_time_travel(path, capsys):
    assert main(["read", path, "--filter", "city = 'Oslo'", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(r["id"] for r in rows) == [1, 3]
    assert main(["read", path, "--limit", "2", "--json"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert main(["read", path, "--version", "0", "--columns", "id", "--json"]) == 0
    assert sorted(json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()) == [1, 2, 3]
    assert main(["read", path]) == 0
    assert "Lima" in capsys.readouterr().out


def test_errors_are_one_line_and_exit_2(path, tmp_path, capsys):
    assert main(["read", path, "--filter", "nope = 1"]) == 2
    assert "unknown column 'nope'" in capsys.readouterr().err
    assert main(["describe", str(tmp_path / "missing")]) == 2
    assert "no Delta table" in capsys.readouterr().err
    assert main(["read", path, "--timestamp", "not a time"]) == 2
    assert main(["describe", path, "--version", "9"]) == 2


def test_console_entry_point_runs(path):
    out = subprocess.run(
        [sys.executable, "-m", "deltaplane.engine.cli", "describe", path, "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout)["num_files"] == 3


def test_demo_builds_reads_and_describes(tmp_path, capsys):
    target = str(tmp_path / "demo")
    assert main(["demo", target, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["table"]["version"] == 2
    assert summary["history"][0]["operation"] == "DELETE"
    assert summary["files_read_for_filter"] < summary["files_in_table"]
    assert summary["version_0_rows"] == 1500 and summary["table"]["num_rows"] == 1750
    # The demo table is a real Delta table: delta-rs reads it too.
    import deltalake

    assert deltalake.DeltaTable(target).to_pyarrow_table().num_rows == 1750


def test_optimize_dry_run_then_run_and_health(path, capsys):
    for i in range(3):
        write_deltalake(
            path, pa.table({"id": pa.array([10 + i], pa.int64()), "city": ["Oslo"]}), mode="append"
        )
    assert main(["optimize", path, "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["numFilesToRewrite"] == 4 and plan["numPartitions"] == 1  # Oslo: 1 + 3 files
    assert main(["health", path, "--json"]) == 0
    health = json.loads(capsys.readouterr().out)
    assert health["num_files"] == 6 and health["last_optimize"] is None
    assert main(["optimize", path, "--target-file-size", "64MB"]) == 0
    assert "4 files" in capsys.readouterr().out
    assert main(["health", path]) == 0
    out = capsys.readouterr().out
    assert "files        3 " in out and "last optimize version 5" in out
    assert main(["optimize", path, "--zorder-by", "city"]) == 2
    assert "partition column" in capsys.readouterr().err
    assert main(["optimize", path, "--target-file-size", "lots"]) == 2


def test_vacuum_restore_manifest_and_cleanup_log(path, capsys):
    from deltaplane.engine import DeltaTable

    table = DeltaTable(path)
    table.overwrite(pa.table({"id": pa.array([9], pa.int64()), "city": ["Oslo"]}))  # v2 removes 3 files
    assert main(["vacuum", path, "--retention-hours", "0"]) == 2
    assert "retention" in capsys.readouterr().err
    assert main(["vacuum", path, "--retention-hours", "0", "--no-enforce-retention", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["dry_run"] and len(listed["files"]) == 3 and listed["metrics"] is None
    assert main(["restore", path, "--to-version", "1", "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["targetVersion"] == 1 and plan["numRestoredFiles"] == 3
    assert main(["restore", path, "--to-version", "1"]) == 0
    assert "restored 3 files" in capsys.readouterr().out
    assert sorted(DeltaTable(path).to_arrow().column("id").to_pylist()) == [1, 2, 3, 4]
    assert main(["vacuum", path, "--retention-hours", "0", "--no-enforce-retention", "--execute"]) == 0
    assert "deleted 1 files" in capsys.readouterr().err  # v2's file, removed again by the restore
    assert main(["generate-manifest", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["filesWritten"] == 3
    assert main(["cleanup-log", path, "--dry-run"]) == 0
    assert "nothing deleted" in capsys.readouterr().out  # no checkpoint older than 30 days


# --- user errors: one line, status 2, never a traceback -------------------------------------------


def assert_one_line_error(result: subprocess.CompletedProcess, fragment: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("deltaplane: error: "), result.stderr
    assert "Traceback" not in result.stderr and fragment in lines[0], lines[0]


def test_user_errors_print_one_line_and_exit_2(path, tmp_path):
    (tmp_path / "afile").write_text("x")
    cases = [
        (("describe", str(tmp_path / "missing")), "no Delta table at"),
        (("describe", str(tmp_path / "afile")), "it is a file, not a directory"),
        (("read", path, "--filter", "id >"), "cannot parse predicate"),
        (("read", path, "--filter", "nope = 1"), "unknown column 'nope'"),
        (("read", path, "--version", "9"), "version 9"),
        (("read", path, "--timestamp", "yesterday"), "cannot parse timestamp 'yesterday'"),
        (("read", path, "--limit", "-1"), "--limit must not be negative"),
        (("read", path, "--version", "x"), "invalid int value: 'x'"),
        (("optimize", path, "--target-file-size", "big"), "--target-file-size must be a size"),
        (("describe", path, "--storage-option", "novalue"), "--storage-option expects KEY=VALUE"),
        (("describe",), "the following arguments are required: uri"),
        (("frobnicate", path), "invalid choice: 'frobnicate'"),
        ((), "the following arguments are required: COMMAND"),
        (
            (
                "describe",
                "s3://bucket/t",
                "--storage-option",
                "endpoint_url=http://127.0.0.1:9",
                "--storage-option",
                "aws_access_key_id=a",
                "--storage-option",
                "aws_secret_access_key=b",
                "--storage-option",
                "max_attempts=1",
            ),
            "cannot reach the S3 endpoint http://127.0.0.1:9",
        ),
    ]
    # Each case is its own process (forked from a warm interpreter); the first also runs fresh,
    # and must come out the same.
    (first, fragment), *rest = cases
    assert_one_line_error(cli(*first, fresh_too=True), fragment)
    for args, fragment in rest:
        assert_one_line_error(cli(*args), fragment)


def test_a_reader_that_closes_the_pipe_early_ends_the_command_quietly(tmp_path):
    p = str(tmp_path / "big")
    write_deltalake(p, pa.table({"id": pa.array(range(300_000), pa.int64())}))
    for fmt in ((), ("--json",)):
        result = subprocess.run(
            f"{sys.executable} -m deltaplane.engine.cli read {p} {' '.join(fmt)} | head -n 2",
            shell=True,
            capture_output=True,
            text=True,
            timeout=120,
            executable="/bin/bash",
        )
        assert result.returncode == 0 and len(result.stdout.splitlines()) == 2
        assert result.stderr == "", result.stderr


def test_version_and_help(path):
    from deltaplane.engine import __version__

    result = cli("--version", fresh_too=True)  # fresh, and forked as the others are
    assert result.returncode == 0 and result.stdout.strip() == f"deltaplane {__version__}"
    top = cli("--help")
    assert top.returncode == 0
    for verb in ("describe", "history", "read", "optimize", "health", "vacuum", "cleanup-log", "restore"):
        assert verb in top.stdout
        sub = cli(verb, "--help")
        assert sub.returncode == 0 and "s3://bucket/prefix" in sub.stdout
    assert "arrives with writes" not in cli("read", "--help").stdout


def test_repair_lists_then_executes(tmp_path, capsys):
    import os

    from deltaplane.engine import DeltaTable

    p = str(tmp_path / "t")
    write_deltalake(p, pa.table({"id": pa.array([1, 2], pa.int64())}))
    write_deltalake(p, pa.table({"id": pa.array([3], pa.int64())}), mode="append")
    lost = DeltaTable(p).snapshot.files.column("path")[0].as_py()
    os.remove(os.path.join(p, lost))
    assert main(["repair", p]) == 0
    assert f"missing data file: {lost}" in capsys.readouterr().out and DeltaTable(p).version == 1
    assert main(["repair", p, "--execute", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["numMissingFiles"] == 1 and info["version"] == 2
    assert DeltaTable(p).count() in (1, 2)  # whichever file survived
