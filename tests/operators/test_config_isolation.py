"""One bad table does not take the others down: duplicate keys in ``config/tables.yaml`` are
errors (with both line numbers), every table is validated on its own, the valid tables' DAGs load
from ``dags/deltaplane_tables.py`` and the invalid tables' errors are the import error of
``dags/deltaplane_config_errors.py``: through a real DagBag, the dag-processor's own parse
function and a real ``airflow dag-processor`` run against its own metadata database."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import deltaplane.operators.factory.config as config_module
from deltaplane.operators.factory.config import ConfigError, load_config

# The Airflow environment (a temporary AIRFLOW_HOME) is set when this conftest is imported.
from tests.operators import conftest as _airflow_env  # noqa: F401

PROJECT = Path(__file__).resolve().parents[2]
DAG_FILES = ("deltaplane_tables.py", "deltaplane_config_errors.py")

# Two valid tables and one with two problems (a value out of range, an unknown key).
MIXED = """\
tables:
  trips:
    uri: lake/trips
    ingest: {landing: landing/trips, format: csv}
  broken:
    uri: lake/broken
    auto_optimize:
      min_small_files: 0
    zorder: [a]
  zones:
    uri: lake/zones
    consumer: {target: lake/zones_copy}
"""
VALID_DAGS = {
    "deltaplane_trips_maintenance",
    "deltaplane_trips_ingest",
    "deltaplane_zones_maintenance",
    "deltaplane_zones_consumer",
}


def write(tmp_path: Path, body: str, name: str = "tables.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def broken_errors(path: Path) -> list[str]:
    return [
        f"{path}: table 'broken': auto_optimize.min_small_files: Input should be greater than 0",
        f"{path}: table 'broken': zorder: Extra inputs are not permitted",
    ]


# --- duplicate keys ---------------------------------------------------------------------------


def test_duplicate_table_names_are_an_error_naming_both_lines(tmp_path):
    path = write(
        tmp_path,
        """\
        tables:
          trips:
            uri: lake/a
          zones:
            uri: lake/z
          trips:
            uri: lake/b
        """,
    )
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == f"{path}: table 'trips': defined twice (lines 2 and 6)"
    # Fatal for the lenient reader too: which of the two is meant is anybody's guess.
    with pytest.raises(ConfigError, match=r"table 'trips': defined twice \(lines 2 and 6\)"):
        config_module.read_config(path)


def test_duplicate_keys_anywhere_name_the_key_and_both_lines(tmp_path):
    path = write(
        tmp_path,
        """\
        tables:
          trips:
            uri: lake/a
            manifest: true
            uri: lake/b
            auto_optimize:
              min_small_files: 2
              min_small_files: 3
              min_small_files: 4
          zones:
            uri: lake/z
        """,
    )
    expected = [
        f"{path}: table 'trips': uri: defined twice (lines 3 and 5)",
        f"{path}: table 'trips': auto_optimize.min_small_files: defined 3 times (lines 7, 8 and 9)",
    ]
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value).splitlines() == expected
    # A key repeated inside a table makes that table invalid, not the file.
    report = config_module.read_config(path)
    assert list(report.config.tables) == ["zones"]
    assert report.errors == {"trips": expected}
    # The top level too.
    top = write(tmp_path, "tables:\n  a: {uri: x}\ntables:\n  b: {uri: y}\n", "top.yaml")
    with pytest.raises(ConfigError, match=r"^\S+top.yaml: tables: defined twice \(lines 1 and 3\)$"):
        config_module.read_config(top)


def test_merge_keys_and_same_keys_in_different_mappings_are_not_duplicates(tmp_path):
    path = write(
        tmp_path,
        """\
        tables:
          trips:
            uri: lake/trips
            auto_optimize: &tuned {min_small_files: 2, small_file_size: 1MB}
          zones:
            uri: lake/zones
            auto_optimize:
              <<: *tuned
              min_small_files: 5
        """,
    )
    config = load_config(path)
    assert config.tables["zones"].auto_optimize.min_small_files == 5
    assert config.tables["zones"].auto_optimize.small_file_size == 1 << 20
    assert config.tables["trips"].auto_optimize.min_small_files == 2


# --- per-table validation ---------------------------------------------------------------------


def test_one_invalid_table_leaves_the_others_valid(tmp_path, monkeypatch):
    path = write(tmp_path, MIXED)
    report = config_module.read_config(path)
    assert list(report.config.tables) == ["trips", "zones"]
    assert report.config.tables["trips"].uri == str(tmp_path / "lake" / "trips")  # resolved as before
    assert report.errors == {"broken": broken_errors(path)}
    assert str(report.error()) == "\n".join(broken_errors(path))
    # load_config stays strict, with every error.
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == "\n".join(broken_errors(path))
    # Building DAGs: the valid tables' DAGs, from an explicit config or from $DELTAPLANE_CONFIG.
    from deltaplane.operators.factory.dags import build_dags

    assert set(build_dags(report.config)) == VALID_DAGS
    monkeypatch.setenv("DELTAPLANE_CONFIG", str(path))
    assert set(build_dags()) == VALID_DAGS


def test_bad_table_shapes_and_names_are_per_table_errors(tmp_path):
    path = write(
        tmp_path,
        """\
        tables:
          ok:
            uri: lake/ok
          empty:
          scalar: 3
          bad-name:
            uri: lake/x
        """,
    )
    report = config_module.read_config(path)
    assert list(report.config.tables) == ["ok"]
    assert report.errors == {
        "empty": [f"{path}: table 'empty': expected a mapping of settings (uri, schedules, ...), got null"],
        "scalar": [f"{path}: table 'scalar': expected a mapping of settings (uri, schedules, ...), got 3"],
        "bad-name": [f"{path}: table 'bad-name': table name must be letters, digits and _ (it names DAGs)"],
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("tables: [a, b]\n", "tables: expected a mapping of table names to their settings"),
        ("tables:\n", "tables: expected a mapping of table names to their settings"),
        ("- a\n", "expected a mapping with a 'tables' key"),
        ("tabels:\n  a: {uri: x}\n", "expected a mapping with a 'tables' key"),
        ("tables: {a: {uri: x}}\nextra: 1\n", "extra: Extra inputs are not permitted"),
        ("tables: {a: [}\n", "not valid YAML"),
    ],
)
def test_file_level_errors_stay_fatal(tmp_path, body, message):
    path = write(tmp_path, body)
    with pytest.raises(ConfigError, match=message) as e:
        config_module.read_config(path)
    assert str(e.value).startswith(f"{path}: ")


def test_cli_validate_prints_every_error(tmp_path):
    path = write(
        tmp_path,
        MIXED
        + "  late:\n"
        + "    uri: lake/late\n"
        + "    retention_hours: 1\n"
        + "    schedules:\n"
        + '      maintenance: "@daily"\n'
        + '      maintenance: "@hourly"\n',
    )
    done = subprocess.run(
        [sys.executable, "-m", "deltaplane.engine.cli", "config", "validate", str(path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, done.stderr
    errors = [line.removeprefix("deltaplane: error: ") for line in done.stderr.splitlines()]
    late = [
        f"{path}: table 'late': schedules.maintenance: defined twice (lines 17 and 18)",
        f"{path}: table 'late': (top level): Value error, retention_hours=1.0 is under the 7-day safety "
        "limit; set enforce_retention: false to allow it",
    ]
    assert errors == [*broken_errors(path), *late, "2 of 4 table(s) invalid: broken, late"]
    # The valid tables are still listed on stdout.
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == ["trips", "zones"]


# --- Airflow ------------------------------------------------------------------------------------


def dags_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "dags"
    folder.mkdir()
    for name in DAG_FILES:
        shutil.copy(PROJECT / "dags" / name, folder / name)
    return folder


def test_dagbag_loads_the_valid_dags_and_reports_the_invalid_table(tmp_path, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    config = write(tmp_path, MIXED)
    monkeypatch.setenv("DELTAPLANE_CONFIG", str(config))
    folder = dags_folder(tmp_path)
    bag = DagBag(dag_folder=str(folder), safe_mode=True)
    assert set(bag.dag_ids) == VALID_DAGS
    assert {d.fileloc for d in bag.dags.values()} == {str(folder / "deltaplane_tables.py")}
    assert list(bag.import_errors) == [str(folder / "deltaplane_config_errors.py")]
    error = bag.import_errors[str(folder / "deltaplane_config_errors.py")]
    for line in broken_errors(config):
        assert line in error
    assert "'trips'" not in error and "'zones'" not in error


def test_dag_processor_parse_function_reports_per_file(tmp_path, monkeypatch):
    """The function the dag-processor runs per file (with serialization, relative paths)."""
    import structlog
    from airflow.dag_processing.processor import DagFileParseRequest, _parse_file

    config = write(tmp_path, MIXED)
    monkeypatch.setenv("DELTAPLANE_CONFIG", str(config))
    folder = dags_folder(tmp_path)

    def parse(name: str):
        request = DagFileParseRequest(file=str(folder / name), bundle_path=folder, bundle_name="dags-folder")
        return _parse_file(request, structlog.get_logger())

    tables = parse("deltaplane_tables.py")
    assert {d.dag_id for d in tables.serialized_dags} == VALID_DAGS and not tables.import_errors
    errors = parse("deltaplane_config_errors.py")
    assert errors.serialized_dags == [] and list(errors.import_errors) == ["deltaplane_config_errors.py"]
    assert all(line in errors.import_errors["deltaplane_config_errors.py"] for line in broken_errors(config))
    # Everything valid: both files import cleanly.
    write(tmp_path, MIXED.replace("min_small_files: 0", "min_small_files: 1").replace("zorder", "zorder_by"))
    assert not parse("deltaplane_config_errors.py").import_errors
    assert len(parse("deltaplane_tables.py").serialized_dags) == 5
    # A file-level error is reported once, where the DAGs were: nothing can be trusted.
    write(tmp_path, MIXED + "  trips:\n    uri: lake/again\n")
    tables = parse("deltaplane_tables.py")
    assert tables.serialized_dags == []
    assert "table 'trips': defined twice (lines 2 and 13)" in tables.import_errors["deltaplane_tables.py"]
    assert not parse("deltaplane_config_errors.py").import_errors


def _airflow_db_state(home: Path) -> tuple[dict[str, str], dict[str, bool]]:
    with sqlite3.connect(home / "airflow.db") as db:
        errors = dict(db.execute("select filename, stacktrace from import_error"))
        dags = {dag_id: bool(stale) for dag_id, stale in db.execute("select dag_id, is_stale from dag")}
    return errors, dags


@pytest.mark.external
def test_real_dag_processor_records_the_error_and_keeps_the_valid_dags(tmp_path):
    """`airflow dag-processor` in its own AIRFLOW_HOME, from all tables valid to one broken to a
    broken file: what the UI and the scheduler see comes from these rows."""
    home = tmp_path / "airflow"
    mended = MIXED.replace("min_small_files: 0", "min_small_files: 1").replace("zorder", "zorder_by")
    config = write(tmp_path, mended)
    folder = dags_folder(tmp_path)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(folder),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        # A DAG no longer in its file goes stale once its last parse is older than the file's by
        # the threshold (50 s by default), checked every cleanup interval (60 s): shortened here.
        "AIRFLOW__DAG_PROCESSOR__STALE_DAG_THRESHOLD": "1",
        "AIRFLOW__SCHEDULER__PARSING_CLEANUP_INTERVAL": "0",
        "DELTAPLANE_CONFIG": str(config),
        "PYTHONPATH": str(PROJECT),
    }

    def airflow(*args: str) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "airflow", *args], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    airflow("db", "migrate")
    airflow("dag-processor", "--num-runs", "1")
    errors, dags = _airflow_db_state(home)
    every_dag = {*VALID_DAGS, "deltaplane_broken_maintenance"}
    assert errors == {} and dags == dict.fromkeys(every_dag, False)
    # One table goes bad: its DAG goes stale, its errors are recorded, the others stay active.
    time.sleep(1.5)
    write(tmp_path, MIXED)
    airflow("dag-processor", "--num-runs", "1")
    errors, dags = _airflow_db_state(home)
    assert list(errors) == ["deltaplane_config_errors.py"]
    assert all(line in errors["deltaplane_config_errors.py"] for line in broken_errors(config))
    assert dags == {**dict.fromkeys(VALID_DAGS, False), "deltaplane_broken_maintenance": True}
    # Mended: the error goes, the DAG comes back.
    write(tmp_path, mended)
    airflow("dag-processor", "--num-runs", "1")
    assert _airflow_db_state(home) == ({}, dict.fromkeys(every_dag, False))
    # An error of the whole file is still fatal, reported once, where the DAGs are.
    write(tmp_path, mended + "  trips:\n    uri: lake/again\n")
    airflow("dag-processor", "--num-runs", "1")
    errors, dags = _airflow_db_state(home)
    assert list(errors) == ["deltaplane_tables.py"]
    assert f"{config}: table 'trips': defined twice (lines 2 and 13)" in errors["deltaplane_tables.py"]
    assert dags == dict.fromkeys(every_dag, True)
