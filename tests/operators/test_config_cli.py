"""Which tables file is read when none is named: ``deltaplane config validate`` and the library
take ``$DELTAPLANE_CONFIG``, else ``config/tables.yaml`` in the current directory (never a file
next to the installed package); the DAG files take the ``config/tables.yaml`` beside their own
``dags/`` folder, whatever the process's current directory. Run as processes of their own, the
way a user and the DAG processor run them (forked from a warm interpreter, ``tests.warm_python``,
the first of each kind also fresh)."""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from deltaplane.operators.factory import config as config_module
from tests.warm_python import cli, warm

PROJECT = Path(__file__).resolve().parents[2]


def tables(name: str, uri: str = "lake/t") -> str:
    return textwrap.dedent(
        f"""
        tables:
          {name}:
            uri: {uri}
        """
    )


def env_without_config() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("DELTAPLANE_CONFIG", None)
    return env


def validate(
    cwd: Path, *args: str, env: dict[str, str] | None = None, fresh_too: bool = False
) -> subprocess.CompletedProcess:
    """``deltaplane config validate ARGS`` in ``cwd``: a process of its own, forked from a warm
    interpreter (``tests.warm_python``); ``fresh_too``: also in a fresh one, which must agree."""
    env = env if env is not None else env_without_config()
    return cli("config", "validate", *args, cwd=cwd, env=env, fresh_too=fresh_too)


def test_validate_reads_the_current_directory_config(tmp_path):
    project = tmp_path / "team"
    (project / "config").mkdir(parents=True)
    (project / "config" / "tables.yaml").write_text(tables("team_only_table"))
    done = validate(project, fresh_too=True)
    assert done.returncode == 0, done.stderr
    assert "team_only_table:" in done.stdout and "ok: 1 table(s)" in done.stdout
    assert "trips" not in done.stdout  # not the repository's (or the package's) example
    # the relative table URI is relative to that file's folder
    assert str(project / "config" / "lake" / "t") in done.stdout
    # from a sub-folder the file is not found: the default is the current directory, not a search
    (project / "sub").mkdir()
    done = validate(project / "sub")
    assert done.returncode == 2 and "team_only_table" not in done.stdout


def test_validate_without_a_file_says_what_the_default_is(tmp_path):
    done = validate(tmp_path)
    assert done.returncode == 2
    line = done.stderr.strip()
    assert line.startswith("deltaplane: error: ")
    assert str(tmp_path / "config" / "tables.yaml") in line
    assert "$DELTAPLANE_CONFIG" in line and "./config/tables.yaml" in line and "current directory" in line
    assert "Traceback" not in done.stderr


def test_environment_variable_wins_over_the_current_directory(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "tables.yaml").write_text(tables("from_cwd"))
    chosen = tmp_path / "elsewhere.yaml"
    chosen.write_text(tables("from_env"))
    env = {**env_without_config(), "DELTAPLANE_CONFIG": str(chosen)}
    done = validate(tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "from_env:" in done.stdout and "from_cwd" not in done.stdout
    # an explicit PATH wins over both
    done = validate(tmp_path, str(tmp_path / "config" / "tables.yaml"), env=env)
    assert done.returncode == 0 and "from_cwd:" in done.stdout and "from_env" not in done.stdout
    # a variable naming a missing file says so
    env["DELTAPLANE_CONFIG"] = str(tmp_path / "gone.yaml")
    done = validate(tmp_path, env=env)
    assert done.returncode == 2 and "gone.yaml: no such file (from $DELTAPLANE_CONFIG)" in done.stderr
    # a folder instead of a file: one line, no traceback
    done = validate(tmp_path, str(tmp_path / "config"))
    assert done.returncode == 2 and "is a folder" in done.stderr and "Traceback" not in done.stderr


def test_help_names_the_default(tmp_path):
    done = cli("config", "validate", "--help", cwd=tmp_path)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "$DELTAPLANE_CONFIG" in text and "config/tables.yaml in the current directory" in text


def test_library_default_is_not_inside_the_package(tmp_path, monkeypatch):
    monkeypatch.delenv("DELTAPLANE_CONFIG", raising=False)
    package_root = Path(config_module.__file__).resolve().parents[1]
    assert not config_module.DEFAULT_PATH.is_absolute()
    monkeypatch.chdir(tmp_path)
    assert config_module.config_path() == tmp_path / "config" / "tables.yaml"
    assert package_root not in config_module.config_path().parents
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "tables.yaml").write_text(tables("here"))
    assert list(config_module.load_config().tables) == ["here"]
    assert list(config_module.read_config().config.tables) == ["here"]


