"""A fresh process pays only for what it uses: importing ``DeltaTable`` and opening a table load
no command (OPTIMIZE, VACUUM, MERGE, ...), no transaction machinery and no SQL parser; each
command loads when first called, sqlglot on the first string predicate. Every CLI call, Airflow
task and Spark Python worker starts this way. (Which modules load is checked here; how long that
takes is measured in ``benchmarks/cold_start.py``, not asserted.)

Nor does it load pandas: pyarrow imports it the first time it converts Python objects or loads
``pyarrow.dataset`` (0.2-0.3 s of CPU). The engine converts through
``deltaplane.engine.values_to_arrow`` and reads one-file scans without the dataset module, so
opening, listing and reading a small table stay without it."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table
from tests.warm_python import fresh_json

PROBE = """
import json, sys
from deltaplane.engine import DeltaTable
stages = {"import": sorted(sys.modules)}
table = DeltaTable(sys.argv[1])
table.version()
stages["open"] = sorted(sys.modules)
table.to_arrow()
stages["read"] = sorted(sys.modules)
getattr(table, sys.argv[2])(*json.loads(sys.argv[3]))
stages["command"] = sorted(sys.modules)
print(json.dumps(stages))
"""

COMMANDS = "deltaplane.engine.commands."
HEAVY = ("sqlglot", "deltaplane.engine.transaction", "deltaplane.engine.scan")


def _stages(path, method: str, args: list) -> dict[str, set[str]]:
    stages = fresh_json(["-c", PROBE, path, method, json.dumps(args)], timeout=120)
    return {stage: set(modules) for stage, modules in stages.items()}


def _loaded(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if m.startswith(prefixes))


def test_import_and_open_load_no_command_no_transaction_and_no_parser(tmp_path):
    write_table(str(tmp_path / "t"), pa.table({"id": pa.array([1, 2], pa.int64())}))
    stages = _stages(tmp_path / "t", "history", [])
    for stage in ("import", "open"):
        assert _loaded(stages[stage], (COMMANDS, *HEAVY)) == [], stage
    # a read needs the scan, not a command, the transaction or (without a string filter) sqlglot
    assert "deltaplane.engine.scan" in stages["read"]
    assert _loaded(stages["read"], (COMMANDS, "deltaplane.engine.transaction", "sqlglot")) == []
    # a command loads its own module when called, and only what it needs
    assert "deltaplane.engine.commands.history" in stages["command"]
    assert (
        _loaded(
            stages["command"], ("deltaplane.engine.commands.optimize", "deltaplane.engine.commands.merge")
        )
        == []
    )


def test_each_command_loads_when_first_called_in_a_fresh_process(tmp_path):
    """The commands work when their module was not loaded at import (each call below is the
    first use of its command in its process)."""
    path = tmp_path / "t"
    write_table(str(path), pa.table({"id": pa.array(range(10), pa.int64()), "p": pa.array([0, 1] * 5)}))
    write_table(str(path), pa.table({"id": pa.array([10], pa.int64()), "p": pa.array([1])}), mode="append")
    for method, args, module in [
        ("delete", ["id = 3"], "dml"),
        ("optimize", [], "optimize"),
        ("vacuum", [], "vacuum"),
        ("create_checkpoint", [], None),
        ("restore", [1], "restore"),
        ("cleanup_metadata", [], "log_cleanup"),
    ]:
        stages = _stages(path, method, args)
        if method == "delete":  # the first string predicate loads the parser
            assert "sqlglot" not in stages["read"] and "sqlglot" in stages["command"]
        if module:
            assert f"{COMMANDS}{module}" in stages["command"], method
            assert f"{COMMANDS}{module}" not in stages["read"], method
    # every command committed what it should have: the rows are those of version 1 (restored)
    from deltaplane.engine import DeltaTable

    table = DeltaTable(str(path))
    assert sorted(table.to_arrow()["id"].to_pylist()) == list(range(11))
    operations = [h["operation"] for h in table.history()]
    assert operations[0] == "RESTORE" and {"DELETE", "OPTIMIZE"} <= set(operations), operations


_HARNESS = """
import json, sys
steps = json.loads(sys.argv[1])
for name, code in steps:
    try:
        exec(code, {})
    except SystemExit:
        pass
    if "pandas" in sys.modules:
        print(json.dumps({"pandas_after": name}))
        break
else:
    print(json.dumps({"pandas_after": None}))
