"""Shared fixtures: temporary tables written by delta-rs (the interop oracle)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE = Path(os.environ.get("DELTAPLANE_CONFORMANCE", PROJECT_ROOT.parent / "shared" / "conformance"))


@pytest.fixture
def table_dir(tmp_path: Path) -> Path:
    path = tmp_path / "table"
    path.mkdir()
    return path
