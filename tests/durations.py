"""The order the suite runs its files in: the slowest first, from a table of measured seconds per file.

pytest-xdist hands whole files (``--dist loadfile``) to whichever worker is free, in collection order; by default it
first sorts them by their number of tests, which put the slowest files (a few long end-to-end tests each) last, with
one worker finishing them alone. Longest first is the classic greedy bound for this. The table is
``tests/durations.json`` (``make durations`` re-measures it); a file missing from it counts as ``UNMEASURED_SECONDS``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from xml.etree import ElementTree

TABLE = Path(__file__).with_name("durations.json")
UNMEASURED_SECONDS = 1.0


def load_table(path: Path = TABLE) -> dict[str, float]:
    if not path.is_file():
        return {}
    return {str(name): float(seconds) for name, seconds in json.loads(path.read_text()).items()}


def slowest_first(nodeids: Iterable[str], table: Mapping[str, float]) -> list[int]:
    """Indices of ``nodeids`` ordered by their file's seconds, slowest file first; a file's tests keep their order
    and stay together (ties keep the collection order)."""
    ids = list(nodeids)
    first_seen: dict[str, int] = {}
    for index, nodeid in enumerate(ids):
        first_seen.setdefault(_file_of(nodeid), index)

    def key(index: int) -> tuple[float, int, int]:
        name = _file_of(ids[index])
        return (-table.get(name, UNMEASURED_SECONDS), first_seen[name], index)

    return sorted(range(len(ids)), key=key)


def table_from_junit(junit_xml: Path, repo_root: Path) -> dict[str, float]:
    """Seconds per test file from a pytest ``--junitxml`` report (each test case's time: set-up, call, tear-down)."""
    totals: dict[str, float] = {}
    for case in ElementTree.parse(junit_xml).iter("testcase"):
        name = _file_of_classname(case.get("classname", ""), repo_root)
        if name is not None:
            totals[name] = totals.get(name, 0.0) + float(case.get("time", "0"))
    return {name: round(seconds, 1) for name, seconds in sorted(totals.items(), key=lambda item: (-item[1], item[0]))}


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _file_of_classname(classname: str, repo_root: Path) -> str | None:
    # junit names a test by its module's dotted path, then any class: the longest prefix that is a file is the file.
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        candidate = Path(*parts[:end]).with_suffix(".py")
        if (repo_root / candidate).is_file():
            return candidate.as_posix()
    return None


if __name__ == "__main__":
    import sys

    report, root = Path(sys.argv[1]), Path(__file__).resolve().parents[1]
    TABLE.write_text(json.dumps(table_from_junit(report, root), indent=1) + "\n")
    print(f"{TABLE.relative_to(root)}: {len(load_table())} files")
