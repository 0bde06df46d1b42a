"""Opening a table reads from its checkpoint only the leaf columns replay needs.

Decoding a Parquet leaf costs tens of microseconds even for a dozen rows, and a checkpoint has
dozens of leaves that replay never looks at: ``stats_parsed`` when the JSON stats are there,
the actions the checkpoint holds none of (row-group statistics say so), fields null in every
row (no deletion vectors, no row tracking). These tests pin down the behaviour: such leaves are
not decoded at all (a damaged page in one does not stop the read), and every field that holds a
value still arrives exactly, with or without row-group statistics, in one row group or several.
"""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.errors import DeltaError
from deltaplane.engine.storage import LocalStore
from tests import logbuilder
from tests.logbuilder import SIMPLE_SCHEMA as SCHEMA
from tests.logbuilder import add, commit_info, id_part_rows, metadata, partitioned_file, protocol, remove

_MAP = pa.map_(pa.string(), pa.string())
_DV = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
    ]
)
_VALUES = pa.struct([("id", pa.int64())])
_STATS = pa.struct(
    [("numRecords", pa.int64()), ("minValues", _VALUES), ("maxValues", _VALUES), ("nullCount", _VALUES)]
)
_ROW_FIELDS = [("baseRowId", pa.int64()), ("defaultRowCommitVersion", pa.int64())]  # row tracking
# Every column and field a Delta Spark checkpoint of such a table has, most of them null.
TYPES = {
    "txn": logbuilder.TXN_TYPE,
    "add": pa.struct(
        [
            *logbuilder.CHECKPOINT_TYPES["add"],
            ("tags", _MAP),
            ("deletionVector", _DV),
            *_ROW_FIELDS,
            ("clusteringProvider", pa.string()),
            ("stats_parsed", _STATS),
        ]
    ),
    "remove": pa.struct(
        [
            *logbuilder.CHECKPOINT_TYPES["remove"],
            ("extendedFileMetadata", pa.bool_()),
            ("partitionValues", _MAP),
            ("size", pa.int64()),
            ("deletionVector", _DV),
            *_ROW_FIELDS,
        ]
    ),
    "metaData": pa.struct([*logbuilder.CHECKPOINT_TYPES["metaData"], ("createdTime", pa.int64())]),
    "protocol": pa.struct(
        [
            *logbuilder.CHECKPOINT_TYPES["protocol"],
            ("readerFeatures", pa.list_(pa.string())),
            ("writerFeatures", pa.list_(pa.string())),
        ]
    ),
    "domainMetadata": logbuilder.DOMAIN_METADATA_TYPE,
}
DV = {
    "storageType": "u",
    "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
    "offset": 4,
    "sizeInBytes": 40,
    "cardinality": 2,
}


def data_file(store: LocalStore, path: str, ids: list[int], **extra) -> dict:
    """A Parquet file of ``ids`` under ``part=<x>/``; its add action with JSON stats and the
    same stats typed (``stats_parsed``)."""
    action = partitioned_file(store, path, ids, **extra)
    action["add"]["stats_parsed"] = json.loads(action["add"]["stats"])
    return action


def write_checkpoint(store: LocalStore, version: int, actions: list[dict], **options) -> bytes:
    """A classic checkpoint of ``actions``, one row each, written with ``options``; its bytes."""
    key = logbuilder.write_checkpoint(store, version, actions, TYPES, last_checkpoint=True, **options)
    return store.get(key)


def damage(store: LocalStore, version: int, data: bytes, leaves: list[str], row_groups=None) -> None:
    """Flip the last byte of each named leaf's column chunk (page data, under the page's CRC)
    in ``row_groups`` (all of them by default)."""
    md = pq.ParquetFile(io.BytesIO(data)).metadata
    broken = bytearray(data)
    paths = [md.schema.column(i).path for i in range(md.num_columns)]
    for leaf in leaves:
        for rg in range(md.num_row_groups) if row_groups is None else row_groups:
            chunk = md.row_group(rg).column(paths.index(leaf))
            start = chunk.dictionary_page_offset or chunk.data_page_offset
            broken[start + chunk.total_compressed_size - 1] ^= 0xFF
    store.put(f"_delta_log/{version:020d}.checkpoint.parquet", bytes(broken))


