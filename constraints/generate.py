"""Write ``constraints/constraints-<X.Y>.txt``: every distribution that installing deltaplane with all
its extras resolves to on Python X.Y, as Airflow publishes its constraints files.

    python constraints/generate.py                      # the interpreter running this script
    python constraints/generate.py --python python3.12 --python /path/to/python3.13

Each interpreter gets a fresh virtualenv in a temporary folder and one unconstrained
``pip install '.[airflow,spark,quality,dev]'`` (the resolver's answer for that Python, with the
pins of pyproject.toml); ``pip freeze`` of it, without deltaplane itself, is the file. ``make``
installs with the file for its Python (``pip install ... -c constraints/constraints-3.11.txt``),
so a fresh checkout never waits for the resolver, and installs what the suite was run with.
Regenerate after changing a pin in pyproject.toml (tests/deploy/test_constraints.py fails until
the files agree with it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = "airflow,spark,quality,dev"


def python_version(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def generate(python: str) -> Path:
    version = python_version(python)
    target = ROOT / "constraints" / f"constraints-{version}.txt"
    with tempfile.TemporaryDirectory(prefix=f"deltaplane-constraints-{version}-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip"]
        subprocess.run([*pip, "install", "--quiet", "--upgrade", "pip>=24"], check=True)
        print(f"[constraints] resolving deltaplane[{EXTRAS}] on Python {version} ...", flush=True)
        subprocess.run([*pip, "install", "--quiet", f"{ROOT}[{EXTRAS}]"], check=True)
        frozen = subprocess.run(
            [*pip, "freeze", "--exclude", "deltaplane"], check=True, capture_output=True, text=True
        ).stdout
    lines = sorted((line for line in frozen.splitlines() if line.strip()), key=str.lower)
    header = [
        f"# deltaplane: what `pip install 'deltaplane[{EXTRAS}]'` resolves to on Python {version}",
        f"# (written by constraints/generate.py on {dt.date.today().isoformat()}). Install with",
        f"#   pip install 'deltaplane[airflow,spark,quality]' -c constraints/constraints-{version}.txt",
    ]
    target.write_text("\n".join([*header, *lines]) + "\n")
    print(f"[constraints] {target.relative_to(ROOT)}: {len(lines)} distributions", flush=True)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--python", action="append", help="an interpreter to resolve for (repeatable); default: this one"
    )
    args = parser.parse_args(argv)
    for python in args.python or [sys.executable]:
        generate(python)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
