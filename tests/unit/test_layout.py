"""The test tree mirrors the code: every folder under tests/unit/ names a package or module of the checkout.

``tests/unit/<path>/`` stands for ``mtrl/<path>`` (a package or a ``.py`` module) or for ``<path>`` at the checkout's
top (``lambda/<function>``, ``environments/<env>``, ``stacks``, ``docs``, ``benchmarks``). pytest imports test files
by base name (the folders have no ``__init__.py``), so a name used twice breaks collection: names are unique.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "tests" / "unit"
SUPPORT_FOLDERS = {"data", "__pycache__"}  # fixtures read by the tests beside them
# Test-only packages that stand for code a user writes, not for code of the checkout.
STAND_INS = {Path("backends/toy")}  # a platform team's own backend, registered by test_toy_backend.py


def _test_folders() -> list[Path]:
    return sorted(
        p
        for p in UNIT.rglob("*")
        if p.is_dir()
        and not SUPPORT_FOLDERS & set(p.relative_to(UNIT).parts)
        and not any(p.relative_to(UNIT).is_relative_to(stand_in) for stand_in in STAND_INS)
    )


def _mirrors_code(relative: Path) -> bool:
    package = REPO / "mtrl" / relative
    return package.is_dir() or package.with_suffix(".py").is_file() or (REPO / relative).exists()


def test_every_unit_test_folder_names_code_of_the_checkout() -> None:
    strays = [
        str(folder.relative_to(UNIT)) for folder in _test_folders() if not _mirrors_code(folder.relative_to(UNIT))
    ]
    assert strays == [], f"tests/unit folders that mirror no package or module: {strays}"


def test_the_rule_refuses_a_folder_named_after_a_feature() -> None:
    assert not _mirrors_code(Path("pipeline"))  # the old home of the runs tests: there is no mtrl/pipeline
    assert _mirrors_code(Path("backends/verl"))
    assert _mirrors_code(Path("lambda/serverless_agent"))
    assert _mirrors_code(Path("cli/demo"))  # mtrl/cli/demo/


# Tests of runtime code that also read the synthesized template the code runs under (not stack tests).
READS_A_TEMPLATE = {
    "tests/unit/runs/test_capacity_guard.py",  # the guard against the slot table and its function
    "tests/unit/test_layout.py",  # this file names the call
}


def test_every_stack_test_is_under_one_folder() -> None:
    outside = [
        str(path.relative_to(REPO))
        for path in (REPO / "tests").rglob("test_*.py")
        if not path.is_relative_to(UNIT / "stacks")
        and "Template.from_stack" in path.read_text(encoding="utf-8")
        and str(path.relative_to(REPO)) not in READS_A_TEMPLATE
    ]
    assert outside == [], f"stack tests outside tests/unit/stacks/: {outside}"


def test_test_file_names_are_unique() -> None:
    names = Counter(path.name for path in (REPO / "tests").rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []


# -- module size --------------------------------------------------------------------------------------------------

MAX_MODULE_LINES = 600
SOURCE_TREES = ("mtrl", "stacks", "lambda", "environments", "custom-environments", "benchmarks", "tests")


def _python_modules() -> list[Path]:
    modules = list(REPO.glob("*.py"))
    for tree in SOURCE_TREES:
        modules += [
            path
            for path in (REPO / tree).rglob("*.py")
            # built or cached copies (node_modules, __pycache__, a cdk.out) are not the checkout's code
            if not {"node_modules", "__pycache__"} & set(path.parts) and not path.parent.name.startswith("cdk.out")
        ]
    return sorted(modules)


def test_no_module_is_over_600_lines() -> None:
    too_long = {
        str(path.relative_to(REPO)): lines
        for path in _python_modules()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert too_long == {}, f"modules over {MAX_MODULE_LINES} lines (split them along what they do): {too_long}"


# -- the commands' tests ------------------------------------------------------------------------------------------

CLI = UNIT / "cli"


def _cli_modules_imported(source: str) -> set[str]:
    """The modules of ``mtrl.cli`` a test file imports (``from mtrl.cli import env_try`` counts as ``env_try``)."""
    imported: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "mtrl.cli":
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mtrl.cli."):
            imported.add(node.module.removeprefix("mtrl.cli.").split(".")[0])
        elif isinstance(node, ast.Import):
            imported.update(
                alias.name.removeprefix("mtrl.cli.").split(".")[0]
                for alias in node.names
                if alias.name.startswith("mtrl.cli.")
            )
    return imported


def _tests_a_command(path: Path) -> bool:
    """Named as a command's test (``test_<x>_cli.py``, ``test_<x>_cmd.py``), or named after a command module of
    mtrl/cli that it imports (tests/unit/client/test_run_cost.py tests ``mtrl.client.runs.run_cost``: no CLI test)."""
    name = path.stem.removeprefix("test_")
    if name.endswith(("_cli", "_cmd")):
        return True
    return (REPO / "mtrl" / "cli" / f"{name}.py").is_file() and name in _cli_modules_imported(path.read_text("utf-8"))


def test_the_commands_tests_are_under_tests_unit_cli() -> None:
    strays = [
        str(path.relative_to(REPO))
        for path in UNIT.rglob("test_*.py")
        if not path.is_relative_to(CLI) and _tests_a_command(path)
    ]
    assert strays == [], f"CLI command tests outside tests/unit/cli/ (name them after the command module): {strays}"


def test_the_rule_finds_a_command_test_by_its_name_or_by_the_command_module_it_imports(tmp_path: Path) -> None:
    named = tmp_path / "test_health_cli.py"
    named.write_text("")
    importing = tmp_path / "test_env_try.py"
    importing.write_text("from mtrl.cli import env_try\n")
    same_name_other_code = tmp_path / "test_run_cost.py"
    same_name_other_code.write_text("from mtrl.client.runs import run_cost\n")
    assert _tests_a_command(named)
    assert _tests_a_command(importing)
    assert not _tests_a_command(same_name_other_code)
