"""The code blocks of README.md and the docs site's pages, for the tests that run them (every
block is run or checked by one).

The order is the reader's: README.md, then the pages in ``mkdocs.yml``'s ``nav`` order (the
engine snippets run in that order, each seeing what the ones before it made)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def pages() -> list[Path]:
    """README.md, then every page of the docs site in navigation order."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    return [README, *(ROOT / "docs" / name for entry in nav for name in entry.values())]


@dataclass(frozen=True)
class Block:
    language: str  # "python", "sh", "yaml", "" (output or a listing)
    source: str
    line: int  # where the block starts in its page
    page: str = "README.md"  # the page's path in the repository

    def __str__(self) -> str:
        return f"{self.page}:{self.line} ({self.language or 'text'})"


def blocks() -> list[Block]:
    out = []
    for path in pages():
        text = path.read_text()
        page = str(path.relative_to(ROOT))
        for m in _FENCE.finditer(text):
            out.append(Block(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1, page))
    return out


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
