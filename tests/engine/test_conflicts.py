"""The conflict matrix: two transactions read the same version, one commits, then the other.

Each case names the winner's and the loser's operation and the expected outcome of the loser's
commit under both isolation levels, following Delta Spark's documented matrix.
"""

from __future__ import annotations

import itertools
import json
import time

import pyarrow.compute as pc
import pytest

from deltaplane.engine.actions import Add, DomainMetadata, Metadata, Protocol, Remove
from deltaplane.engine.errors import (
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentTransactionError,
    DomainMetadataConflictError,
    MetadataChangedError,
    ProtocolChangedError,
)
from deltaplane.engine.expressions.bind import bind
from deltaplane.engine.expressions.parser import parse_predicate
from deltaplane.engine.snapshot import load_snapshot
from deltaplane.engine.storage import MemoryStore
from deltaplane.engine.transaction import Transaction
from tests.logbuilder import add, metadata, protocol, struct_schema, write_commit

SCHEMA = struct_schema(("id", "long"), ("region", "string"))
_names = itertools.count()


def new_add(region: str, data_change: bool = True) -> Add:
    lo = next(_names) * 100
    stats = json.dumps(
        {"numRecords": 1, "minValues": {"id": lo}, "maxValues": {"id": lo}, "nullCount": {"id": 0}}
    )
    now = int(time.time() * 1000)  # written just now, as a writer's own files are
    return Add(f"region={region}/new-{lo}.parquet", {"region": region}, 10, now, data_change, stats)


def make_table() -> MemoryStore:
    store = MemoryStore()
    write_commit(
        store,
        0,
        [
            protocol(),
            metadata(schema=SCHEMA, partition_columns=["region"]),
            add("region=eu/a.parquet", {"region": "eu"}),
            add("region=us/b.parquet", {"region": "us"}),
        ],
    )
    return store


def files_where(snapshot, predicate: str):
    files = snapshot.files
    region = pc.struct_field(files.column("partition_values"), "region")
    value = predicate.split("'")[1]
    return files.filter(pc.equal(region, value))


def remove_of(row: dict, data_change: bool = True) -> Remove:
    return Remove(row["path"], data_change, 2, True, row["partition_values"], row["size"])


# --- operations: each returns a ready-to-commit transaction on ``snapshot`` ------------------------


def blind_append(snapshot, level, region="eu"):
    txn = Transaction(snapshot.store, snapshot, operation="WRITE", isolation_level=level)
    txn.add_files([new_add(region)])
    return txn


def reading_region(snapshot, level, operation: str, region: str):
    """A transaction for ``operation`` that has read the files of ``region`` (by the predicate
    ``region = '<region>'``): the transaction and those files."""
    txn = Transaction(snapshot.store, snapshot, operation=operation, isolation_level=level)
    predicate = f"region = '{region}'"
    files = files_where(snapshot, predicate)
    txn.read_files(files, bind(parse_predicate(predicate), snapshot.schema))
    return txn, files


def read_then_append(snapshot, level, region="eu"):
    txn, _ = reading_region(snapshot, level, "MERGE", region)
    txn.add_files([new_add(region)])
    return txn


def delete_partition(snapshot, level, region="eu"):
    txn, files = reading_region(snapshot, level, "DELETE", region)
    txn.remove_files([remove_of(r) for r in files.to_pylist()])
    return txn


def overwrite_all(snapshot, level):
    txn = Transaction(snapshot.store, snapshot, operation="WRITE", isolation_level=level)
    txn.read_whole_table()
    txn.remove_files([remove_of(r) for r in snapshot.files.to_pylist()])
    txn.add_files([new_add("eu")])
    return txn


def optimize(snapshot, level, region="eu"):
    txn, files = reading_region(snapshot, level, "OPTIMIZE", region)
    txn.remove_files([remove_of(r, data_change=False) for r in files.to_pylist()])
    txn.add_files([new_add(region, data_change=False)])
    return txn


def change_metadata(snapshot, level):
    txn = Transaction(snapshot.store, snapshot, operation="SET TBLPROPERTIES", isolation_level=level)
    md = snapshot.metadata
    txn.update_metadata(Metadata(md.id, md.schema_string, md.partition_columns, {"k": "v"}))
    return txn


def change_protocol(snapshot, level):
    txn = Transaction(snapshot.store, snapshot, operation="UPGRADE PROTOCOL", isolation_level=level)
    txn.update_protocol(Protocol(1, 3))
    return txn


