"""A fresh process pays only for what it uses: importing ``DeltaTable`` and opening a table load
no command (OPTIMIZE, VACUUM, MERGE, ...), no transaction machinery and no SQL parser; each
command loads when first called, sqlglot on the first string predicate. Every CLI call, Airflow
task and Spark Python worker starts this way. (Which modules load is checked here; how long that
takes is measured in ``benchmarks/cold_start.py``, not asserted.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa

from deltaplane.engine import write_table

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
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(path), method, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return {stage: set(modules) for stage, modules in json.loads(done.stdout).items()}


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
