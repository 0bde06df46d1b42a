"""The engine's shape: no module over 800 lines, and no function over 80 lines without a reason
in its docstring ("Long because ..."), so a long function is a decision someone wrote down."""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "engine"
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80


def long_modules(root: Path) -> list[str]:
    return [
        f"{p.relative_to(root)}: {n} lines"
        for p in sorted(root.rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    ]


def unexplained_long_functions(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES and "Long because" not in (ast.get_docstring(node) or ""):
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name}: {lines} lines")
    return found


def test_no_engine_module_is_over_800_lines():
    assert long_modules(ENGINE) == []


def test_no_engine_function_is_over_80_lines_without_a_reason():
    assert unexplained_long_functions(ENGINE) == []


def test_the_checks_can_fail(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "long.py").write_text(f'def f():\n    """Short."""\n{body}\n')
    (tmp_path / "explained.py").write_text(f'def g():\n    """Long because a reason."""\n{body}\n')
    (tmp_path / "big.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert unexplained_long_functions(tmp_path) == [f"long.py:1 f: {MAX_FUNCTION_LINES + 2} lines"]
    assert long_modules(tmp_path) == [f"big.py: {MAX_MODULE_LINES + 1} lines"]
