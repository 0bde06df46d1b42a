"""The docs site (``mkdocs.yml``, ``docs/``) builds with ``--strict``, documents every name of the
engine's declared API, is served on 127.0.0.1 only, and the README is its front page: short, and
every link to a page lands on one. (Its code blocks are run with the README's: tests/readme.py.)"""

from __future__ import annotations

import html
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from deltaplane.engine.api import EXPORTS, GROUPS
from tests.readme import README, ROOT, pages

MKDOCS = [sys.executable, "-m", "mkdocs"]


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*MKDOCS, "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=config.parent,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    done = _build(ROOT / "mkdocs.yml", site)
    assert done.returncode == 0, done.stderr[-4000:]
    return site


def test_every_page_is_built_and_every_docs_page_is_in_the_navigation(site):
    nav = [p.name for p in pages()[1:]]
    on_disk = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert sorted(nav) == on_disk, "a page under docs/ is missing from mkdocs.yml's nav, or the other way"
    for name in nav:
        built = site / ("index.html" if name == "index.md" else f"{name[:-3]}/index.html")
        assert built.is_file(), name


def test_the_api_page_documents_every_declared_name_in_its_group(site):
    page = (ROOT / "docs" / "engine-api.md").read_text()
    listed = re.findall(r"^::: deltaplane\.engine\.([\w.]+)\.(\w+)$", page, re.M)
    assert listed == [(module, name) for _, module, names in GROUPS for name in names]
    titles = re.findall(r"^## (.+)$", page, re.M)
    assert titles == list(dict.fromkeys(title for title, _, _ in GROUPS))
    built = html.unescape((site / "engine-api" / "index.html").read_text())
    missing = [n for n, module in EXPORTS.items() if f'id="deltaplane.engine.{module}.{n}"' not in built]
    assert not missing, f"declared but not rendered: {missing}"
    assert "DeltaTable.to_arrow" in built  # a class renders with its methods
    assert "DeltaTable.vacuum" in built and "DeltaTable.load_cdf" in built  # and its mixins'


def _light_copy(tmp_path: Path) -> Path:
    """The site's configuration and pages in ``tmp_path``, the API page cut to one object: the
    same strictness and theme, built in a second instead of rendering the whole API."""
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    for package in ("engine", "operators", "spark_jobs", "devstack"):
        (tmp_path / package).symlink_to(ROOT / package, target_is_directory=True)
    (tmp_path / "docs" / "engine-api.md").write_text(
        "# The engine API\n\n::: deltaplane.engine.units.parse_size\n"
    )
    return tmp_path / "mkdocs.yml"


def test_a_broken_link_fails_the_build(tmp_path):
    """``--strict`` is what keeps the site honest: a link to a page that does not exist stops it."""
    config = _light_copy(tmp_path)
    with (tmp_path / "docs" / "spark.md").open("a") as page:
        page.write("\nSee [the missing page](no-such-page.md).\n")
    done = _build(config, tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-page.md" in done.stderr  # the link, not something else about the copy


def test_the_readme_is_the_front_page():
    text = README.read_text()
    assert len(text.splitlines()) < 250
    linked = set(re.findall(r"\]\((docs/[\w./-]+\.md)\)", text))
    assert {f"docs/{p.name}" for p in pages()[1:]} - {"docs/index.md"} <= linked
    for link in linked:
        assert (ROOT / link).is_file(), link


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_make_docs_serves_the_site_on_localhost_only(tmp_path):
    """``make docs``'s command, on a light copy of the site (the full build is checked above)."""
    makefile = (ROOT / "Makefile").read_text()
    (serve,) = [line for line in makefile.splitlines() if "mkdocs serve" in line]
    assert "--dev-addr 127.0.0.1:$(DOCS_PORT)" in serve
    port = _free_port()
    server = subprocess.Popen(
        [*MKDOCS, "serve", "--strict", "--no-livereload", "--dev-addr", f"127.0.0.1:{port}"],
        cwd=_light_copy(tmp_path).parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/engine-api/", timeout=5) as r:
                    body = r.read().decode()
                break
            except OSError:
                assert server.poll() is None, server.stderr.read()[-3000:]
                assert time.monotonic() < deadline, "mkdocs serve did not answer in 120 s"
                time.sleep(0.5)
        assert "parse_size" in body
    finally:
        server.kill()
        server.wait(timeout=30)


def test_the_config_points_the_api_reference_at_the_import_layout():
    """mkdocstrings reads ``deltaplane.engine`` from the layout docs/hooks.py makes."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!", "#"))
    assert config["strict"] is True
    assert "docs/hooks.py" in config["hooks"]
    (plugin,) = [p for p in config["plugins"] if isinstance(p, dict) and "mkdocstrings" in p]
    assert plugin["mkdocstrings"]["handlers"]["python"]["paths"] == ["build/docs-src"]


def _config_keys(model, prefix: str = "") -> set[str]:
    """Every key of the tables file, dotted (``tables.<name>.ingest.format`` is ``ingest.format``)."""
    import typing

    from pydantic import BaseModel

    keys = set()
    for name, field in model.model_fields.items():
        key = prefix + (field.alias or name)
        keys.add(key)
        for kind in (field.annotation, *typing.get_args(field.annotation)):
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                keys |= _config_keys(kind, key + ".")
    return keys


def test_the_configuration_reference_names_every_key_of_the_tables_file():
    from deltaplane.operators.factory.config import MaintenanceSection, TableConfig

    page = (ROOT / "docs" / "configuration.md").read_text()
    documented = set(re.findall(r"^\| `([\w\[\].]+)` \|", page, re.M))
    leaves = {k.rsplit(".", 1)[-1] for k in _config_keys(TableConfig) | _config_keys(MaintenanceSection)}
    missing = sorted(k for k in leaves if k not in documented and f"expectations[].{k}" not in documented)
    assert not missing, f"tables.yaml keys the configuration reference does not document: {missing}"
    sections = re.findall(r"^## `([^`]+)`", page, re.M)
    for section in ("schedules", "auto_optimize", "ingest", "quality", "consumer"):
        assert f"tables.<name>.{section}" in sections, section
