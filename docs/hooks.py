"""MkDocs hook: the API reference reads the source as it is imported, ``deltaplane.<folder>``.

The repository keeps each package in a top-level folder (``engine/`` is ``deltaplane.engine``,
see ``setup.py``), which the editable install maps at import time; mkdocstrings reads source files
without importing them, so before the build this lays out ``build/docs-src/deltaplane/<folder>``
as symbolic links to the folders (``mkdocs.yml`` points mkdocstrings there)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "operators", "spark_jobs", "devstack")


def on_startup(**kwargs) -> None:
    """Before any plugin reads its configuration: mkdocstrings drops search paths that do not
    exist yet, so a layout made later (``on_config``) is missed on a fresh clone's first build."""
    layout = ROOT / "build" / "docs-src" / "deltaplane"
    layout.mkdir(parents=True, exist_ok=True)
    for name in PACKAGES:
        link = layout / name
        if not link.is_symlink():
            link.symlink_to(ROOT / name, target_is_directory=True)
