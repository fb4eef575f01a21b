"""The suite's file order (tests/durations.py): slowest files first, each file's tests together and in order."""

from __future__ import annotations

from pathlib import Path

from tests.durations import TABLE, UNMEASURED_SECONDS, load_table, slowest_first, table_from_junit

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_slowest_file_goes_first_and_keeps_its_tests_in_order() -> None:
    ids = ["tests/a.py::one", "tests/b.py::one", "tests/a.py::two", "tests/c.py::one", "tests/b.py::two"]
    order = [ids[index] for index in slowest_first(ids, {"tests/b.py": 30.0, "tests/a.py": 2.0})]
    assert order == ["tests/b.py::one", "tests/b.py::two", "tests/a.py::one", "tests/a.py::two", "tests/c.py::one"]


def test_unmeasured_files_count_as_the_default_and_ties_keep_the_collection_order() -> None:
    ids = ["tests/new.py::x", "tests/fast.py::x", "tests/old.py::x"]
    table = {"tests/fast.py": UNMEASURED_SECONDS / 2, "tests/old.py": UNMEASURED_SECONDS}
    order = [ids[index] for index in slowest_first(ids, table)]
    assert order == ["tests/new.py::x", "tests/old.py::x", "tests/fast.py::x"]


def test_a_junit_report_becomes_seconds_per_file(tmp_path: Path) -> None:
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "tests" / "unit" / "test_x.py").write_text("")
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.unit.test_x" name="test_a" time="1.25"/>'
        '<testcase classname="tests.unit.test_x.TestGroup" name="test_b" time="2.5"/>'
        '<testcase classname="tests.unit.gone" name="test_c" time="9"/>'
        "</testsuite></testsuites>"
    )
    assert table_from_junit(report, tmp_path) == {"tests/unit/test_x.py": 3.8}


def test_the_committed_table_names_only_files_that_exist() -> None:
    # A renamed file would silently fall back to the default weight; `make durations` re-measures the table.
    table = load_table(TABLE)
    assert len(table) > 100
    assert [name for name in table if not (REPO_ROOT / name).is_file()] == []
