"""Every function's handler only delegates (Lambda handlers are about ten lines each): its logic lives
in library code (``mtrl``, or the function's own package beside the handler) where it is tested and shared."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

LAMBDA_DIR = Path(__file__).resolve().parents[3] / "lambda"
HANDLERS = sorted(LAMBDA_DIR.glob("*/handler.py"))
MAX_CODE_LINES = 10


def _code_lines(path: Path) -> int:
    """Lines of the module that are neither blank nor its docstring."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    body = tree.body[1:] if tree.body and isinstance(tree.body[0], ast.Expr) else tree.body
    lines = path.read_text(encoding="utf-8").splitlines()
    return sum(
        1
        for statement in body
        for number in range(statement.lineno, (statement.end_lineno or statement.lineno) + 1)
        if lines[number - 1].strip()
    )


def test_every_function_has_a_handler() -> None:
    assert {path.parent.name for path in HANDLERS} == {
        path.name for path in LAMBDA_DIR.iterdir() if path.is_dir() and path.name != "__pycache__"
    }


@pytest.mark.parametrize("path", HANDLERS, ids=lambda path: path.parent.name)
def test_the_handler_only_delegates(path: Path) -> None:
    assert _code_lines(path) <= MAX_CODE_LINES
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defined = [node for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
    assert defined == [], f"{path}: logic belongs in library code, not the handler"
