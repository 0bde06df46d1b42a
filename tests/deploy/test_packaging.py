"""deltaplane installs as a real Airflow environment gets it: one ``deltaplane`` namespace beside a
team's own ``operators`` package, every third-party import declared, entry points that load."""

from __future__ import annotations

import ast
import importlib.metadata as md
import os
import re
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("engine", "operators", "spark_jobs", "devstack")


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = [*project["dependencies"]]
    for name, extra in project["optional-dependencies"].items():
        if name != "dev":
            specs += extra
    return {re.split(r"[<>=!~\[; ]", s, maxsplit=1)[0].lower().replace("_", "-") for s in specs}


def _imported_top_levels() -> dict[str, list[str]]:
    """Top-level module names the shipped code imports (anywhere, lazily included), by file."""
    found: dict[str, list[str]] = {}
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    found.setdefault(name.split(".")[0], []).append(str(path.relative_to(ROOT)))
    return found


def test_every_third_party_import_is_declared():
    distributions = md.packages_distributions()
    declared = _declared()
    missing = {}
    for top, files in sorted(_imported_top_levels().items()):
        if top in sys.stdlib_module_names or top == "deltaplane":
            continue
        owners = {d.lower().replace("_", "-") for d in distributions.get(top, [])}
        assert owners, f"{top} (imported by {files[0]}) is installed by no distribution"
        if not owners & declared:
            missing[top] = (sorted(owners), files[0])
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> tuple[Path, str]:
    """The wheel, and everything the build printed (``-v``: the build backend's own output, where
    setuptools writes its warnings)."""
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (built,) = out.glob("deltaplane-*.whl")
    return built, done.stdout + done.stderr


@pytest.fixture(scope="module")
def wheel(build) -> Path:
    return build[0]


def test_the_wheel_holds_one_namespace_and_the_templates(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"deltaplane", next(t for t in tops if t.endswith(".dist-info"))}, tops
    assert "deltaplane/__init__.py" not in names  # a namespace: other distributions may add to it
    for folder in FOLDERS:
        assert f"deltaplane/{folder}/__init__.py" in names
    assert any(re.fullmatch(r"deltaplane/operators/plugins/templates/\w+\.html", n) for n in names)
    assert not any(n.startswith(("tests/", "deltaplane/tests/")) for n in names)


def test_the_build_declares_what_it_ships_without_warnings(build):
    """Every package and every file of the ops view's templates/static folders is in the wheel,
    declared as such: setuptools prints no "Package would be ignored" warning (about 90 lines of
    them on every `make run` install otherwise)."""
    wheel, output = build
    assert "would be ignored" not in output, output[output.find("would be ignored") - 2000 :][:4000]
    assert "SetuptoolsDeprecationWarning" not in output
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            relative = path.relative_to(ROOT)
            if "__pycache__" in relative.parts or path.is_dir() or path.suffix == ".pyc":
                continue
            assert f"deltaplane/{relative.as_posix()}" in names, relative
    plugins = "deltaplane/operators/plugins/"
    for data in ("templates/base.html", "templates/table.html", "static/ops.js", "static/icon.svg"):
        assert plugins + data in names


def test_installed_beside_a_teams_own_operators_package(wheel, tmp_path):
    """Airflow puts dags/ and plugins/ on sys.path, where teams keep packages named
    ``operators`` or ``engine``; both theirs and ours import, and the entry points load."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True
        ).strip()
    )
    zipfile.ZipFile(wheel).extractall(site)  # a pure wheel installs by unpacking
    # The dependencies come from the test's environment (its site-packages as a plain path: the
    # editable install's finder there is not activated, so only the wheel provides deltaplane).
    deps = next(p for p in sys.path if p.endswith("site-packages") and Path(p, "pyarrow").is_dir())
    (site / "deps.pth").write_text(deps + "\n")
    dags = tmp_path / "dags"
    for own in ("operators", "engine", "spark_jobs"):
        (dags / own).mkdir(parents=True)
        (dags / own / "__init__.py").write_text(f"OWNER = 'team:{own}'\n")
    script = f"""
import importlib, importlib.metadata as md, json, sys
sys.path.insert(0, {str(dags)!r})  # as Airflow does with the dags folder
import operators, engine, spark_jobs
owners = (operators.OWNER, engine.OWNER, spark_jobs.OWNER)
assert owners == ("team:operators", "team:engine", "team:spark_jobs"), owners
import deltaplane.operators as dpo
from deltaplane.operators import DeltaCompactionOperator, DeltaHook, DeltaLogTailSensor
from deltaplane.engine import DeltaTable
import deltaplane.spark_jobs, deltaplane.devstack
assert dpo.__file__.startswith({str(site)!r}), dpo.__file__
(dist,) = [d for d in md.distributions() if d.metadata["Name"] == "deltaplane"][:1]
eps = {{(e.group, e.name): e for e in dist.entry_points}}
info = eps[("apache_airflow_provider", "provider_info")].load()()
for key in ("operators", "sensors", "triggers", "hooks"):
    for item in info[key]:
        for module in item["python-modules"]:
            importlib.import_module(module)
for conn in info["connection-types"]:
    module, _, name = conn["hook-class-name"].rpartition(".")
    getattr(importlib.import_module(module), name)
plugin = eps[("airflow.plugins", "deltaplane")].load()
cli = eps[("console_scripts", "deltaplane")].load()
print(json.dumps({{"plugin": plugin.__name__, "cli": cli.__module__, "engine": DeltaTable.__module__}}))
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["AIRFLOW_HOME"] = str(tmp_path / "airflow")
    done = subprocess.run(
        [python, "-c", script], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"engine": "deltaplane.engine.table"' in done.stdout
