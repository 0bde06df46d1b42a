"""Many writers, one table: no lost or doubled commits; crashes leave a readable table."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.log.files import LOG_DIR
from tests.conftest import PROJECT_ROOT
from tests.workers import append_rows

SCHEMA = pa.schema([("id", pa.int64()), ("worker", pa.int64())])


def run_concurrent_appends(uri: str, workers: int, appends: int, storage_options=None) -> list[int]:
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(append_rows, uri, w, appends, storage_options) for w in range(workers)]
        return sorted(v for f in futures for v in f.result())


def assert_exactly_once(
    uri: str, workers: int, appends: int, versions: list[int], storage_options=None
) -> None:
    total = workers * appends
    assert versions == list(range(1, total + 1))  # every commit got its own version, none twice
    table = DeltaTable(uri, storage_options=storage_options)
    assert table.version == total
    ids = table.to_arrow(columns=["id"]).column("id")
    assert len(ids) == total * 10 and pc.count_distinct(ids).as_py() == total * 10
    history = table.history()
    assert len({h["txnId"] for h in history if "txnId" in h}) == total + 1


@pytest.mark.slow
def test_eight_writers_on_the_local_filesystem(tmp_path):
    uri = str(tmp_path / "t")
    DeltaTable.create(uri, SCHEMA)
    versions = run_concurrent_appends(uri, workers=8, appends=25)
    assert_exactly_once(uri, 8, 25, versions)
    log = os.listdir(tmp_path / "t" / LOG_DIR)
    assert not [n for n in log if n.endswith(".tmp")]  # no temporary files left behind


def _run_worker(function: str, uri: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "tests.workers", function, uri], cwd=PROJECT_ROOT, env=env
    ).returncode


def test_a_writer_killed_before_committing_changes_nothing(tmp_path):
    uri = str(tmp_path / "t")
    table = DeltaTable.create(uri, SCHEMA)
    table.append(pa.table({"id": pa.array([1, 2], pa.int64()), "worker": pa.array([0, 0], pa.int64())}))
    data_files_before = {p.name for p in (tmp_path / "t").glob("*.parquet")}
    assert _run_worker("append_then_die_before_commit", uri) == 9
    orphans = {p.name for p in (tmp_path / "t").glob("*.parquet")} - data_files_before
    assert orphans  # its data files were written...
    after = DeltaTable(uri)
    assert after.version == 1 and after.to_arrow().num_rows == 2  # ...but never committed
    after.append(pa.table({"id": pa.array([3], pa.int64()), "worker": pa.array([0], pa.int64())}))
    assert after.version == 2


def test_a_writer_killed_while_checkpointing_leaves_a_loadable_table(tmp_path):
    uri = str(tmp_path / "t")
    table = DeltaTable.create(uri, SCHEMA)
    for i in range(3):
        table.append(pa.table({"id": pa.array([i], pa.int64()), "worker": pa.array([0], pa.int64())}))
    assert _run_worker("checkpoint_then_die_midway", uri) == 9
    log = tmp_path / "t" / LOG_DIR
    assert not (log / "00000000000000000003.checkpoint.parquet").exists()
    assert not (log / "_last_checkpoint").exists()
    reloaded = DeltaTable(uri)
    assert reloaded.version == 3 and reloaded.to_arrow().num_rows == 3
    reloaded.checkpoint()  # a later checkpoint succeeds despite the debris
    assert DeltaTable(uri).snapshot.segment.checkpoint.version == 3
