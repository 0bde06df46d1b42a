"""The shell and text blocks of README.md and the docs site agree with the code: every ``make``
target exists, every Spark job command line parses with that job's own parser, every flag of a
CLI line is a flag of that verb, and the layout names folders that exist. Lines are checked by
what they start with, whatever page or block holds them. (The Python blocks are run:
tests/engine/test_readme_snippets.py, tests/spark/test_readme_spark.py,
tests/operators/test_readme.py.)"""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

from deltaplane.engine.cli import build_parser
from tests.readme import blocks

ROOT = Path(__file__).resolve().parents[2]


def _sh_lines(start: str) -> list[str]:
    """Every command line of every shell block that starts with ``start`` (continuations joined,
    comments dropped)."""
    lines = []
    for block in blocks():
        if block.language == "sh":
            text = block.source.replace("\\\n", " ")
            lines += [line.split("  #")[0].strip() for line in text.splitlines() if line.strip()]
    return [line for line in lines if line.startswith(start)]


def test_every_block_is_known():
    """Each block is Python (run), shell (checked below), a tables file (YAML, validated below) or
    text (the demo's output, the layout); each shell line is one of the kinds checked below."""
    for block in blocks():
        assert block.language in ("python", "sh", "yaml", ""), block
    kinds = ("make ", "python -m deltaplane.spark_jobs.", "deltaplane ", "pip install ")
    unchecked = [line for line in _sh_lines("") if not line.startswith(kinds)]
    assert not unchecked, f"shell lines no test checks: {unchecked}"


def test_pip_install_lines_name_real_extras_and_constraints_files():
    import tomllib

    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    lines = _sh_lines("pip install")
    assert lines
    for line in lines:
        words = shlex.split(line)
        (spec,) = [w for w in words if w.startswith("deltaplane[")]
        assert set(spec[len("deltaplane[") : -1].split(",")) <= extras, line
        constraints = words[words.index("-c") + 1]
        assert (ROOT / constraints).is_file(), f"{line}: no file {constraints}"


def test_make_targets_exist():
    makefile = (ROOT / "Makefile").read_text()
    lines = _sh_lines("make ")
    assert lines
    for line in lines:
        target = line.split()[1]
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"make {target}: no such target"


def test_spark_job_command_lines_parse():
    lines = _sh_lines("python -m deltaplane.spark_jobs.")
    assert len(lines) >= 5
    for line in lines:
        words = shlex.split(line)
        assert words[:2] == ["python", "-m"], line
        module = importlib.import_module(words[2])
        module.build_parser().parse_args(words[3:])  # exits (a test failure) on a flag it lacks


def test_cli_synopsis_flags_exist():
    parser = build_parser()
    verbs = {
        a.dest: a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"
    }  # one subparsers action
    (subparsers,) = verbs.values()
    lines = _sh_lines("deltaplane ")
    assert len(lines) >= 10
    for line in lines:
        words = line.split()
        if words[1].startswith("--"):
            assert words[1] in parser.format_help(), line
            continue
        verb = subparsers.choices.get(words[1])
        assert verb is not None, f"{line}: no verb {words[1]}"
        nested = [a for a in verb._actions if a.__class__.__name__ == "_SubParsersAction"]
        if nested and len(words) > 2:  # a verb with verbs of its own (`config validate`)
            verb = nested[0].choices.get(words[2])
            assert verb is not None, f"{line}: no verb {words[1]} {words[2]}"
        known = verb.format_help()
        for flag in re.findall(r"--[a-z][a-z-]*", line):
            assert flag in known, f"{line}: {words[1]} has no {flag}"


def test_layout_names_existing_folders():
    (layout,) = [b for b in blocks() if b.language == "" and "tests/" in b.source and "docs/" in b.source]
    named = set()
    for line in layout.source.splitlines():
        for name in re.findall(r"(?:^|,\s*)([\w.-]+/)", line.split("  ")[0]):
            assert (ROOT / name).is_dir(), f"README layout names {name}, which does not exist"
            named.add(name)
    packages = {f"{p.parent.name}/" for p in ROOT.glob("*/__init__.py")} - {"tests/"}
    assert packages <= named, f"the README's layout misses {sorted(packages - named)}"


def test_yaml_blocks_are_valid_tables_files(tmp_path):
    """A tables file the README shows is one `deltaplane config validate` accepts as written."""
    from deltaplane.operators.factory.config import read_config

    yaml_blocks = [b for b in blocks() if b.language == "yaml"]
    assert yaml_blocks
    for i, block in enumerate(yaml_blocks):
        path = tmp_path / f"tables{i}.yaml"
        path.write_text(block.source)
        report = read_config(path)
        assert not report.errors and report.config.tables, (str(block), report.errors)
