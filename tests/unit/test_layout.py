"""The test tree mirrors the code: every folder under tests/unit/ names a package or module of the checkout.

``tests/unit/<path>/`` stands for ``mtrl/<path>`` (a package or a ``.py`` module) or for ``<path>`` at the checkout's
top (``lambda/<function>``, ``environments/<env>``, ``stacks``, ``docs``, ``benchmarks``). pytest imports test files
by base name (the folders have no ``__init__.py``), so a name used twice breaks collection: names are unique.
"""

from __future__ import annotations

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
    assert _mirrors_code(Path("demo"))  # mtrl/demo.py


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
