"""Dataset validation throughput and memory on a generated ~1 GB JSONL (the pipeline's Validate step).

Targets: >= 50 MB/s on one core, peak RSS <= 256 MB (fits a Lambda with room to spare). The file is
generated into a temporary directory and deleted afterwards; validation runs in a child process so its
peak RSS is measured alone (imports included). ``MTRL_BENCH_VALIDATION_MB`` changes the size.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_MB_PER_S = 50.0
TARGET_PEAK_MB = 256.0
ANSWERS = ["crane", "slate", "pious", "mango", "vivid", "bread", "plumb", "quart", "beach", "chair"]
SYSTEM = (
    "You are playing Wordle. Guess the hidden five-letter English word in at most six guesses. After each "
    "guess you receive feedback for every letter: G means the letter is in the right place, Y means the "
    "letter is in the word but elsewhere, X means the letter is not in the word. Think step by step, keep "
    "track of the letters you have ruled out, and answer with a single lowercase five-letter word. "
) * 2

_CHILD = """
import json, sys, time
from pathlib import Path
from mtrl.validation import validate_file
started = time.perf_counter()
report, _ = validate_file(Path(sys.argv[1]), environment="wordle", eval_split=float(sys.argv[2]))
print(json.dumps({"seconds": time.perf_counter() - started, "rows": report.rows, "valid": report.valid,
                  "errors": report.error_count}))
"""


def generate(path: Path, target_bytes: int) -> int:
    """Write realistic rows (~1.3 KB: system + user message, answer, task, info) until ``target_bytes``."""
    written = 0
    index = 0
    with path.open("w", encoding="utf-8") as out:
        while written < target_bytes:
            lines = []
            for _ in range(1000):
                row = {
                    "id": f"wordle-{index:09d}",
                    "metadata": {
                        "prompt": [
                            {"role": "system", "content": SYSTEM},
                            {"role": "user", "content": f"Game {index}: make your first guess."},
                        ],
                        "answer": ANSWERS[index % len(ANSWERS)],
                        "task": "wordle",
                        "info": {"seed": index, "max_turns": 6},
                    },
                }
                lines.append(json.dumps(row, separators=(",", ":")))
                index += 1
            chunk = "\n".join(lines) + "\n"
            out.write(chunk)
            written += len(chunk.encode())
    return written


def _run(path: Path, eval_split: float) -> tuple[dict[str, float], float, float]:
    """(child's result, its peak RSS in MB, its CPU seconds) — CPU time makes the rate robust to a busy host."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    before, cpu_before = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
    output = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(eval_split)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    ).stdout
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak_kb = max(before, usage.ru_maxrss)
    cpu = usage.ru_utime + usage.ru_stime - cpu_before
    return json.loads(output.strip().splitlines()[-1]), peak_kb / 1024, cpu


def main() -> None:
    size_mb = int(os.environ.get("MTRL_BENCH_VALIDATION_MB", "1024"))
    with tempfile.TemporaryDirectory(prefix="mtrl-bench-") as directory:
        path = Path(directory) / "bench.jsonl"
        started = time.perf_counter()
        size = generate(path, size_mb * 1024 * 1024)
        print(f"   generated {size / 1e6:.0f} MB in {time.perf_counter() - started:.1f} s", flush=True)
        for label, split in (("schema + wordle checks", 0.0), ("... + 10% eval split overlap check", 0.1)):
            result, peak_mb, cpu_seconds = _run(path, split)
            wall_rate = size / 1e6 / result["seconds"]
            rate = size / 1e6 / cpu_seconds  # per second of one core's time (includes interpreter start-up)
            ok_rate = "ok" if rate >= TARGET_MB_PER_S else "BELOW TARGET"
            ok_mem = "ok" if peak_mb <= TARGET_PEAK_MB else "ABOVE TARGET"
            print(
                f"   {label}: {int(result['rows'])} rows, valid={result['valid']}: "
                f"{rate:.0f} MB per CPU-second (target >= {TARGET_MB_PER_S:.0f}: {ok_rate}; "
                f"wall {wall_rate:.0f} MB/s), "
                f"peak RSS {peak_mb:.0f} MB (target <= {TARGET_PEAK_MB:.0f}: {ok_mem})",
                flush=True,
            )


if __name__ == "__main__":
    main()
