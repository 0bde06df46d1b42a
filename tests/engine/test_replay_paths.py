"""Small logs are parsed with ``json`` and replayed in Python; large ones go through pyarrow.json
and Arrow kernels. Both paths must give the same snapshot, table for table: this loads every
table both ways (the thresholds switched off for the second) and compares them.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import deltaplane.engine.log.commits as commits
import deltaplane.engine.snapshot as snapshot_module
from deltaplane.engine import DeltaTable
from deltaplane.engine.errors import DeltaError
from deltaplane.engine.snapshot import load_snapshot
from deltaplane.engine.storage import LocalStore
from tests.conftest import CONFORMANCE, conformance_golden


def _state(root: Path):
    snap = load_snapshot(LocalStore(str(root)))
    order = lambda t: t.sort_by([("path", "ascending"), ("version", "ascending")])  # noqa: E731
    return (
        snap.version,
        snap.protocol,
        snap.metadata,
        order(snap.files),
        order(snap.tombstones),
        sorted((k, v.version) for k, v in snap.txns.items()),
        sorted(snap.domains),
    )


def assert_same_both_ways(root: Path, monkeypatch) -> None:
    try:
        fast = _state(root)
    except DeltaError as e:
        with monkeypatch.context() as m:
            m.setattr(commits, "_SMALL_COMMIT_BYTES", -1)
            m.setattr(snapshot_module, "SMALL_REPLAY_ACTIONS", -1)
            with pytest.raises(type(e)):
                _state(root)
        return
    with monkeypatch.context() as m:
        m.setattr(commits, "_SMALL_COMMIT_BYTES", -1)
        m.setattr(snapshot_module, "SMALL_REPLAY_ACTIONS", -1)
        columnar = _state(root)
    for name, a, b in zip(
        ("version", "protocol", "metadata", "files", "tombstones", "txns", "domains"),
        fast,
        columnar,
        strict=True,
    ):
        if isinstance(a, pa.Table):
            assert a.schema == b.schema, (name, a.schema, b.schema)
            assert a.to_pylist() == b.to_pylist(), name
        else:
            assert a == b, name


def test_both_replay_paths_agree_on_tables_the_engine_writes(tmp_path, monkeypatch):
    schema = pa.schema([("id", pa.int64()), ("part", pa.string())])
    root = tmp_path / "t"
    table = DeltaTable.create(
        str(root),
        schema,
        partition_by=["part"],
        properties={"delta.enableDeletionVectors": "true", "delta.checkpointInterval": "1000"},
    )
    for i in range(4):
        table.append(
            pa.table({"id": list(range(i * 100, i * 100 + 100)), "part": ["a/b c%", None, "x", "é"] * 25})
        )
    table.delete("id % 7 = 0")  # deletion vectors: remove + re-add of the same paths
    table.delete("part = 'x'")
    table.update({"id": "id + 1000"}, "id < 50")
    table.append(pa.table({"id": [1], "part": ["y"]}), app_id="job", app_version=3)
    table.optimize()
    assert_same_both_ways(root, monkeypatch)


def _golden_tables():
    golden = CONFORMANCE / "golden"
    return (
        sorted(p / "delta" for p in golden.iterdir() if (p / "delta" / "_delta_log").is_dir())
        if golden.is_dir()
        else []
    )


@pytest.mark.conformance
@pytest.mark.parametrize("root", _golden_tables() or [None], ids=lambda p: p.parent.name if p else "absent")
def test_both_replay_paths_agree_on_the_conformance_tables(root, monkeypatch):
    if root is None:
        conformance_golden()
    assert_same_both_ways(root, monkeypatch)
