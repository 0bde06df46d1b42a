"""One spelling per operation: ``DeltaTable``'s core (``engine/table.py``, ``table_maintenance.py``)
names each operation once and takes each argument under one name; delta-rs's method names live
in ``engine/deltalake_compat.py`` and its argument names in ``delta_rs_names`` declarations.
(That the delta-rs spellings give delta-rs's answers is tests/engine/test_deltalake_names.py.)"""

from __future__ import annotations

import inspect

import pytest

from deltaplane.engine import DeltaTable, TableAlterer, TableOptimizer, write_table
from deltaplane.engine.delta_rs import Renamed
from deltaplane.engine.deltalake_compat import DeltaRsTable
from deltaplane.engine.table_maintenance import TableMaintenance

# delta-rs's method name -> the core's spelling of the same operation
ALIASES = {
    "update_incremental": "refresh",
    "load_as_version": "load_version",
    "to_pyarrow_table": "to_arrow",
    "create_checkpoint": "checkpoint",
    "cleanup_metadata": "cleanup_log",
    "generate": "generate_manifest",
    "load_cdf": "changes",
    "table_uri": "uri",
}
CORE = (DeltaTable, TableMaintenance)


def _public_calls(*classes):
    for cls in classes:
        for name, value in vars(cls).items():
            if not name.startswith("_") and callable(value):
                yield cls, name, value


def _renames() -> set[tuple[str, str]]:
    """Every (ours, theirs) argument pair a ``delta_rs_names`` declaration maps."""
    pairs = set()
    for _, _, call in _public_calls(*CORE, DeltaRsTable, TableAlterer, TableOptimizer):
        call = call.__func__ if isinstance(call, staticmethod | classmethod) else call
        for theirs, spec in getattr(call, "delta_rs_names", {}).items():
            if isinstance(spec, Renamed):
                pairs.add((spec.ours, theirs))
    return pairs


def test_delta_rs_method_names_live_only_in_the_compatibility_layer():
    core_names = {name for cls in CORE for name in vars(cls)}
    assert not core_names & set(ALIASES), "a delta-rs alias is back in the core"
    assert set(ALIASES) <= set(vars(DeltaRsTable))
    assert not set(vars(DeltaRsTable)) & core_names - {"__module__", "__doc__", "__dict__", "__weakref__"}
    for ours in set(ALIASES.values()) - {"uri"}:  # uri is an instance attribute
        assert callable(getattr(DeltaTable, ours)), ours


def test_no_core_signature_takes_one_argument_under_two_names():
    pairs = _renames()
    assert ("start_version", "starting_version") in pairs and (
        "enforce_retention",
        "enforce_retention_duration",
    ) in pairs
    doubled = []
    for cls, name, call in _public_calls(*CORE):
        call = call.__func__ if isinstance(call, staticmethod | classmethod) else call
        params = set(inspect.signature(inspect.unwrap(call)).parameters)
        doubled += [
            f"{cls.__name__}.{name}({ours}, {theirs})" for ours, theirs in pairs if {ours, theirs} <= params
        ]
    assert not doubled


def test_each_alias_answers_as_its_core_call_on_a_reused_table(tmp_path):
    """The alias and the core call give the same answer, on one table object reused across writes."""
    import pyarrow as pa

    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"id": [1, 2]}), properties={"delta.enableChangeDataFeed": "true"})
    table = DeltaTable(uri)
    table.append(pa.table({"id": [3]}))
    assert table.update_incremental().version == table.refresh().version == 1
    assert table.to_pyarrow_table().equals(table.to_arrow())
    assert table.load_cdf(0).read_all().equals(table.changes(0))
    assert table.load_cdf(starting_version=1).read_all().equals(table.changes(start_version=1))
    assert table.table_uri == table.uri
    with pytest.raises(Exception, match="delta-rs's name for start_version"):
        table.changes(0, starting_version=0)
    assert table.load_as_version(0).version == 0
    table.refresh()
    assert table.create_checkpoint().version == 1
