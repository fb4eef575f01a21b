"""The local backend: full default runs on the built-in environments' sample datasets.

Targets (issue 7): wordle held-out solve rate ≥ 80% after training and the whole run ≤ 3 minutes on 2
cores; ask_to_code must learn to ask before coding (held-out success clearly above the untrained policy).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from mtrl.envs.registry import load_spec
from mtrl.local.config import TrainConfig
from mtrl.local.run import DirectoryStore, advance_run, create_run, parse_jsonl, read_summary

TARGET_WORDLE_SUCCESS = 0.8
TARGET_SECONDS = 180.0


def _run(env_id: str) -> dict[str, float]:
    sample = load_spec(env_id).path / "sample"
    train = parse_jsonl((sample / "train.jsonl").read_text(), source="train.jsonl")
    held_out = parse_jsonl((sample / "eval.jsonl").read_text(), source="eval.jsonl")
    with tempfile.TemporaryDirectory() as directory:
        store = DirectoryStore(Path(directory))
        started = time.perf_counter()
        create_run(store, TrainConfig.from_mapping(env_id, {}), train, held_out)
        advance_run(store)
        wall = time.perf_counter() - started
        summary = read_summary(store)
    assert summary is not None
    heldout = summary["heldout"]
    return {
        "wall_s": wall,
        "steps": summary["steps"],
        "tasks": heldout["tasks"],
        "before": heldout["success_before"],
        "after": heldout["success_after"],
    }


def main() -> None:
    for env_id in ("wordle", "ask_to_code"):
        figures = _run(env_id)
        verdicts = [f"whole run {figures['wall_s']:.1f} s (target ≤ {TARGET_SECONDS:.0f} s)"]
        if env_id == "wordle":
            verdicts.append(f"solve rate target ≥ {TARGET_WORDLE_SUCCESS:.0%}")
        ok = figures["wall_s"] <= TARGET_SECONDS and (env_id != "wordle" or figures["after"] >= TARGET_WORDLE_SUCCESS)
        print(
            f"   {env_id}: {figures['steps']:.0f} GRPO steps, held-out success {figures['before']:.0%} → "
            f"{figures['after']:.0%} on {figures['tasks']:.0f} tasks; {'; '.join(verdicts)} "
            f"[{'ok' if ok else 'MISSED'}]",
            flush=True,
        )
