"""Write the demo dataset ``sample/train.jsonl`` (200 rows) and ``sample/eval.jsonl`` (50 disjoint rows).

Deterministic: sorted answers shuffled with a fixed seed. Row format (Nova Forge multi-turn RFT):
``{"id": "wordle_train_0000", "metadata": {"prompt": "Guess the 5-letter word", "answer": "<word>"}}``.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 42
TRAIN_ROWS = 200
EVAL_ROWS = 50
PROMPT = "Guess the 5-letter word"


def sample_files() -> dict[str, str]:
    answers = sorted(
        line.strip() for line in (HERE / "data" / "answers.txt").read_text(encoding="utf-8").splitlines() if line
    )
    random.Random(SEED).shuffle(answers)  # noqa: S311 - a reproducible split, not security
    splits = {"train": answers[:TRAIN_ROWS], "eval": answers[TRAIN_ROWS : TRAIN_ROWS + EVAL_ROWS]}
    files = {}
    for split, words in splits.items():
        rows = [
            {"id": f"wordle_{split}_{i:04d}", "metadata": {"prompt": PROMPT, "answer": word}}
            for i, word in enumerate(words)
        ]
        files[f"{split}.jsonl"] = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)
    return files


def main() -> int:
    (HERE / "sample").mkdir(exist_ok=True)
    for name, text in sample_files().items():
        (HERE / "sample" / name).write_text(text, encoding="utf-8")
        print(f"sample/{name}: {text.count(chr(10))} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