# What the DAG files import, loaded once: modules that read no directory or variable at import.
DAG_FILE_PRELOAD = ("airflow.sdk", "deltaplane.operators.factory.config", "deltaplane.operators.factory.dags")


def run_dag_files(
    dags: Path, cwd: Path, env: dict[str, str], fresh_too: bool = False
) -> subprocess.CompletedProcess:
    """Both DAG files imported by a Python process in ``cwd``, as the DAG processor does from a
    warm parent: forked from an interpreter that has imported Airflow (``tests.warm_python``);
    ``fresh_too``: also in a fresh interpreter, which must agree."""
    code = textwrap.dedent(
        f"""
        import runpy
        found = runpy.run_path({str(dags / "deltaplane_tables.py")!r})
        print(sorted(k for k in found if k.startswith("deltaplane_")))
        runpy.run_path({str(dags / "deltaplane_config_errors.py")!r})
        print("errors file imported")
        """
    )
    python = warm(*DAG_FILE_PRELOAD)
    return (python.run_fresh_too if fresh_too else python.run)(["-c", code], cwd=cwd, env=env, timeout=300)


@pytest.mark.airflow
def test_dag_files_find_their_repository_config_from_any_directory(tmp_path):
    # A copy of the repository's dags/ beside its own config/: the DAG files must read that
    # config, not the one of the directory the DAG processor happens to run in.
    repo = tmp_path / "repo"
    shutil.copytree(PROJECT / "dags", repo / "dags", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "config").mkdir()
    (repo / "config" / "tables.yaml").write_text(tables("beside_dags"))
    decoy = tmp_path / "elsewhere"
    (decoy / "config").mkdir(parents=True)
    (decoy / "config" / "tables.yaml").write_text(tables("decoy"))
    done = run_dag_files(repo / "dags", decoy, env_without_config(), fresh_too=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "deltaplane_beside_dags_maintenance" in done.stdout and "decoy" not in done.stdout
    assert "errors file imported" in done.stdout
    # from a directory without any config
    empty = tmp_path / "empty"
    empty.mkdir()
    done = run_dag_files(repo / "dags", empty, env_without_config())
    assert done.returncode == 0 and "deltaplane_beside_dags_maintenance" in done.stdout, done.stderr[-3000:]
    # an invalid table beside the DAG files is the errors file's import error, not silence
    (repo / "config" / "tables.yaml").write_text(tables("beside_dags") + "  broken:\n    uri: ''\n")
    done = run_dag_files(repo / "dags", decoy, env_without_config())
    assert done.returncode != 0 and "table 'broken': uri" in done.stderr
    assert "deltaplane_beside_dags_maintenance" in done.stdout  # the valid table's DAGs still load
    # $DELTAPLANE_CONFIG still wins
    chosen = tmp_path / "chosen.yaml"
    chosen.write_text(tables("chosen"))
    done = run_dag_files(repo / "dags", decoy, {**env_without_config(), "DELTAPLANE_CONFIG": str(chosen)})
    assert done.returncode == 0 and "deltaplane_chosen_maintenance" in done.stdout, done.stderr[-3000:]
    # and the repository's own DAG files read the repository's config
    done = run_dag_files(PROJECT / "dags", decoy, env_without_config())
    assert done.returncode == 0 and "deltaplane_trips_maintenance" in done.stdout, done.stderr[-3000:]
