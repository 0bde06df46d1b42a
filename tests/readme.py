"""README.md's code blocks, for the tests that run them (every block is run or checked by one)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class Block:
    language: str  # "python", "sh", "" (output or a listing)
    source: str
    line: int  # where the block starts in README.md

    def __str__(self) -> str:
        return f"README.md:{self.line} ({self.language or 'text'})"


def blocks() -> list[Block]:
    text = README.read_text()
    return [Block(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1) for m in _FENCE.finditer(text)]


def python_blocks(*, dag_files: bool = False, spark: bool | None = None) -> list[Block]:
    """Python blocks: the DAG files (``# dags/<name>.py`` first line) or the others, with or
    without Spark (``spark=None``: both)."""
    out = []
    for b in blocks():
        if b.language != "python" or b.source.startswith("# dags/") != dag_files:
            continue
        uses_spark = "deltaplane.spark_jobs" in b.source
        if spark is None or uses_spark == spark:
            out.append(b)
    return out
