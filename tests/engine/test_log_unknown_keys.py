"""Unknown keys in the Delta log: beside a known action, inside it, or alone on a line.

The protocol lets future writers add fields inside actions and sibling keys beside them, and
readers must ignore what they do not recognise. So a line is the action(s) whose known key it
has: ``{"add": {...}, "someFutureKey": [...]}`` is that add. Every action type is checked through
every way a commit is parsed:

* ``json``: a commit under the small-commit threshold, parsed line by line with ``json``;
* ``arrow``: the same actions padded above the threshold, parsed with ``pyarrow.json``;
* ``arrow-fallback``: padded, plus two unknown-only lines whose values have conflicting types,
  which ``pyarrow.json`` refuses, so the commit is parsed again line by line;

and through checkpoints (classic Parquet with extra columns and struct fields, V2 JSON and
Parquet with sidecars). Logs and data files are built by hand and every expected value is
written out here, never computed by the engine; delta-rs reads the same logs as a second opinion.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.json as pj
import pytest

from deltaplane.engine import DeltaTable
from deltaplane.engine.log.commits import _SMALL_COMMIT_BYTES, parse_log_json
from deltaplane.engine.storage import LocalStore
from tests.logbuilder import (
    CHECKPOINT_TYPES,
    DOMAIN_METADATA_TYPE,
    TXN_TYPE,
    add,
    checkpoint_parquet,
    commit_info,
    id_part_rows,
    metadata,
    partitioned_file,
    protocol,
    remove,
    write_checkpoint,
    write_parquet,
)
from tests.logbuilder import SIMPLE_SCHEMA as SCHEMA

SMALL, ARROW, FALLBACK = "json", "arrow", "arrow-fallback"
PATHS = [SMALL, ARROW, FALLBACK]

# Values of unknown keys: nested, of several JSON types, so that inference has work to do.
FUTURE = {"someFutureKey": [1, 2, 3], "anotherFutureKey": {"nested": {"deep": "x"}, "n": 1.5}}
INSIDE = {"futureField": {"x": [1, 2]}, "futureFlag": True}


def _encode(actions: list[dict], how: str) -> bytes:
    lines = [json.dumps(a) for a in actions]
    if how in (ARROW, FALLBACK):
        # An unknown-only line big enough to push the commit past the small-commit threshold.
        lines.append(json.dumps({"zzPadding": "p" * (_SMALL_COMMIT_BYTES + 1)}))
    if how == FALLBACK:
        # The same unknown key as a number and as an object: pyarrow.json cannot type the column.
        lines.append(json.dumps({"zzConflict": 1}))
        lines.append(json.dumps({"zzConflict": {"a": "b"}}))
    return ("\n".join(lines) + "\n").encode()


def commit(store: LocalStore, version: int, actions: list[dict], how: str) -> None:
    store.put(f"_delta_log/{version:020d}.json", _encode(actions, how), mode="create")


def beside(action: dict, **more) -> dict:
    """``action`` (``{"kind": body}``) with unknown sibling keys, before and after it."""
    ((kind, body),) = action.items()
    return {"aaFutureKey": {"first": True}, kind: body, **FUTURE, **more}


def inside(action: dict) -> dict:
    """``action`` with unknown fields inside its body."""
    ((kind, body),) = action.items()
    return {kind: {**body, **INSIDE}}


def both(action: dict) -> dict:
    return beside(inside(action))


def head(**config) -> list[dict]:
    return [
        commit_info(),
        protocol(1, 2),
        metadata(SCHEMA, partition_columns=["part"], configuration=config or None),
    ]


def rows(root: Path, version: int | None = None) -> list[tuple[int, str]]:
    return id_part_rows(DeltaTable(str(root), version=version).to_arrow())


def delta_rs_rows(root: Path) -> list[tuple[int, str]]:
    return id_part_rows(deltalake.DeltaTable(str(root)).to_pyarrow_table())


# --- the three parse paths really are three ----------------------------------------------------


def test_the_commit_encodings_reach_different_parse_paths():
    actions = [commit_info(), add("part=a/x.parquet", {"part": "a"})]
    small = parse_log_json(_encode(actions, SMALL), version=0, source="c")
    assert small.pending_rows is not None and len(small.pending_rows) == 1  # parsed with json
    for how in (ARROW, FALLBACK):
        data = _encode(actions, how)
        assert len(data) > _SMALL_COMMIT_BYTES
        parsed = parse_log_json(data, version=0, source="c")
        assert parsed.pending_rows is None  # an Arrow table: the columnar parser ran
        assert parsed.file_actions.column("path").to_pylist() == ["part=a/x.parquet"]
    pj.read_json(io.BytesIO(_encode(actions, ARROW)))
    with pytest.raises(pa.ArrowInvalid):
        pj.read_json(io.BytesIO(_encode(actions, FALLBACK)))


# --- every action type, unknown keys inside and beside, every parse path -----------------------


@pytest.mark.parametrize("how", PATHS)
def test_add_with_unknown_keys_is_still_an_add(root, store, how):
    a = partitioned_file(store, "part=a/a.parquet", [1, 2])
    b = partitioned_file(store, "part=b/b.parquet", [3, 4])
    c = partitioned_file(store, "part=a/c.parquet", [5])
    commit(store, 0, [*head(), beside(a), inside(b), c], how)
    d = partitioned_file(store, "part=b/d.parquet", [6, 7])
    commit(store, 1, [commit_info(), both(d)], how)
    expected = [(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "a"), (6, "b"), (7, "b")]
    assert rows(root) == expected
    assert delta_rs_rows(root) == expected
    snap = DeltaTable(str(root)).snapshot
    by_path = dict(zip(snap.files.column("path").to_pylist(), snap.files.to_pylist(), strict=True))
    assert sorted(by_path) == ["part=a/a.parquet", "part=a/c.parquet", "part=b/b.parquet", "part=b/d.parquet"]
    assert by_path["part=b/d.parquet"]["version"] == 1
    assert by_path["part=b/d.parquet"]["partition_values"] == {"part": "b"}
    assert by_path["part=b/d.parquet"]["size"] == d["add"]["size"]
    assert json.loads(by_path["part=a/a.parquet"]["stats"])["numRecords"] == 2


@pytest.mark.parametrize("how", PATHS)
def test_remove_with_unknown_keys_is_still_a_remove(root, store, how):
    a = partitioned_file(store, "part=a/a.parquet", [1, 2])
    b = partitioned_file(store, "part=b/b.parquet", [3, 4])
    c = partitioned_file(store, "part=b/c.parquet", [5])
    commit(store, 0, [*head(), a, b, c], how)
    commit(store, 1, [commit_info(operation="DELETE"), beside(remove("part=a/a.parquet"))], how)
    commit(store, 2, [commit_info(operation="DELETE"), both(remove("part=b/c.parquet"))], how)
    assert rows(root) == [(3, "b"), (4, "b")]
    assert delta_rs_rows(root) == [(3, "b"), (4, "b")]
    snap = DeltaTable(str(root)).snapshot
    assert sorted(snap.tombstones.column("path").to_pylist()) == ["part=a/a.parquet", "part=b/c.parquet"]
    assert rows(root, version=1) == [(3, "b"), (4, "b"), (5, "b")]


@pytest.mark.parametrize("how", PATHS)
def test_metadata_with_unknown_keys_is_still_the_metadata(root, store, how):
    a = partitioned_file(store, "part=a/a.parquet", [1])
    first = metadata(SCHEMA, partition_columns=["part"], configuration={"k": "0"})
    commit(store, 0, [commit_info(), protocol(1, 2), both(first), a], how)
    wider = {
        **SCHEMA,
        "fields": [*SCHEMA["fields"], {"name": "note", "type": "string", "nullable": True, "metadata": {}}],
    }
    second = metadata(wider, partition_columns=["part"], configuration={"k": "1", "other": "v"})
    commit(store, 1, [commit_info(operation="SET TBLPROPERTIES"), both(second)], how)
    table = DeltaTable(str(root))
    assert table.metadata.configuration == {"k": "1", "other": "v"}
    assert table.metadata.partition_columns == ["part"]
    assert table.schema.names == ["id", "part", "note"]
    assert table.metadata.extra == INSIDE  # unknown fields inside are kept
    assert table.to_arrow().to_pylist() == [{"id": 1, "part": "a", "note": None}]
    assert DeltaTable(str(root), version=0).metadata.configuration == {"k": "0"}


@pytest.mark.parametrize("how", PATHS)
def test_protocol_with_unknown_keys_is_still_the_protocol(root, store, how):
    a = partitioned_file(store, "part=a/a.parquet", [1])
    commit(store, 0, [commit_info(), both(protocol(1, 2)), metadata(SCHEMA, ["part"]), a], how)
    commit(store, 1, [commit_info(operation="UPGRADE PROTOCOL"), both(protocol(1, 4))], how)
    p = DeltaTable(str(root)).protocol
    assert (p.min_reader_version, p.min_writer_version) == (1, 4)
    assert p.extra == INSIDE
    assert DeltaTable(str(root), version=0).protocol.min_writer_version == 2
    assert deltalake.DeltaTable(str(root)).protocol().min_writer_version == 4


@pytest.mark.parametrize("how", PATHS)
def test_txn_with_unknown_keys_is_still_a_txn(root, store, how):
    a = partitioned_file(store, "part=a/a.parquet", [1])
    commit(store, 0, [*head(), a, beside({"txn": {"appId": "first", "version": 3}})], how)
    b = partitioned_file(store, "part=a/b.parquet", [2])
    txn = both({"txn": {"appId": "job", "version": 7, "lastUpdated": 1_700_000_000_000}})
    commit(store, 1, [commit_info(), txn, b], how)
    snap = DeltaTable(str(root)).snapshot
    assert snap.app_transaction_version("first") == 3
    assert snap.app_transaction_version("job") == 7
    assert snap.txns["job"].extra == INSIDE
    assert deltalake.DeltaTable(str(root)).transaction_version("job") == 7
    assert rows(root) == [(1, "a"), (2, "a")]


@pytest.mark.parametrize("how", PATHS)
def test_commit_info_with_unknown_keys_is_still_the_commit_info(root, store, how):
    a = partitioned_file(store, "part=a/a.parquet", [1])
    commit(store, 0, [*head(), a], how)
    info = beside(commit_info(operation="MERGE", engineInfo="future-writer/9", futureField={"x": 1}))
    b = partitioned_file(store, "part=a/b.parquet", [2])
    commit(store, 1, [info, b], how)
    table = DeltaTable(str(root))
    assert table.snapshot.commit_info.operation == "MERGE"
    assert table.snapshot.commit_info.values["futureField"] == {"x": 1}
    assert table.snapshot.commit_infos[1]["engineInfo"] == "future-writer/9"
    assert table.history(1)[0]["operation"] == "MERGE"
    assert rows(root) == [(1, "a"), (2, "a")]


@pytest.mark.parametrize("how", PATHS)
def test_cdc_with_unknown_keys_is_still_a_cdc_file(root, store, how):
    a = partitioned_file(store, "part=a/a.parquet", [1, 2])
    commit(store, 0, [*head(**{"delta.enableChangeDataFeed": "true"}), a], how)
    change = pa.table(
        {
            "id": pa.array([2, 2], pa.int64()),
            "_change_type": pa.array(["update_preimage", "update_postimage"]),
        }
    )
    size = write_parquet(store, "_change_data/part=a/cdc-1.parquet", change)
    cdc = {
        "cdc": {
            "path": "_change_data/part=a/cdc-1.parquet",
            "partitionValues": {"part": "a"},
            "size": size,
            "dataChange": False,
        }
    }
    b = partitioned_file(store, "part=a/b.parquet", [20])
    commit(store, 1, [commit_info(operation="UPDATE"), remove("part=a/a.parquet"), b, both(cdc)], how)
    changes = DeltaTable(str(root)).changes(1, 1)
    assert sorted(
        zip(
            changes.column("id").to_pylist(),
            changes.column("part").to_pylist(),
            changes.column("_change_type").to_pylist(),
            strict=True,
        )
    ) == [(2, "a", "update_postimage"), (2, "a", "update_preimage")]


@pytest.mark.parametrize("how", PATHS)
def test_domain_metadata_with_unknown_keys_is_still_a_domain(root, store, how):
    a = partitioned_file(store, "part=a/a.parquet", [1])
    start = [commit_info(), protocol(1, 7, writer_features=["domainMetadata"]), metadata(SCHEMA, ["part"]), a]
    commit(store, 0, start, how)
    one = {"domainMetadata": {"domain": "app.one", "configuration": '{"k":1}', "removed": False}}
    two = {"domainMetadata": {"domain": "app.two", "configuration": "{}", "removed": False}}
    commit(store, 1, [commit_info(), both(one), beside(two)], how)
    gone = {"domainMetadata": {"domain": "app.two", "configuration": "{}", "removed": True}}
    commit(store, 2, [commit_info(), inside(gone)], how)
    snap = DeltaTable(str(root)).snapshot
    assert sorted(snap.domains) == ["app.one"]
    assert snap.domains["app.one"].configuration == '{"k":1}'
    assert snap.domains["app.one"].extra == INSIDE
    assert sorted(DeltaTable(str(root), version=1).snapshot.domains) == ["app.one", "app.two"]


@pytest.mark.parametrize("how", PATHS)
def test_a_line_with_only_unknown_keys_is_ignored(root, store, how):
    a = partitioned_file(store, "part=a/a.parquet", [1])
    future_add = {"futureAction": add("part=a/a.parquet", {"part": "a"})["add"]}
    future_remove = {"remove2": {"path": "part=a/a.parquet", "dataChange": True}}
    commit(store, 0, [*head(), a, future_add], how)
    commit(store, 1, [commit_info(), future_remove, {"ADD": {"path": "part=a/zzz.parquet"}}, {}], how)
    assert rows(root) == [(1, "a")]
    assert delta_rs_rows(root) == [(1, "a")]
    assert DeltaTable(str(root)).snapshot.files.num_rows == 1


@pytest.mark.parametrize("how", PATHS)
def test_unknown_keys_of_changing_types_across_file_action_lines(root, store, how):
    """Beside and inside file actions, the same unknown key as an object, a string, a list:
    nothing a columnar parser can type, so it falls back, and still gets every action (the txn
    beside the last add too)."""
    files = [partitioned_file(store, f"part=a/{i}.parquet", [i]) for i in range(4)]
    values = [{"o": 1}, "text", [1, "two"], None]
    lines = []
    for f, value in zip(files, values, strict=True):
        body = {**f["add"], "futureField": value}
        lines.append({"add": body, "someFutureKey": value})
    lines[-1]["txn"] = {"appId": "slow", "version": 3, "futureField": "x"}
    commit(store, 0, [*head(), *lines], how)
    commit(
        store,
        1,
        [
            commit_info(),
            {
                "remove": {"path": "part=a/1.parquet", "dataChange": True, "futureField": [1]},
                "someFutureKey": "x",
            },
        ],
        how,
    )
    assert rows(root) == [(0, "a"), (2, "a"), (3, "a")]
    assert delta_rs_rows(root) == [(0, "a"), (2, "a"), (3, "a")]
    assert DeltaTable(str(root)).snapshot.app_transaction_version("slow") == 3


# --- two known actions on one line ---------------------------------------------------------------


@pytest.mark.parametrize("how", PATHS)
def test_a_line_with_two_known_actions_counts_as_both(root, store, how):
    """Not allowed by the protocol, but seen: each known action on the line counts, as if it
    were on a line of its own (``deltaplane.engine.actions.known_actions``).

    delta-rs reads such lines the same way (one column per action type) except for an add and
    a remove on one line, where it takes only the add; so its rows are compared at version 0,
    before that line, and its other answers at the latest version."""
    a = partitioned_file(store, "part=a/a.parquet", [1, 2])
    b = partitioned_file(store, "part=b/b.parquet", [3])
    start = [
        {**commit_info(), **protocol(1, 7, writer_features=["domainMetadata"])},
        {**metadata(SCHEMA, ["part"], configuration={"k": "v"}), **a},
        {**b, "txn": {"appId": "job", "version": 1}},
    ]
    commit(store, 0, start, how)
    c = partitioned_file(store, "part=a/c.parquet", [4, 5])
    d = partitioned_file(store, "part=b/d.parquet", [6])
    domain = {"domainMetadata": {"domain": "app.d", "configuration": "{}", "removed": False}}
    commit(
        store,
        1,
        [
            commit_info(),
            {**c, **remove("part=a/a.parquet"), "someFutureKey": 1},
            {**domain, **d, "txn": {"appId": "job", "version": 2}},
        ],
        how,
    )
    assert rows(root, version=0) == [(1, "a"), (2, "a"), (3, "b")]
    version_0 = deltalake.DeltaTable(str(root), version=0).to_pyarrow_table()
    assert sorted(version_0.column("id").to_pylist()) == [1, 2, 3]
    assert rows(root) == [(3, "b"), (4, "a"), (5, "a"), (6, "b")]
    table = DeltaTable(str(root))
    assert table.metadata.configuration == {"k": "v"}
    assert table.protocol.min_writer_version == 7
    assert table.snapshot.app_transaction_version("job") == 2
    assert sorted(table.snapshot.domains) == ["app.d"]
    assert table.snapshot.tombstones.column("path").to_pylist() == ["part=a/a.parquet"]
    assert DeltaTable(str(root), version=0).snapshot.app_transaction_version("job") == 1
    theirs = deltalake.DeltaTable(str(root))
    assert theirs.transaction_version("job") == 2
    assert theirs.metadata().configuration == {"k": "v"}
    assert theirs.protocol().min_writer_version == 7


# --- small commits replayed on top of a checkpoint (Arrow replay of JSON-parsed rows) ----------


def test_small_commits_with_unknown_keys_over_a_checkpoint(root, store):
    a = partitioned_file(store, "part=a/a.parquet", [1])
    b = partitioned_file(store, "part=b/b.parquet", [2])
    write_checkpoint(store, 0, [protocol(1, 2), metadata(SCHEMA, ["part"]), a, b], last_checkpoint=True)
    c = partitioned_file(store, "part=a/c.parquet", [3])
    commit(store, 1, [commit_info(), both(c), beside(remove("part=b/b.parquet"))], SMALL)
    commit(store, 2, [commit_info(), beside({"txn": {"appId": "job", "version": 5}})], SMALL)
    assert rows(root) == [(1, "a"), (3, "a")]
    assert DeltaTable(str(root)).snapshot.app_transaction_version("job") == 5


# --- checkpoints -------------------------------------------------------------------------------

_MAP = pa.map_(pa.string(), pa.string())
_FUTURE_STRUCT = pa.struct([("x", pa.list_(pa.int64())), ("futureFlag", pa.bool_())])


def _future_types(big: bool) -> dict[str, pa.DataType]:
    """Checkpoint column types with unknown fields inside every action struct."""
    future = [("futureField", _FUTURE_STRUCT), ("futureBlob", pa.string())]
    path, *known_add = CHECKPOINT_TYPES["add"]
    return {
        "protocol": pa.struct(
            [*CHECKPOINT_TYPES["protocol"], ("writerFeatures", pa.list_(pa.string())), *future]
        ),
        "metaData": pa.struct([*CHECKPOINT_TYPES["metaData"], *future]),
        # An unknown field before the known ones, too.
        "add": pa.struct([path, ("futureField", _FUTURE_STRUCT), *known_add, ("tags", _MAP), future[1]]),
        "remove": pa.struct([*CHECKPOINT_TYPES["remove"], *future]),
        "txn": pa.struct([*TXN_TYPE, *future]),
        "domainMetadata": pa.struct([*DOMAIN_METADATA_TYPE, *future]),
        # A whole action type this reader has never heard of, as a top-level column.
        "someFutureAction": pa.struct([("path", pa.string()), ("size", pa.int64())]),
    }


def _future_values(big: bool) -> dict:
    return {
        "futureField": {"x": [1, 2], "futureFlag": True},
        "futureBlob": ("b" * (17 << 20)) if big else "b",
    }


@pytest.mark.parametrize("big", [False, True], ids=["read-at-once", "read-field-by-field"])
def test_classic_checkpoint_with_unknown_columns_and_fields(root, store, big):
    """A classic Parquet checkpoint whose action structs carry fields this reader does not know,
    plus a top-level column for an unknown action. ``big`` makes the checkpoint larger than the
    size read in one call (a 17 MiB unknown field), so the field-by-field reader runs too."""
    a = partitioned_file(store, "part=a/a.parquet", [1, 2])
    b = partitioned_file(store, "part=b/b.parquet", [3])
    extra = _future_values(big)
    small_extra = _future_values(False)
    actions = [
        {"protocol": {**protocol(1, 7, writer_features=["domainMetadata"])["protocol"], **small_extra}},
        {"metaData": {**metadata(SCHEMA, ["part"], configuration={"k": "v"})["metaData"], **small_extra}},
        {"add": {**a["add"], **extra, "tags": {"t": "1"}}},
        {"add": {**b["add"], **small_extra}},
        {
            "remove": {
                "path": "part=a/old.parquet",
                "deletionTimestamp": 1_700_000_000_000,
                "dataChange": True,
                **small_extra,
            }
        },
        {"txn": {"appId": "job", "version": 4, "lastUpdated": 1, **small_extra}},
        {"domainMetadata": {"domain": "app.x", "configuration": "{}", "removed": False, **small_extra}},
        {"someFutureAction": {"path": "part=a/ghost.parquet", "size": 1}},
    ]
    write_checkpoint(store, 3, actions, _future_types(big), last_checkpoint=True)
    # The commits the checkpoint stands for are gone: only the checkpoint can answer.
    c = partitioned_file(store, "part=b/c.parquet", [4])
    commit(store, 4, [commit_info(), both(c)], SMALL)
    table = DeltaTable(str(root))
    assert rows(root) == [(1, "a"), (2, "a"), (3, "b"), (4, "b")]
    snap = table.snapshot
    assert sorted(snap.files.column("path").to_pylist()) == [
        "part=a/a.parquet",
        "part=b/b.parquet",
        "part=b/c.parquet",
    ]
    assert snap.tombstones.column("path").to_pylist() == ["part=a/old.parquet"]
    assert snap.app_transaction_version("job") == 4
    assert sorted(snap.domains) == ["app.x"]
    assert table.metadata.configuration == {"k": "v"}
    assert (table.protocol.min_reader_version, table.protocol.min_writer_version) == (1, 7)
    assert table.metadata.extra["futureField"] == {"x": [1, 2], "futureFlag": True}
    if not big:
        assert delta_rs_rows(root) == [(1, "a"), (2, "a"), (3, "b"), (4, "b")]


def _sidecar(store: LocalStore, name: str, adds: list[dict]) -> dict:
    """A sidecar Parquet file whose add structs carry an unknown field; returns its action."""
    typ = pa.struct(
        [
            ("path", pa.string()),
            ("partitionValues", _MAP),
            ("size", pa.int64()),
            ("modificationTime", pa.int64()),
            ("dataChange", pa.bool_()),
            ("futureField", _FUTURE_STRUCT),
        ]
    )
    values = [
        {
            **a["add"],
            "partitionValues": list(a["add"]["partitionValues"].items()),
            "futureField": {"x": [7], "futureFlag": False},
        }
        for a in adds
    ]
    table = pa.table({"add": pa.array(values, typ), "futureColumn": pa.array([1] * len(values), pa.int64())})
    size = write_parquet(store, f"_delta_log/_sidecars/{name}", table)
    return {"sidecar": {"path": name, "sizeInBytes": size, "modificationTime": 1_700_000_000_000}}


V2 = protocol(3, 7, ["v2Checkpoint"], ["v2Checkpoint", "domainMetadata"])


@pytest.mark.parametrize("how", PATHS)
def test_v2_json_checkpoint_with_unknown_keys(root, store, how):
    a = partitioned_file(store, "part=a/a.parquet", [1, 2])
    b = partitioned_file(store, "part=b/b.parquet", [3])
    side_1 = _sidecar(store, "one.parquet", [a])
    side_2 = _sidecar(store, "two.parquet", [b])
    manifest = [
        both({"checkpointMetadata": {"version": 2, "tags": {"sidecarNumActions": "2"}}}),
        both(V2),
        both(metadata(SCHEMA, ["part"], configuration={"k": "v"})),
        both(side_1),
        beside(inside(side_2), txn={"appId": "job", "version": 9}),
        both({"domainMetadata": {"domain": "app.x", "configuration": "{}", "removed": False}}),
        {"someFutureAction": {"path": "part=a/ghost.parquet"}},
    ]
    store.put(
        "_delta_log/00000000000000000002.checkpoint.3a0d65cd-4056-49b8-937b-95f9e3ee90e5.json",
        _encode(manifest, how),
    )
    commit(store, 2, [commit_info()], SMALL)  # the commit the checkpoint stands for
    c = partitioned_file(store, "part=a/c.parquet", [4])
    commit(store, 3, [commit_info(), both(c)], how)
    assert rows(root) == [(1, "a"), (2, "a"), (3, "b"), (4, "a")]
    snap = DeltaTable(str(root)).snapshot
    assert snap.segment.checkpoint is not None and snap.segment.checkpoint.version == 2
    assert snap.app_transaction_version("job") == 9
    assert sorted(snap.domains) == ["app.x"]
    assert snap.metadata.configuration == {"k": "v"}


def test_v2_parquet_checkpoint_with_unknown_columns_and_fields(root, store):
    a = partitioned_file(store, "part=a/a.parquet", [1])
    b = partitioned_file(store, "part=b/b.parquet", [2, 3])
    side = _sidecar(store, "s.parquet", [a, b])
    types = {
        **_future_types(False),
        "protocol": pa.struct(
            [
                ("minReaderVersion", pa.int32()),
                ("minWriterVersion", pa.int32()),
                ("readerFeatures", pa.list_(pa.string())),
                ("writerFeatures", pa.list_(pa.string())),
                ("futureField", _FUTURE_STRUCT),
            ]
        ),
        "checkpointMetadata": pa.struct(
            [("version", pa.int64()), ("tags", _MAP), ("futureField", _FUTURE_STRUCT)]
        ),
        "sidecar": pa.struct(
            [
                ("path", pa.string()),
                ("sizeInBytes", pa.int64()),
                ("modificationTime", pa.int64()),
                ("futureField", _FUTURE_STRUCT),
            ]
        ),
    }
    future = {"futureField": {"x": [1], "futureFlag": True}}
    actions = [
        {"checkpointMetadata": {"version": 1, **future}},
        {"protocol": {**V2["protocol"], **future}},
        {"metaData": {**metadata(SCHEMA, ["part"])["metaData"], **future}},
        {"sidecar": {**side["sidecar"], **future}},
        {"txn": {"appId": "job", "version": 2, **future}},
        {"someFutureAction": {"path": "part=a/ghost.parquet", "size": 1}},
    ]
    store.put(
        "_delta_log/00000000000000000001.checkpoint.0d5a5b1e-5f8c-4a44-9d0a-2f1b8f6c3e11.parquet",
        checkpoint_parquet(actions, types),
    )
    commit(store, 1, [commit_info()], SMALL)
    assert rows(root) == [(1, "a"), (2, "b"), (3, "b")]
    snap = DeltaTable(str(root)).snapshot
    assert snap.segment.checkpoint.version == 1
    assert snap.app_transaction_version("job") == 2