"""


def _first_step_loading_pandas(steps: list[tuple[str, str]]) -> str | None:
    return fresh_json(["-c", _HARNESS, json.dumps(steps)], timeout=120)["pandas_after"]


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("cold")
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "s": ["a", "b", None], "d": ["2024-01-01"] * 3})
    plain, parted, checked, deleted = (str(root / n) for n in ("plain", "parted", "checked", "deleted"))
    write_table(plain, rows)
    write_table(parted, rows, partition_by=["d"])
    for _ in range(4):
        write_table(checked, rows, mode="append", partition_by=["d"])
    DeltaTable(checked).create_checkpoint()
    write_table(checked, rows, mode="append")
    DeltaTable(checked).delete("id = 1")  # a remove after the checkpoint
    write_table(deleted, rows, configuration={"delta.enableDeletionVectors": "true"})
    DeltaTable(deleted).delete("id = 2")
    return {"plain": plain, "parted": parted, "checked": checked, "deleted": deleted}


def _open(uri: str) -> str:
    return f"from deltaplane.engine import DeltaTable; t = DeltaTable({uri!r})"


def _cli(*argv: str) -> str:
    argv_code = f"import sys; sys.argv = ['deltaplane', *{list(argv)!r}]"
    return f"{argv_code}\nfrom deltaplane.engine.cli import main\nmain()"


@pytest.mark.parametrize("shape", ["plain", "parted", "checked", "deleted"])
def test_opening_a_table_and_reading_its_log_loads_no_pandas(tables, shape):
    uri = tables[shape]
    steps = [
        ("import the API", "from deltaplane.engine import DeltaTable, write_table, Snapshot"),
        ("open", _open(uri) + "; t.version()"),
        ("schema and metadata", _open(uri) + "; t.schema; t.delta_schema; t.metadata; t.protocol"),
        ("history", _open(uri) + "; t.history()"),
        ("file list", _open(uri) + "; t.files(); t.file_uris()"),
        ("add actions", _open(uri) + "; t.get_add_actions()"),
        ("an older version", _open(uri) + "; t.load_as_version(0)"),
    ]
    assert _first_step_loading_pandas(steps) is None


def test_reading_a_small_table_loads_no_pandas(tables):
    """(A filtered read still loads it: pyarrow evaluates expressions through its dataset module.)"""
    plain, parted = _open(tables["plain"]), _open(tables["parted"])
    steps = [
        ("read one file", plain + "; assert t.to_arrow().num_rows == 3"),
        (
            "read a partitioned file",
            parted + "; assert t.to_arrow().column('d').to_pylist() == ['2024-01-01'] * 3",
        ),
        ("select columns", plain + "; assert t.to_arrow(columns=['s']).num_columns == 1"),
        ("batches", plain + "; assert sum(b.num_rows for b in t.to_batches()) == 3"),
    ]
    assert _first_step_loading_pandas(steps) is None


def test_the_cli_an_airflow_task_and_a_spark_worker_start_without_pandas(tables):
    steps = [
        ("deltaplane describe", _cli("describe", tables["checked"])),
        ("deltaplane history", _cli("history", tables["plain"])),
        (
            "an operator's import and open",
            "import deltaplane.operators.operators.commit\n" + _open(tables["plain"]),
        ),
        ("the Spark native read path", "import deltaplane.spark_jobs.native"),
    ]
    assert _first_step_loading_pandas(steps) is None


def test_the_harness_sees_pandas_when_it_is_loaded():
    steps = [("nothing", "pass"), ("a list to an array", "import pyarrow as pa; pa.array([1])")]
    assert _first_step_loading_pandas(steps) == "a list to an array"


def test_a_path_object_opens_the_same_table(tables):
    assert DeltaTable(Path(tables["plain"])).version() == DeltaTable(tables["plain"]).version()


def test_the_documented_spark_read_api_loads_only_when_used():
    """``deltaplane.spark_jobs.read_table`` is the native read path's ``read_table``, loaded on
    first use: importing the package (every Spark Python worker does) loads neither it nor
    PySpark."""
    code = (
        "import json, sys, deltaplane.spark_jobs as jobs\n"
        "before = sorted(m for m in sys.modules if m == 'pyspark' or m.endswith('spark_jobs.native'))\n"
        "from deltaplane.spark_jobs import read_table\n"
        "import deltaplane.spark_jobs.native as native\n"
        "print(json.dumps([before, read_table is native.read_table, 'read_table' in jobs.__all__]))\n"
    )
    assert fresh_json(["-c", code]) == [[], True, True]
