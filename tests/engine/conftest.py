"""Fixtures shared by the engine tests that build a table's log by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from deltaplane.engine.storage import LocalStore


@pytest.fixture
def root(tmp_path) -> Path:
    """An empty folder for a table."""
    path = tmp_path / "table"
    path.mkdir()
    return path


@pytest.fixture
def store(root) -> LocalStore:
    """The store on ``root``."""
    return LocalStore(str(root))