def test_leaves_replay_does_not_use_are_not_decoded(root, store):
    """The checkpoint has JSON stats (so ``stats_parsed`` is unused), no removes, no DVs: pages
    of those leaves are damaged under their checksums, and the table opens and reads the same.
    A damaged leaf that replay does use is still reported."""
    a = data_file(store, "part=a/a.parquet", [1, 2])
    b = data_file(store, "part=b/b.parquet", [3, 4, 5])
    actions = [protocol(1, 2), metadata(SCHEMA, ["part"]), a, b]
    data = write_checkpoint(store, 3, actions, write_page_checksum=True)
    damage(
        store,
        3,
        data,
        [
            "add.stats_parsed.numRecords",
            "add.stats_parsed.maxValues.id",
            "remove.path",
            "add.deletionVector.offset",
        ],
    )
    table = DeltaTable(str(root))
    assert id_part_rows(table.to_arrow()) == [(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "b")]
    assert id_part_rows(table.to_arrow(filter="id BETWEEN 4 AND 9")) == [(4, "b"), (5, "b")]
    assert table.file_uris(filter="id > 2") == [str(root / "part=b/b.parquet")]
    assert table.snapshot.tombstones.num_rows == 0
    assert table.snapshot.files.column("deletion_vector").null_count == 2

    damage(store, 3, data, ["add.size"])
    with pytest.raises(DeltaError, match="checkpoint"):
        DeltaTable(str(root))


def test_each_row_group_decodes_only_the_actions_it_holds(root, store):
    """Protocol and metadata in one row group, adds in two others, a remove and a txn in a
    fourth: the leaves of an action are damaged in every row group that holds none of it, and
    the snapshot is read whole, its files in checkpoint order."""
    files = [data_file(store, f"part=a/{name}.parquet", [i]) for i, name in enumerate("abcd")]
    actions = [
        protocol(1, 2),
        metadata(SCHEMA, ["part"]),
        files[0],
        files[1],
        remove("part=a/old.parquet"),
        {"txn": {"appId": "job", "version": 3, "lastUpdated": 1}},
        files[2],
        files[3],
    ]
    data = write_checkpoint(store, 3, actions, row_group_size=2, write_page_checksum=True)
    assert pq.ParquetFile(io.BytesIO(data)).metadata.num_row_groups == 4
    damage(store, 3, data, ["add.path", "add.stats"], [0, 2])
    data = store.get(f"_delta_log/{3:020d}.checkpoint.parquet")
    damage(store, 3, data, ["remove.path", "txn.appId"], [0, 1, 3])
    data = store.get(f"_delta_log/{3:020d}.checkpoint.parquet")
    damage(store, 3, data, ["metaData.schemaString", "protocol.minReaderVersion"], [1, 2, 3])
    table = DeltaTable(str(root))
    assert table.snapshot.files.column("path").to_pylist() == [f"part=a/{x}.parquet" for x in "abcd"]
    assert table.snapshot.tombstones.column("path").to_pylist() == ["part=a/old.parquet"]
    assert table.snapshot.app_transaction_version("job") == 3
    assert id_part_rows(table.to_arrow(filter="id >= 2")) == [(2, "a"), (3, "a")]


