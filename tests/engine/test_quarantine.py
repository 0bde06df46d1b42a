"""A rejected batch moves out of the table's way, completely and repeatably, and stays listed."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, stage_write, write_table
from deltaplane.engine.commands.staged_manifest import write_manifest
from deltaplane.engine.quarantine import (
    batch_name,
    list_rejections,
    quarantine_location,
    quarantine_staged,
    read_rejection,
)


def _staged_batch(tmp_path, name="b1"):
    table = str(tmp_path / "t")
    write_table(table, pa.table({"id": pa.array([1], pa.int64())}))
    staged = stage_write(table, pa.table({"id": pa.array([2, 3], pa.int64())}))
    landing = tmp_path / "landing" / f"{name}.csv"
    landing.parent.mkdir(exist_ok=True)
    landing.write_text("id\n2\n3\n")
    manifest = str(tmp_path / "staging" / f"{name}.json")
    os.makedirs(os.path.dirname(manifest), exist_ok=True)
    write_manifest(manifest, staged, landing=[str(landing)])
    return table, staged, manifest, landing


def test_quarantine_moves_everything_and_records_why(tmp_path):
    table, staged, manifest, landing = _staged_batch(tmp_path)
    destination = quarantine_location(table, batch_name(manifest))
    record = quarantine_staged(staged, manifest, destination, {"message": "2 rows failed"}, landing=[landing])

    assert not os.path.exists(manifest) and not landing.exists()
    for add in staged.adds:  # the staged data files left the table's folder
        assert not os.path.exists(os.path.join(table, add.path))
    kept = sorted(os.listdir(destination))
    assert kept == ["data", "landing", "manifest.json", "rejection.json"]
    assert os.listdir(os.path.join(destination, "landing")) == ["b1.csv"]
    assert len(os.listdir(os.path.join(destination, "data"))) == len(staged.adds)
    assert read_rejection(destination) == json.loads(json.dumps(record))
    assert record["message"] == "2 rows failed" and record["landing_files"] == [str(landing)]
    assert DeltaTable(table).to_arrow().column("id").to_pylist() == [1]  # the table never saw it


def test_quarantine_interrupted_and_run_again_completes(tmp_path):
    """A crash after some copies: running the same quarantine again finishes it (no error on the
    objects the first try already copied, nothing lost)."""
    table, staged, manifest, landing = _staged_batch(tmp_path)
    destination = quarantine_location(table, "b1")
    keep = landing.read_bytes()
    os.makedirs(os.path.join(destination, "landing"))
    with open(os.path.join(destination, "landing", "b1.csv"), "wb") as f:
        f.write(b"partial")  # what a killed first try left
    quarantine_staged(staged, manifest, destination, {"message": "x"}, landing=[landing])
    with open(os.path.join(destination, "landing", "b1.csv"), "rb") as f:
        assert f.read() == keep
    quarantine_staged(staged, manifest, destination, {"message": "x"}, landing=[landing])  # third try
    assert read_rejection(destination)["message"] == "x"


def test_list_rejections_newest_first_and_unreadable_records_listed(tmp_path):
    table = str(tmp_path / "t")
    write_table(table, pa.table({"id": pa.array([1], pa.int64())}))
    root = os.path.join(table, "_quarantine")
    for batch, at in [("old", 1000), ("new", 3000), ("mid", 2000)]:
        os.makedirs(os.path.join(root, batch))
        with open(os.path.join(root, batch, "rejection.json"), "w") as f:
            json.dump({"message": batch, "rejected_at": at}, f)
    os.makedirs(os.path.join(root, "broken"))
    with open(os.path.join(root, "broken", "rejection.json"), "w") as f:
        f.write("{not json")
    os.makedirs(os.path.join(root, "inprogress", "data"))  # no record yet: not a rejection

    rows = list_rejections(table)
    assert [r["batch"] for r in rows] == ["new", "mid", "old", "broken"]
    assert rows[0]["location"] == f"{root}/new"
    assert "unreadable rejection.json" in rows[-1]["error"]


def test_list_rejections_of_a_table_with_none(tmp_path):
    table = str(tmp_path / "t")
    write_table(table, pa.table({"id": pa.array([1], pa.int64())}))
    assert list_rejections(table) == []
    assert list_rejections(str(tmp_path / "missing")) == []


@pytest.mark.parametrize("name", ["run__2026-01-01T00:00:00+00:00.json", "b.json", "s3://b/k/b.json"])
def test_batch_name_is_the_manifest_name(name):
    assert batch_name(name) == name.rsplit("/", 1)[-1].removesuffix(".json")
