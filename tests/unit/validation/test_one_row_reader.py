"""JSONL rows are parsed in one place: ``mtrl.validation.rows``. This scans the source tree for a JSON parse applied
line by line (``json.loads`` or a JSON decoder's ``decode`` inside a loop over lines) anywhere else."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCANNED = ("mtrl", "lambda", "environments", "stacks")
READER = "mtrl/validation/rows.py"
# JSONL that is not dataset rows, read below the validation layer (which they may not import).
OTHER_FORMATS = {
    "mtrl/health/signals.py": "the signal log: a header line, then rows; a torn last line is a write in progress",
    "mtrl/envs/tools.py": "a tool's replay fixture of {arguments, response} records",
}
# A loop over lines: its variable is named for a line, or its lines come from ``text.splitlines()``,
# ``text.split("\n")``, a stream's lines, an opened file.
LINE_METHODS = {"splitlines", "readlines", "iter_lines"}
LINE_FUNCTIONS = {"iter_s3_lines", "iter_lines"}


def _is_json_parse(call: ast.Call) -> bool:
    """``json.loads(...)``, ``loads(...)``, ``json.load(...)``, ``msgspec.json.decode(...)``, ``*DECODER.decode``."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id == "loads"
    if not isinstance(func, ast.Attribute):
        return False
    owner = ast.unparse(func.value)
    if func.attr in {"loads", "load"}:
        return owner.split(".")[-1] == "json"
    return func.attr in {"decode", "raw_decode"} and (owner.endswith("json") or owner.lower().endswith("decoder"))


class _LineLoops(ast.NodeVisitor):
    """Finds JSON parses inside loops over lines; ``line_names`` are names bound to lines in the current function."""

    def __init__(self) -> None:
        self.found: list[int] = []
        self.line_names: set[str] = set()

    def _is_lines(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name | ast.Attribute):
            return (isinstance(node, ast.Name) and node.id in self.line_names) or ast.unparse(node).endswith("stdin")
        if isinstance(node, ast.GeneratorExp | ast.ListComp):
            return any(self._is_lines(generator.iter) for generator in node.generators)
        if not isinstance(node, ast.Call):
            return False
        func, arguments = node.func, node.args
        if isinstance(func, ast.Name):
            wraps = func.id in {"enumerate", "reversed", "iter", "list", "filter"}
            return func.id in LINE_FUNCTIONS or (wraps and any(self._is_lines(argument) for argument in arguments))
        splits = isinstance(func, ast.Attribute) and func.attr == "split" and arguments
        if splits and isinstance(arguments[0], ast.Constant):
            return arguments[0].value in {"\n", b"\n"}
        return isinstance(func, ast.Attribute) and func.attr in LINE_METHODS

    def _bound_names(self, target: ast.expr) -> set[str]:
        return {node.id for node in ast.walk(target) if isinstance(node, ast.Name)}

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer, self.line_names = self.line_names, set()
        self.generic_visit(node)
        self.line_names = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Assign(self, node: ast.Assign) -> None:
        if self._is_lines(node.value):
            for target in node.targets:
                self.line_names |= self._bound_names(target)
        self.generic_visit(node)

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:  # ``with path.open() as handle``: iterating the handle gives its lines
            call = item.context_expr
            opens = isinstance(call, ast.Call) and ast.unparse(call.func).split(".")[-1] == "open"
            if opens and item.optional_vars is not None:
                self.line_names |= self._bound_names(item.optional_vars)
        self.generic_visit(node)

    visit_AsyncWith = visit_With

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        if self._is_lines(node.iter) or any("line" in name for name in self._bound_names(node.target)):
            self._parses_in([*node.body, *node.orelse])
        self.generic_visit(node)

    visit_AsyncFor = visit_For

    def _visit_comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> None:
        if any(
            self._is_lines(generator.iter) or any("line" in name for name in self._bound_names(generator.target))
            for generator in node.generators
        ):
            self._parses_in([node])
        self.generic_visit(node)

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _visit_comprehension

    def _parses_in(self, nodes: Sequence[ast.AST]) -> None:
        for root in nodes:
            self.found += [n.lineno for n in ast.walk(root) if isinstance(n, ast.Call) and _is_json_parse(n)]


def line_parses(source: str) -> list[int]:
    """Line numbers of JSON parses applied line by line in ``source`` (a module's text)."""
    finder = _LineLoops()
    finder.visit(ast.parse(source))
    return sorted(set(finder.found))


def test_jsonl_rows_are_parsed_only_by_the_one_reader() -> None:
    offenders = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative == READER or relative in OTHER_FORMATS:
                continue
            offenders += [f"{relative}:{line}" for line in line_parses(path.read_text(encoding="utf-8"))]
    assert not offenders, (
        "JSONL parsed line by line outside mtrl.validation.rows (use iter_rows and RowError): " + ", ".join(offenders)
    )


def test_the_exempt_formats_still_parse_their_own_lines() -> None:
    """An exemption that no longer matches anything goes (so the list cannot hide a dataset reader added later)."""
    for relative in [READER, *OTHER_FORMATS]:
        assert line_parses((ROOT / relative).read_text(encoding="utf-8")), relative


def test_the_scan_recognises_the_readers_it_replaced() -> None:
    readers = [
        "def f(text):\n    for line in text.splitlines():\n        row = json.loads(line) if line.strip() else None\n",
        "def f(lines):\n    for i, line in enumerate(line for line in lines.splitlines() if line.strip()):\n"
        "        json.loads(line)\n",
        "def f(s3, uri):\n    for number, raw in enumerate(iter_s3_lines(s3, uri), start=1):\n"
        "        json.loads(raw)\n",
        "def f(text):\n    lines = text.split('\\n')\n    for line in lines:\n        FAST_DECODER.decode(line)\n",
        "def f(path):\n    with path.open() as handle:\n        return [json.loads(line) for line in handle]\n",
        "def f(body):\n    return [msgspec.json.decode(line) for line in body.iter_lines()]\n",
    ]
    for reader in readers:
        assert line_parses(reader), reader
    not_readers = [
        "def f(lines):\n    for line in text.splitlines():\n        print(line)\n",
        "def f(prompts):\n    return [json.loads(prompt) for prompt in prompts]\n",
        "def f(body):\n    for line in body.decode('utf-8').splitlines():\n        line.split()\n",
    ]
    for source in not_readers:
        assert not line_parses(source), source