@pytest.mark.parametrize(
    "options",
    [{}, {"write_statistics": False}, {"row_group_size": 2}],
    ids=["statistics", "no-statistics", "row-group-per-two-actions"],
)
def test_every_field_that_holds_a_value_arrives(root, store, options):
    """Fields present in some rows and absent in others (DVs, row tracking, tags empty or set,
    a clustering provider, a remove with a DV, a null partition value, a txn, a domain) come
    out exactly as written, whatever the checkpoint says about its row groups."""
    a = data_file(store, "part=a/a.parquet", [1, 2], tags={}, baseRowId=0, defaultRowCommitVersion=1)
    b = data_file(
        store, "part=b/b.parquet", [3], tags={"k": "v"}, deletionVector=DV, clusteringProvider="liquid"
    )
    c = data_file(store, "part=__HIVE_DEFAULT_PARTITION__/c.parquet", [4, 5], baseRowId=2)
    c["add"]["partitionValues"] = {"part": None}
    actions = [
        protocol(1, 2),
        metadata(SCHEMA, ["part"]),
        {"txn": {"appId": "job", "version": 7, "lastUpdated": 1}},
        a,
        remove("part=a/old.parquet", dv=DV, size=10, partitionValues={"part": "a"}),
        b,
        {"domainMetadata": {"domain": "app.x", "configuration": "{}", "removed": False}},
        c,
    ]
    write_checkpoint(store, 3, actions, **options)
    snap = DeltaTable(str(root)).snapshot
    files = sorted(snap.files.to_pylist(), key=lambda r: r["path"])
    assert [f["path"] for f in files] == [
        "part=__HIVE_DEFAULT_PARTITION__/c.parquet",
        "part=a/a.parquet",
        "part=b/b.parquet",
    ]
    assert [f["partition_values"] for f in files] == [{"part": None}, {"part": "a"}, {"part": "b"}]
    assert [f["deletion_vector"] for f in files] == [None, None, DV]
    assert [f["base_row_id"] for f in files] == [2, 0, None]
    assert [f["default_row_commit_version"] for f in files] == [None, 1, None]
    assert [f["clustering_provider"] for f in files] == [None, None, "liquid"]
    assert [f["tags"] for f in files] == [None, [], [("k", "v")]]
    assert [json.loads(f["stats"])["numRecords"] for f in files] == [2, 2, 1]
    assert snap.files.schema.field("deletion_vector").type == _DV
    (tombstone,) = snap.tombstones.to_pylist()
    assert (tombstone["path"], tombstone["deletion_vector"], tombstone["size"]) == (
        "part=a/old.parquet",
        DV,
        10,
    )
    assert tombstone["deletion_timestamp"] == 1_700_000_000_001
    assert snap.app_transaction_version("job") == 7
    assert sorted(snap.domains) == ["app.x"]


@pytest.mark.parametrize("options", [{}, {"write_statistics": False}], ids=["statistics", "no-statistics"])
def test_fields_null_throughout_arrive_as_nulls_of_their_type(root, store, options):
    """No row has a DV, row tracking or tags, and there are no removes or txns: the live-file
    table still has every column, null, with the type a commit would give it; the same table
    object then moves on to a commit that adds a file with a DV and row tracking."""
    a = data_file(store, "part=a/a.parquet", [1, 2])
    write_checkpoint(store, 3, [protocol(1, 2), metadata(SCHEMA, ["part"]), a], **options)
    table = DeltaTable(str(root))
    files = table.snapshot.files
    for column in (
        "deletion_vector",
        "base_row_id",
        "default_row_commit_version",
        "clustering_provider",
        "tags",
    ):
        assert files.column(column).null_count == 1, column
    assert files.schema.field("deletion_vector").type == _DV
    assert files.schema.field("base_row_id").type == pa.int64()
    assert table.snapshot.tombstones.num_rows == 0 and table.snapshot.txns == {}

    b = data_file(store, "part=b/b.parquet", [3], deletionVector=DV, baseRowId=5)
    del b["add"]["stats_parsed"]
    body = "\n".join(json.dumps(x) for x in [commit_info(), b, remove("part=a/a.parquet")])
    store.put(f"_delta_log/{4:020d}.json", body.encode())
    table.refresh()
    (live,) = table.snapshot.files.to_pylist()
    assert (live["path"], live["deletion_vector"], live["base_row_id"]) == ("part=b/b.parquet", DV, 5)
    assert table.snapshot.tombstones.column("path").to_pylist() == ["part=a/a.parquet"]


@pytest.mark.parametrize("adds", [3, 100], ids=["few-rows", "many-rows"])
def test_non_file_actions_among_many_file_actions(root, store, adds):
    """Txns and domains in the row group that holds the adds, their rows mostly null: each
    comes out once, whatever the row count."""
    files = [add(f"part=a/{i}.parquet", {"part": "a"}, size=i + 1) for i in range(adds)]
    txns = [{"txn": {"appId": f"app{i}", "version": i, "lastUpdated": 1}} for i in range(3)]
    domain = {"domainMetadata": {"domain": "app.x", "configuration": "{}", "removed": False}}
    actions = [protocol(1, 2), *files[:1], *txns[:2], metadata(SCHEMA, ["part"]), *files[1:], domain, txns[2]]
    write_checkpoint(store, 3, actions)
    snap = DeltaTable(str(root)).snapshot
    assert sorted(snap.files.column("size").to_pylist()) == list(range(1, adds + 1))
    assert {app: snap.app_transaction_version(app) for app in snap.txns} == {"app0": 0, "app1": 1, "app2": 2}
    assert sorted(snap.domains) == ["app.x"]
    assert snap.metadata.partition_columns == ["part"]
