"""Faults and watches for engine tests: a local store whose data files cannot be created, and
the names of the threads a call starts."""

from __future__ import annotations

import threading

from deltaplane.engine.errors import StorageError
from deltaplane.engine.storage.local import LocalStore


def break_data_files(monkeypatch) -> dict:
    """``LocalStore.open_output`` refuses every Parquet file (a ``StorageError`` saying "the disk
    went away") while the returned switch's ``"on"`` is true; other objects are written."""
    real = LocalStore.open_output
    switch = {"on": True}

    def open_output(self, key, *, durable=True):
        if switch["on"] and key.endswith(".parquet"):
            raise StorageError(f"cannot write {key}: the disk went away")
        return real(self, key, durable=durable)

    monkeypatch.setattr(LocalStore, "open_output", open_output)
    return switch


def thread_starts(monkeypatch) -> list[str]:
    """The names of the threads started from now on, in order (each still started)."""
    started: list[str] = []
    real = threading.Thread.start

    def start(self):
        started.append(self.name)
        return real(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    return started
