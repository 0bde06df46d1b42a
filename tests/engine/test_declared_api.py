"""The engine's declared API (``deltaplane.engine.api``): every promised name resolves, none is
shadowed by a module, the light ones stay light, and nothing above the engine reaches past it."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import deltaplane.engine as engine
from deltaplane.engine.api import EXPORTS, GROUPS

ROOT = Path(__file__).resolve().parents[2]
PLATFORM = ("operators", "spark_jobs", "devstack", "dags")


def engine_modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(engine.__path__, "deltaplane.engine.")]


def test_every_declared_name_is_defined_once_where_the_declaration_says():
    declared = [name for _, _, names in GROUPS for name in names]
    assert len(declared) == len(set(declared)), sorted({n for n in declared if declared.count(n) > 1})
    for name, module in EXPORTS.items():
        defining = importlib.import_module(f"deltaplane.engine.{module}")
        assert name in vars(defining), f"{name} is not defined in deltaplane.engine.{module}"
        assert getattr(engine, name) is vars(defining)[name], name
    assert set(engine.__all__) == {*EXPORTS, "__version__"}
    assert engine.__version__ == engine.ENGINE_VERSION
    with pytest.raises(AttributeError, match="no attribute 'scan_internals'"):
        engine.scan_internals  # noqa: B018


def test_no_declared_name_is_also_a_module_name():
    """Loading ``deltaplane.engine.x`` sets the package's attribute ``x`` to that module: a public
    name ``x`` would turn into the module once anything imported it."""
    modules = {m.rsplit(".", 1)[1] for m in engine_modules()} | {
        m.split(".")[2] for m in engine_modules() if m.count(".") > 2
    }
    assert not set(EXPORTS) & modules


def test_names_stay_the_promised_objects_after_every_engine_module_is_loaded():
    script = (
        "import importlib, pkgutil\n"
        "import deltaplane.engine as engine\n"
        "from deltaplane.engine.api import EXPORTS\n"
        "for m in pkgutil.walk_packages(engine.__path__, 'deltaplane.engine.'):\n"
        "    if not m.name.endswith(('.cli', '.demo')): importlib.import_module(m.name)\n"
        "for name, module in EXPORTS.items():\n"
        "    defined = vars(importlib.import_module('deltaplane.engine.' + module))\n"
        "    assert getattr(engine, name) is defined[name], name\n"
        "from deltaplane.engine import write_table\n"
        "assert callable(write_table) and write_table.__name__ == 'write_table'\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


@pytest.mark.parametrize("name", ["parse_size", "InvalidArgumentError", "CommitFilter", "check_start"])
def test_a_light_name_does_not_load_arrow(name):
    """A DAG file naming a size, an error or a commit filter parses without Arrow."""
    script = (
        f"from deltaplane.engine import {name}\n"
        "import sys\n"
        "print(sorted(m for m in sys.modules if m.startswith('pyarrow')))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def platform_engine_imports() -> list[str]:
    """Every import of an engine module below ``deltaplane.engine`` in the layers above it,
    including imports inside functions (the import-linter contract checks the same edge)."""
    found = []
    for folder in PLATFORM:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom):
                    modules = [node.module or ""]
                    if node.module == "deltaplane.engine":
                        modules = [f"deltaplane.engine.{a.name}" for a in node.names if a.name not in EXPORTS]
                elif isinstance(node, ast.Import):
                    modules = [a.name for a in node.names]
                else:
                    continue
                found += [
                    f"{path.relative_to(ROOT)}:{node.lineno} {m}"
                    for m in modules
                    if m.startswith("deltaplane.engine.")
                ]
    return found


def test_nothing_above_the_engine_imports_below_its_api():
    assert platform_engine_imports() == []


def test_the_check_sees_an_import_inside_a_function(tmp_path, monkeypatch):
    """The scan above must be able to fail: a lazy import of an engine module is found."""
    (tmp_path / "operators").mkdir()
    (tmp_path / "operators" / "x.py").write_text(
        "def f():\n    from deltaplane.engine.scan import Scan\n    from deltaplane.engine import errors\n"
    )
    for folder in PLATFORM[1:]:
        (tmp_path / folder).mkdir()
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert platform_engine_imports() == [
        "operators/x.py:2 deltaplane.engine.scan",
        "operators/x.py:3 deltaplane.engine.errors",
    ]


def test_the_whole_api_loads_without_pandas_or_arrow_datasets():
    """Every declared name loads without pandas and ``pyarrow.dataset`` (which imports pandas
    when it is installed: 0.3 s of a 0.4 s start); those load when a call needs them."""
    script = (
        "import sys\n"
        "import deltaplane.engine as engine\n"
        "for name in engine.__all__:\n"
        "    getattr(engine, name)\n"
        "print(sorted(m for m in ('pandas', 'pyarrow.dataset', 'great_expectations') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