def unsupported_protocol(snapshot, level):
    txn = Transaction(snapshot.store, snapshot, operation="UPGRADE PROTOCOL", isolation_level=level)
    txn.update_protocol(Protocol(1, 7, None, ["icebergCompatV1", "domainMetadata"]))
    return txn


def app_txn(snapshot, level):
    txn = blind_append(snapshot, level)
    txn.read_app_transaction("job")
    txn.set_app_transaction("job", 1)
    return txn


def domain(snapshot, level):
    txn = blind_append(snapshot, level)
    txn.set_domain_metadata(DomainMetadata("my.domain", "{}"))
    return txn


OK = None
MATRIX = [
    # winner, loser, Serializable outcome, WriteSerializable outcome
    (blind_append, blind_append, OK, OK),
    (blind_append, delete_partition, ConcurrentAppendError, OK),
    (blind_append, overwrite_all, ConcurrentAppendError, OK),
    (read_then_append, delete_partition, ConcurrentAppendError, ConcurrentAppendError),
    (lambda s, lv: read_then_append(s, lv, "us"), delete_partition, OK, OK),
    (delete_partition, delete_partition, ConcurrentDeleteDeleteError, ConcurrentDeleteDeleteError),
    (delete_partition, read_then_append, ConcurrentDeleteReadError, ConcurrentDeleteReadError),
    (lambda s, lv: delete_partition(s, lv, "us"), delete_partition, OK, OK),
    (optimize, delete_partition, ConcurrentDeleteDeleteError, ConcurrentDeleteDeleteError),
    (optimize, blind_append, OK, OK),
    (blind_append, optimize, OK, OK),
    (optimize, optimize, ConcurrentDeleteDeleteError, ConcurrentDeleteDeleteError),
    (overwrite_all, blind_append, OK, OK),
    (change_metadata, blind_append, MetadataChangedError, MetadataChangedError),
    (change_protocol, change_protocol, ProtocolChangedError, ProtocolChangedError),
    (unsupported_protocol, blind_append, ProtocolChangedError, ProtocolChangedError),
    (app_txn, app_txn, ConcurrentTransactionError, ConcurrentTransactionError),
    (domain, domain, DomainMetadataConflictError, DomainMetadataConflictError),
]


@pytest.mark.parametrize("level", ["Serializable", "WriteSerializable"])
@pytest.mark.parametrize(
    ("winner", "loser", "serializable", "write_serializable"),
    MATRIX,
    ids=[f"{w.__name__}-then-{lo.__name__}-{i}" for i, (w, lo, _, _) in enumerate(MATRIX)],
)
def test_conflict_matrix(level, winner, loser, serializable, write_serializable):
    store = make_table()
    snapshot = load_snapshot(store)
    first, second = winner(snapshot, level), loser(snapshot, level)
    assert first.commit().version == 1
    expected = serializable if level == "Serializable" else write_serializable
    if expected is OK:
        result = second.commit()
        assert result.version == 2 and result.attempts == 2
    else:
        with pytest.raises(expected):
            second.commit()
        assert load_snapshot(store).version == 1  # the loser committed nothing


def test_a_lost_response_is_recognised_as_our_own_commit():
    store = make_table()
    txn = blind_append(load_snapshot(store), "WriteSerializable")
    # The put succeeded but the caller never heard back: the same bytes are already there.
    store.put("_delta_log/00000000000000000001.json", txn._render(1, {}), mode="create")
    result = txn.commit()
    assert result.version == 1 and result.attempts == 1
    assert load_snapshot(store).version == 1


def test_isolation_level_comes_from_the_table_and_is_validated():
    store = make_table()
    snapshot = load_snapshot(store)
    assert Transaction(store, snapshot, operation="WRITE").summary.isolation_level == "WriteSerializable"
    with pytest.raises(Exception, match="isolation level"):
        Transaction(store, snapshot, operation="WRITE", isolation_level="ReadUncommitted")


def test_a_create_race_has_one_winner():
    from deltaplane.engine.errors import TableExistsError

    store = MemoryStore()
    a, b = (Transaction(store, None, operation="CREATE TABLE") for _ in range(2))
    for txn in (a, b):
        txn.update_protocol(Protocol(1, 2))
        txn.update_metadata(Metadata("id", json.dumps(SCHEMA)))
    assert a.commit().version == 0
    with pytest.raises(TableExistsError):
        b.commit()
