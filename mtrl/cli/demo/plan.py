"""What the demo trains (``plan_for``): the environment, its bundled sample dataset, the backend, the policy and the
run manifest."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mtrl.backends.sessions.options import TINY_MODEL, SessionsRunOptions
from mtrl.contracts.problems import problems_from_validation_error
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


SESSIONS_LINE = (
    "policy: `{model}` on the sessions backend's local training service (torch + PEFT LoRA, the twin of a SageMaker "
    "training session), driven by mtrl's own GRPO loop: token in, token out{tiny}"
)
SESSIONS_TINY_LINE = (
    "; `tiny` is hf:tiny-random, a tiny randomly initialised model built in code (no download): a plumbing check "
    "whose scores say nothing about the reward (for a saved model: -H base_model=/absolute/path)"
)
BACKENDS = ("local", "sessions")
# The sessions demo's run, sized for a CPU (the imports and the tiny model take ~15 CPU-s, each step ~3, each held-out
# evaluation of the 50 words ~4): 3 steps of 2 words x 4 episodes, replies of at most 8 tokens.
SESSIONS_OPTIONS: dict[str, Any] = {
    "service": "local",
    "base_model": TINY_MODEL,
    "steps": 3,
    "group_size": 4,
    "tasks_per_step": 2,
    "max_tokens": 8,
    "seed": 7,
}


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
    backend: str = "local"
    eval_tasks: int = 100  # the run evaluates the first this many held-out tasks (the trainer's eval_tasks)

    @property
    def eval_key(self) -> str:
        return str(self.manifest["eval_dataset"])

    @property
    def policy_line(self) -> str:
        if self.backend == "sessions":
            return SESSIONS_LINE.format(model=self.policy, tiny=SESSIONS_TINY_LINE if self.policy == TINY_MODEL else "")
        if self.policy != FEATURES:
            return LANGUAGE_MODEL_LINE.format(
                policy=self.policy, tiny=TINY_LINE if self.policy.endswith(":tiny-random") else ""
            )
        return POLICY_LINE if self.env_id == "wordle" else FEATURES_LINE.format(env_id=self.env_id)

    @property
    def hand_set_heuristic(self) -> bool:
        """The hand-set heuristic row: wordle's feature policy only (its weight names a wordle feature)."""
        return self.backend == "local" and self.env_id == "wordle" and self.policy == FEATURES


def plan_for(
    env_id: str = "wordle",
    *,
    policy: str | None = None,
    hyperparameters: dict[str, Any] | None = None,
    backend: str = "local",
) -> DemoPlan:
    """The demo of ``env_id``: its ``sample/train.jsonl`` and ``sample/eval.jsonl``, on ``backend``.

    Plain ``mtrl demo`` is wordle with the features policy (20 steps) on the ``local`` backend; another environment
    trains with its default policy (``mtrl.local.config.default_policy``) unless ``policy`` names one;
    ``hyperparameters`` override. On ``sessions`` the run trains the local training service's tiny model
    (``SESSIONS_OPTIONS``), and ``hyperparameters`` override its per-run options.
    """
    if backend not in BACKENDS:
        raise DemoError(f"--backend: the demo runs {' or '.join(BACKENDS)} offline (got {backend!r})")
    spec = load_spec(env_id)
    sample = spec.path / "sample"
    train_path, eval_path = sample / "train.jsonl", sample / "eval.jsonl"
    missing = [str(path) for path in (train_path, eval_path) if not path.is_file()]
    if missing:
        raise DemoError(
            f"environment '{env_id}' has no sample dataset ({', '.join(missing)} missing): the demo trains on "
            "sample/train.jsonl and evaluates on sample/eval.jsonl, as custom-environments/template ships them"
        )
    eval_key = EVAL_KEY if env_id == "wordle" else f"eval-data/{env_id.replace('_', '-')}-demo-eval.jsonl"
    if backend == "sessions":
        return _sessions_plan(env_id, train_path, eval_path, eval_key, policy=policy, options=hyperparameters or {})
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
        "eval_dataset": eval_key,
    }
    return DemoPlan(
        env_id=env_id,
        policy=chosen,
        train_path=train_path,
        eval_path=eval_path,
        manifest=manifest,
        eval_tasks=config.eval_tasks,
    )


def _sessions_plan(
    env_id: str, train_path: Path, eval_path: Path, eval_key: str, *, policy: str | None, options: dict[str, Any]
) -> DemoPlan:
    if policy is not None:
        raise DemoError(
            "--policy is the local backend's; the sessions demo trains the local training service's tiny model "
            "(-H base_model=/absolute/path for a saved one)"
        )
    values = {**SESSIONS_OPTIONS, **options}
    if values["service"] != "local":
        raise DemoError("-H service: the demo runs offline, on the local training service (service=local)")
    try:
        chosen = SessionsRunOptions.model_validate(values)  # refused here, not minutes later at Preflight
    except ValidationError as error:
        raise DemoError("-H: " + "; ".join(problems_from_validation_error(error))) from error
    manifest = {"backend": "sessions", "environment": env_id, "backend_options": values, "eval_dataset": eval_key}
    held_out = sum(1 for line in eval_path.read_text(encoding="utf-8").splitlines() if line.strip())
    return DemoPlan(
        env_id=env_id,
        policy=chosen.model,
        train_path=train_path,
        eval_path=eval_path,
        manifest=manifest,
        backend="sessions",
        eval_tasks=held_out,  # the sessions loop evaluates every held-out row
    )
