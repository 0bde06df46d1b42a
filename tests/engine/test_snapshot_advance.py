"""A snapshot carried over new commits (a writer's state after its own commit, ``update_snapshot``)
takes the short way when the commits are small: only the files their actions name are looked at.
On random commit sequences over a few file names (re-added with new deletion vectors, removed,
spelled percent-encoded or as absolute URIs, partitioned or not) the short way gives exactly what
the full replay over the state gives, rows and order, and what a load from scratch gives."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltaplane.engine import snapshot as snapshot_module
from deltaplane.engine.snapshot import load_snapshot, update_snapshot
from deltaplane.engine.storage import MemoryStore
from tests.logbuilder import add, commit_info, metadata, protocol, remove, write_commit

ROOT = "memory://t"
NAMES = ["part=a b/f0.parquet", "part=a b/f1.parquet", "part=c/f2.parquet", "part=c/f3.parquet"]

action = st.tuples(
    st.sampled_from(["add", "remove"]),
    st.sampled_from(NAMES),
    st.sampled_from([None, "dv1", "dv2"]),
    st.sampled_from(["plain", "percent", "absolute"]),
)
commit = st.lists(action, min_size=1, max_size=4)


def _spelled(name: str, spelling: str) -> str:
    if spelling == "percent":
        return quote(name)  # "part%3Da%20b/f0.parquet": the same file
    if spelling == "absolute":
        return f"{ROOT}/{name}"
    return name


def _dv(dv: str | None) -> dict | None:
    if dv is None:
        return None
    return {
        "storageType": "u",
        "pathOrInlineDv": f"{dv}abcdefghijklmnopq",
        "offset": 1,
        "sizeInBytes": 10,
        "cardinality": 1,
    }


def _write(store: MemoryStore, version: int, actions, partitioned: bool) -> None:
    out = [commit_info()]
    for kind, name, dv, spelling in actions:
        path = _spelled(name, spelling)
        if kind == "add":
            values = {"part": name.split("/")[0].removeprefix("part=")} if partitioned else {}
            out.append(add(path, partition_values=values, size=100 + version, dv=_dv(dv)))
        else:
            out.append(remove(path, dv=_dv(dv), deletion_timestamp=1_700_000_000_000 + version))
    write_commit(store, version, out)


def _rows(snapshot):
    return snapshot.files.to_pylist(), snapshot.tombstones.to_pylist()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=st.lists(commit, min_size=0, max_size=4),
    after=st.lists(commit, min_size=1, max_size=3),
    partitioned=st.booleans(),
)
def test_the_short_way_over_new_commits_is_the_full_replay(before, after, partitioned):
    store = MemoryStore(ROOT)
    features = ["deletionVectors"]
    write_commit(
        store,
        0,
        [
            commit_info(),
            protocol(3, 7, features, features),
            metadata(partition_columns=["part"] if partitioned else []),
        ],
    )
    for version, actions in enumerate(before, start=1):
        _write(store, version, actions, partitioned)
    base = load_snapshot(store)
    for version, actions in enumerate(after, start=base.version + 1):
        _write(store, version, actions, partitioned)

    taken = []
    short_way = snapshot_module._advanced_files
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(snapshot_module, "_advanced_files", lambda *a: taken.append(r := short_way(*a)) or r)
        short = update_snapshot(base)
        patch.setattr(snapshot_module, "_advanced_files", lambda *a: None)
        full = update_snapshot(base)
    assert taken and taken[0] is not None  # the short way was taken, not declined

    assert short.version == full.version == len(before) + len(after)
    assert _rows(short) == _rows(full)
    assert _rows(short) == _rows(load_snapshot(store))
