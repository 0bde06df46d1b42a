"""Functions run in separate processes by the concurrency and crash tests, and a way to run one
in threads."""

from __future__ import annotations

import os
import sys
import threading

import pyarrow as pa


def run_in_threads(target, arguments) -> None:
    """``target(argument)`` for each of ``arguments``, each in a thread of its own, all started
    before any is waited for; returns once every one has ended."""
    threads = [threading.Thread(target=target, args=(argument,)) for argument in arguments]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def append_rows(uri: str, worker: int, appends: int, storage_options: dict | None = None) -> list[int]:
    """Append ``appends`` single-batch commits with ids unique to this worker; return versions."""
    from deltaplane.engine import DeltaTable

    table = DeltaTable(uri, storage_options=storage_options)
    versions = []
    for i in range(appends):
        ids = [worker * 1_000_000 + i * 10 + k for k in range(10)]
        result = table.append(
            pa.table({"id": pa.array(ids, pa.int64()), "worker": pa.array([worker] * 10, pa.int64())})
        )
        versions.append(result.version)
    return versions


def append_then_die_before_commit(uri: str) -> None:
    """Write data files for an append, then die where the commit would happen."""
    from deltaplane.engine import DeltaTable
    from deltaplane.engine.transaction import Transaction

    def die(self, *args, **kwargs):
        sys.stdout.flush()
        os._exit(9)

    Transaction.commit = die
    DeltaTable(uri).append(
        pa.table({"id": pa.array(range(1000, 1100), pa.int64()), "worker": pa.array([99] * 100, pa.int64())})
    )


def checkpoint_then_die_midway(uri: str) -> None:
    """Start writing a checkpoint and die after its first batch."""
    import pyarrow.parquet as pq

    from deltaplane.engine.checkpoint_writer import write_checkpoint
    from deltaplane.engine.storage import open_store

    original = pq.ParquetWriter.write_batch

    def write_then_die(self, *args, **kwargs):
        original(self, *args, **kwargs)
        os._exit(9)

    pq.ParquetWriter.write_batch = write_then_die
    store = open_store(uri)
    from deltaplane.engine.snapshot import load_snapshot

    write_checkpoint(store, load_snapshot(store).version)


if __name__ == "__main__":
    function = globals()[sys.argv[1]]
    function(*sys.argv[2:])
