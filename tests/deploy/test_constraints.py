"""The published constraints files (``constraints/constraints-<X.Y>.txt``) are what ``make``
installs and what the suite runs with: they agree with every pin of pyproject.toml, the running
virtualenv holds exactly the file of its Python, and ``make`` installs with it."""

from __future__ import annotations

import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ("3.11", "3.12", "3.13")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep, f"{path.name}: {line!r} is not name==version"
        out[_norm(name)] = version.strip()
    return out


def _project_pins() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = [
        *project["dependencies"],
        *(s for extra in project["optional-dependencies"].values() for s in extra),
    ]
    out = {}
    for spec in specs:
        name, sep, version = spec.partition("==")
        assert sep, f"pyproject.toml: {spec!r} is not pinned"
        out[_norm(re.split(r"\[", name)[0])] = version.strip()
    return out


@pytest.mark.parametrize("version", PUBLISHED)
def test_each_published_file_holds_every_pin_of_pyproject(version):
    path = ROOT / "constraints" / f"constraints-{version}.txt"
    assert path.is_file(), f"no constraints file for Python {version}: run `make constraints`"
    pins = _pins(path)
    assert "deltaplane" not in pins
    wrong = {
        name: (version_, pins.get(name))
        for name, version_ in _project_pins().items()
        if pins.get(name) != version_
    }
    assert not wrong, (
        f"{path.name} disagrees with pyproject.toml (wanted, found): {wrong}; run `make constraints`"
    )


def test_the_running_virtualenv_is_its_constraints_file():
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    pins = _pins(ROOT / "constraints" / f"constraints-{version}.txt")
    installed = {_norm(d.metadata["Name"]): d.version for d in md.distributions()}
    installed.pop("deltaplane", None)
    for tool in ("pip", "setuptools", "wheel"):  # the installer's own, not the project's
        installed.pop(tool, None)
        pins.pop(tool, None)
    extra = {n: v for n, v in installed.items() if n not in pins}
    differing = {n: (pins[n], v) for n, v in installed.items() if n in pins and pins[n] != v}
    assert not differing, (
        f"installed versions differ from the constraints file (pinned, installed): {differing}"
    )
    assert not extra, f"installed but not in the constraints file: {extra}"


def test_make_installs_with_the_constraints_file_of_its_python():
    makefile = (ROOT / "Makefile").read_text()
    install = [line for line in makefile.splitlines() if "pip install" in line and "-e '." in line]
    assert install and all("-c $(CONSTRAINTS)" in line for line in install), install
    assert "CONSTRAINTS := constraints/constraints-$(PYVER).txt" in makefile
    assert re.search(r"^\$\(STAMP\): pyproject\.toml .*\$\(CONSTRAINTS\)$", makefile, re.M)
