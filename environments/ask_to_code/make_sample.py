"""Write ``sample/train.jsonl`` and ``sample/eval.jsonl``: every task once, a fixed disjoint split."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from environments.ask_to_code.tasks import TASKS

HERE = Path(__file__).resolve().parent
EVAL_EVERY = 5  # every fifth task (by bank order) is held out for evaluation


def sample_files() -> dict[str, str]:
    splits: dict[str, list[str]] = {"train": [], "eval": []}
    for index, task in enumerate(TASKS):
        split = "eval" if index % EVAL_EVERY == EVAL_EVERY - 1 else "train"
        row = {
            "id": f"ask_to_code_{split}_{task.task_id}",
            "metadata": {"prompt": task.prompt, "info": {"task_id": task.task_id}},
        }
        splits[split].append(json.dumps(row, sort_keys=True) + "\n")
    return {f"{split}.jsonl": "".join(rows) for split, rows in splits.items()}


def main() -> int:
    (HERE / "sample").mkdir(exist_ok=True)
    for name, text in sample_files().items():
        (HERE / "sample" / name).write_text(text, encoding="utf-8")
        print(f"sample/{name}: {text.count(chr(10))} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
