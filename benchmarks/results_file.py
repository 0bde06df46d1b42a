"""Where a benchmark's figures go: one JSON file (its folder made if need be), which the docs and
the README quote."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_results(path: str | os.PathLike, results: dict) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
