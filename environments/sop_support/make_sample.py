"""Write ``sample/train.jsonl`` and ``sample/eval.jsonl``: every ticket once, a fixed disjoint split.

The split is by branch of the procedure (the reference solver's reason code): of each branch's tickets, in
ticket order, every third one is held out, so both splits cover every branch. Row format (Nova Forge
multi-turn RFT): ``{"id": "sop_support_<split>_<ticket>", "metadata": {"prompt": <ticket text>,
"info": {"ticket_id": <ticket>}}}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from environments.sop_support.data import tickets
from environments.sop_support.sop import solve

HERE = Path(__file__).resolve().parent
EVAL_EVERY = 3  # of each branch's tickets, the 2nd, 5th, … are held out


def split_of() -> dict[str, str]:
    """Ticket id → "train" or "eval"."""
    by_branch: dict[str, list[str]] = {}
    for ticket_id in tickets():
        by_branch.setdefault(solve(ticket_id).branch, []).append(ticket_id)
    return {
        ticket_id: "eval" if index % EVAL_EVERY == 1 else "train"
        for members in by_branch.values()
        for index, ticket_id in enumerate(members)
    }


def sample_files() -> dict[str, str]:
    splits = split_of()
    rows: dict[str, list[str]] = {"train": [], "eval": []}
    for ticket_id, ticket in tickets().items():
        split = splits[ticket_id]
        row = {
            "id": f"sop_support_{split}_{ticket_id}",
            "metadata": {"prompt": ticket.text(), "info": {"ticket_id": ticket_id}},
        }
        rows[split].append(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")
    return {f"{split}.jsonl": "".join(lines) for split, lines in rows.items()}


def main() -> int:
    (HERE / "sample").mkdir(exist_ok=True)
    for name, text in sample_files().items():
        (HERE / "sample" / name).write_text(text, encoding="utf-8")
        print(f"sample/{name}: {text.count(chr(10))} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
