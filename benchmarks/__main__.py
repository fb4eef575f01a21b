"""Run every ``benchmarks/bench_*.py`` module's ``main()`` (or only those named on the command line)."""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    names = sorted(path.stem for path in Path(__file__).parent.glob("bench_*.py"))
    selected = [name for name in names if not argv or any(arg in name for arg in argv)]
    if not selected:
        print(f"no benchmark matches {argv}; available: {', '.join(names) or 'none'}")
        return 1
    for name in selected:
        print(f"== {name}", flush=True)
        started = time.perf_counter()
        module = importlib.import_module(f"benchmarks.{name}")
        module.main()
        print(f"   ({time.perf_counter() - started:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
