"""Work keys: the one "already applied?" check, and the commit that holds the work."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from deltaplane.engine import DeltaTable, write_table
from deltaplane.engine.errors import ConcurrentTransactionError, InvalidArgumentError
from deltaplane.engine.transaction import app_transaction_scope
from deltaplane.engine.work import WorkKey, file_identities, find_applied, local_file_identities


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())})


def test_named_keys_are_stable_and_order_free():
    a = WorkKey.named("files", {"files": file_identities([("b", 2, 20), ("a", 1, 10)]), "mode": "append"})
    b = WorkKey.named("files", {"mode": "append", "files": file_identities([("a", 1, 10), ("b", 2, 20)])})
    assert a == b and a.app_id.startswith("deltaplane:files:") and a.version == 1
    assert WorkKey.named("files", {"files": [["a", 1, 11]]}) != WorkKey.named(
        "files", {"files": [["a", 1, 10]]}
    )
    assert WorkKey.named("staged", [1]) != WorkKey.named("files", [1])  # kinds never collide
    with pytest.raises(InvalidArgumentError):
        WorkKey.named("a:b", 1)
    with pytest.raises(InvalidArgumentError):
        WorkKey("", 1)
    with pytest.raises(InvalidArgumentError):
        WorkKey("x", -1)


def test_local_file_identities_see_size_and_time(tmp_path):
    f = tmp_path / "a.csv"
    f.write_text("id\n1\n")
    first = local_file_identities([str(f)])
    os.utime(f, ns=(1_000_000_000, 2_000_000_000))
    assert local_file_identities([str(f)]) != first
    assert local_file_identities([str(f)])[0] == [str(f), 5, 2_000_000_000]


def test_find_applied_reports_the_commit_that_holds_the_work(table_dir):
    uri = str(table_dir)
    key = WorkKey.named("files", ["batch-1"])
    write_table(uri, rows(1))
    with app_transaction_scope(*key.as_txn()):
        DeltaTable(uri).append(rows(2))  # version 1 holds the work
    for i in range(3, 40):  # later commits, a checkpoint among them
        DeltaTable(uri).append(rows(i))
    DeltaTable(uri).checkpoint()
    DeltaTable(uri).append(rows(99))
    applied = find_applied(DeltaTable(uri).snapshot, key)
    assert applied is not None and applied.version == 1 and applied.recorded == 1
    assert "version 1" in applied.describe()
    assert find_applied(DeltaTable(uri).snapshot, WorkKey.named("files", ["batch-2"])) is None
    assert find_applied(DeltaTable(uri, version=0).snapshot, key) is None  # not yet at version 0
    # Monotone keys: a recorded position at or past the key's means done.
    DeltaTable(uri).append(rows(100), app_id="consume:src", app_version=7)
    snapshot = DeltaTable(uri).snapshot
    assert find_applied(snapshot, WorkKey("consume:src", 5)).version == snapshot.version
    assert find_applied(snapshot, WorkKey("consume:src", 8)) is None


def test_the_commit_left_the_log(table_dir):
    """The work is still known from the checkpoint when its commit file is gone."""
    uri = str(table_dir)
    key = WorkKey.named("files", ["old"])
    with app_transaction_scope(*key.as_txn()):
        write_table(uri, rows(1))
    DeltaTable(uri).append(rows(2))
    DeltaTable(uri).checkpoint()
    (table_dir / "_delta_log" / f"{0:020d}.json").unlink()
    applied = find_applied(DeltaTable(uri).snapshot, key)
    assert applied is not None and applied.version is None
    assert "no longer in the log" in applied.describe()


def test_two_writers_with_the_same_key_cannot_both_land(table_dir):
    uri = str(table_dir)
    write_table(uri, rows(0))
    key = WorkKey.named("files", ["same"])
    stale = DeltaTable(uri)  # both tries read version 0
    with app_transaction_scope(*key.as_txn()):
        DeltaTable(uri).append(rows(1))
    with pytest.raises(ConcurrentTransactionError), app_transaction_scope(*key.as_txn()):
        stale.append(rows(1))
    assert sorted(DeltaTable(uri).to_arrow()["id"].to_pylist()) == [0, 1]
