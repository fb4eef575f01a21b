"""What the demo trains (``plan_for``): the environment, its bundled sample dataset, the policy and the run manifest."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtrl.envs.registry import load_spec
from mtrl.local.agents import agent_for
from mtrl.local.config import FEATURES, TrainConfig, default_policy

EVAL_KEY = "eval-data/wordle-demo-eval.jsonl"

POLICY_LINE = (
    "policy: `features` — a 7-weight log-linear policy choosing among candidate guesses that a built-in Wordle "
    "solver offers (mtrl/local/agents/wordle.py); fast and offline, but not a language model "
    "(for one: mtrl env try wordle --policy hf:MODEL)"
)
LANGUAGE_MODEL_LINE = "policy: `{policy}` — a language model trained with TRL GRPO on a LoRA adapter, on the CPU{tiny}"
TINY_LINE = (
    "; hf:tiny-random is a tiny randomly initialised model built in code (no download): a plumbing check whose "
    "scores say nothing about the reward (for a real model: --policy hf:PATH)"
)
FEATURES_LINE = (
    "policy: `features` — a log-linear policy choosing among candidate actions that a hand-made agent for "
    "{env_id} offers (mtrl/local/agents/{env_id}.py); fast and offline, but not a language model "
    "(for one: --policy hf:MODEL)"
)


class DemoError(RuntimeError):
    pass


@dataclass(frozen=True)
class DemoPlan:
    """What the demo trains: the environment, its sample dataset and the run manifest."""

    env_id: str
    policy: str
    train_path: Path
    eval_path: Path
    manifest: dict[str, Any]
    eval_tasks: int = 100  # the run evaluates the first this many held-out tasks (the trainer's eval_tasks)

    @property
    def eval_key(self) -> str:
        return str(self.manifest["eval_dataset"])

    @property
    def policy_line(self) -> str:
        if self.policy != FEATURES:
            return LANGUAGE_MODEL_LINE.format(
                policy=self.policy, tiny=TINY_LINE if self.policy.endswith(":tiny-random") else ""
            )
        return POLICY_LINE if self.env_id == "wordle" else FEATURES_LINE.format(env_id=self.env_id)

    @property
    def hand_set_heuristic(self) -> bool:
        """The hand-set heuristic row: wordle's feature policy only (its weight names a wordle feature)."""
        return self.env_id == "wordle" and self.policy == FEATURES


def plan_for(
    env_id: str = "wordle", *, policy: str | None = None, hyperparameters: dict[str, Any] | None = None
) -> DemoPlan:
    """The demo of ``env_id``: its ``sample/train.jsonl`` and ``sample/eval.jsonl``, the ``local`` backend.

    Plain ``mtrl demo`` is wordle with the features policy (20 steps); another environment trains with its default
    policy (``mtrl.local.config.default_policy``) unless ``policy`` names one; ``hyperparameters`` override.
    """
    spec = load_spec(env_id)
    sample = spec.path / "sample"
    train_path, eval_path = sample / "train.jsonl", sample / "eval.jsonl"
    missing = [str(path) for path in (train_path, eval_path) if not path.is_file()]
    if missing:
        raise DemoError(
            f"environment '{env_id}' has no sample dataset ({', '.join(missing)} missing): the demo trains on "
            "sample/train.jsonl and evaluates on sample/eval.jsonl, as custom-environments/template ships them"
        )
    chosen = policy or default_policy(env_id)
    values: dict[str, Any] = {"steps": 20, "seed": 7} if env_id == "wordle" and chosen == FEATURES else {"seed": 7}
    if env_id != "wordle" or chosen != FEATURES:
        values["policy"] = chosen
    values.update(hyperparameters or {})
    try:
        config = TrainConfig.from_mapping(env_id, values)  # refuse a bad setting here, not minutes later
        if chosen == FEATURES:
            agent_for(env_id)  # says which environments have a features policy
    except (ValueError, LookupError) as error:
        raise DemoError(str(error)) from error
    manifest = {
        "backend": "local",
        "environment": env_id,
        "hyperparameters": values,
        "eval_dataset": EVAL_KEY if env_id == "wordle" else f"eval-data/{env_id.replace('_', '-')}-demo-eval.jsonl",
    }
    return DemoPlan(
        env_id=env_id,
        policy=chosen,
        train_path=train_path,
        eval_path=eval_path,
        manifest=manifest,
        eval_tasks=config.eval_tasks,
    )
