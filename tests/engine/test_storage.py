"""Object stores: the contract every layer above relies on, checked on local disk and memory."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from deltaplane.engine.errors import ObjectExistsError, ObjectNotFoundError, UnsupportedStorageError
from deltaplane.engine.storage import LocalStore, MemoryStore, open_store
from tests.workers import run_in_threads

pytestmark = pytest.mark.xdist_group("s3")  # one SeaweedFS server per test run


@pytest.fixture(params=["local", "memory", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        return LocalStore(str(tmp_path / "root"))
    if request.param == "s3":
        server = request.getfixturevalue("s3_server")
        return open_store(server.uri(), server.options())
    return MemoryStore(f"memory://{tmp_path.name}")


def test_put_get_head_range(store):
    store.put("a/b.bin", b"0123456789")
    assert store.get("a/b.bin") == b"0123456789"
    assert store.get_range("a/b.bin", 2, 3) == b"234"
    assert store.get_range("a/b.bin", 8, 10) == b"89"  # short read at the end
    meta = store.head("a/b.bin")
    assert (meta.key, meta.size) == ("a/b.bin", 10)
    assert meta.last_modified > 1_600_000_000_000


def test_missing_object_is_typed(store):
    with pytest.raises(ObjectNotFoundError):
        store.get("nope")
    with pytest.raises(ObjectNotFoundError):
        store.head("nope")
    with pytest.raises(FileNotFoundError):  # also a builtin FileNotFoundError for callers
        store.open_input("nope")


def test_create_refuses_existing_and_overwrite_replaces(store):
    store.put("k", b"first", mode="create")
    with pytest.raises(ObjectExistsError):
        store.put("k", b"second", mode="create")
    assert store.get("k") == b"first"
    store.put("k", b"third", mode="overwrite")
    assert store.get("k") == b"third"


def test_concurrent_creators_exactly_one_wins(store):
    winners, losers = [], []
    barrier = threading.Barrier(16)

    def attempt(i: int) -> None:
        barrier.wait()
        try:
            store.put("_delta_log/00000000000000000001.json", f"writer {i}".encode(), mode="create")
            winners.append(i)
        except ObjectExistsError:
            losers.append(i)

    run_in_threads(attempt, range(16))
    assert len(winners) == 1 and len(losers) == 15
    assert store.get("_delta_log/00000000000000000001.json") == f"writer {winners[0]}".encode()


def test_list_is_sorted_non_recursive_with_start_after(store):
    for key in [
        "_delta_log/00000000000000000002.json",
        "_delta_log/00000000000000000000.json",
        "_delta_log/00000000000000000001.json",
        "_delta_log/_sidecars/x.parquet",
        "data/part-1.parquet",
        "_delta_log/_last_checkpoint",
    ]:
        store.put(key, b"x")
    keys = [m.key for m in store.list("_delta_log/")]
    assert keys == [
        "_delta_log/00000000000000000000.json",
        "_delta_log/00000000000000000001.json",
        "_delta_log/00000000000000000002.json",
        "_delta_log/_last_checkpoint",
    ]
    after = [m.key for m in store.list("_delta_log/", start_after="_delta_log/00000000000000000001")]
    assert after == [
        "_delta_log/00000000000000000001.json",
        "_delta_log/00000000000000000002.json",
        "_delta_log/_last_checkpoint",
    ]
    everything = [m.key for m in store.list("", recursive=True)]
    assert "_delta_log/_sidecars/x.parquet" in everything and "data/part-1.parquet" in everything
    assert everything == sorted(everything)
    assert list(store.list("missing/")) == []


def test_delete_is_idempotent(store):
    store.put("k", b"v")
    store.delete("k")
    store.delete("k")
    with pytest.raises(ObjectNotFoundError):
        store.get("k")


def test_open_input_is_random_access(store):
    store.put("f", b"abcdef")
    f = store.open_input("f")
    f.seek(3)
    assert f.read(2) == b"de"
    assert isinstance(f, pa.NativeFile)


def test_local_put_leaves_no_temporary_files(tmp_path):
    store = LocalStore(str(tmp_path))
    store.put("d/k", b"v", mode="create")
    with pytest.raises(ObjectExistsError):
        store.put("d/k", b"w", mode="create")
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["k"]


def test_open_store_dispatches_by_scheme(tmp_path):
    assert isinstance(open_store(str(tmp_path)), LocalStore)
    assert open_store(f"file://{tmp_path}").root == str(tmp_path)
    memory = open_store("memory://shared-name")
    memory.put("k", b"v")
    assert open_store("memory://shared-name").get("k") == b"v"  # same process-wide store
    with pytest.raises(UnsupportedStorageError, match="gs"):
        open_store("gs://bucket/table")
