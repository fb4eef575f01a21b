"""``mtrl env try ENV --policy hf:…|openai:…``: measure a reward with a language-model policy, optionally train.

1. ``group_size`` rollouts of each of the first ``tasks`` training tasks → per-group and overall figures and signal
   health (what GRPO would see);
2. one rollout of each of the first ``eval_tasks`` held-out tasks → success by the environment's own criterion;
3. with ``train_steps``: that many GRPO steps (TRL + LoRA, ``mtrl.llm.train``), held-out success re-measured after,
   and the learning curve.

Files in ``output``: ``summary.json``, ``rollouts.jsonl`` (every training rollout), ``signal.png`` and, when trained,
``training.png``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtrl.envs.registry import EnvironmentSpec
from mtrl.llm.policies import ChatPolicy, HFPolicy, PolicyError, PolicySpec, Sampling, load_policy
from mtrl.llm.report import curve_png, episode_figures, rollouts_png, summarize_rollouts
from mtrl.llm.rollout import Episode, play, play_groups
from mtrl.llm.train import GRPOSettings, train_grpo

Task = Mapping[str, Any]
# Told after each batch of episodes: the episodes just played (what an interrupted run can still write).
OnEpisodes = Callable[[list[Episode]], None]


@dataclass(frozen=True)
class TryOptions:
    policy: PolicySpec
    sampling: Sampling
    group_size: int = 4
    tasks: int = 4  # training tasks rolled out (each group_size times)
    eval_tasks: int = 8
    max_turns: int | None = None  # lowers the environment's MAX_TURNS for a quick check; None: the environment's
    seed: int = 0
    train_steps: int = 0
    tasks_per_step: int = 2
    learning_rate: float = 5e-4
    eval_every: int = 0

    def total_episodes(self, train_tasks: int, heldout_tasks: int) -> int:
        """Every episode a run plays: the measured groups, each held-out evaluation, the GRPO steps' rollouts."""
        evaluations = 1
        if self.train_steps:  # before training, every eval_every steps, after training
            evaluations += 2 + ((self.train_steps - 1) // self.eval_every if self.eval_every else 0)
        per_step = min(self.tasks_per_step, train_tasks) * self.group_size
        measured = min(self.tasks, train_tasks) * self.group_size
        return measured + evaluations * min(self.eval_tasks, heldout_tasks) + self.train_steps * per_step

    def __post_init__(self) -> None:
        for name, value, low in (
            ("group-size", self.group_size, 2),
            ("tasks", self.tasks, 1),
            ("eval-tasks", self.eval_tasks, 1),
            ("max-turns", 1 if self.max_turns is None else self.max_turns, 1),
            ("tasks-per-step", self.tasks_per_step, 1),
        ):
            if value < low:
                hint = " (GRPO compares at least 2 rollouts of a task)" if name == "group-size" else ""
                raise PolicyError(f"--{name} must be at least {low} (got {value}){hint}")
        if self.train_steps < 0:
            raise PolicyError(f"--train-steps must be 0 or more (got {self.train_steps})")
        if self.train_steps and self.policy.kind != "hf":
            raise PolicyError("--train-steps needs a local model: --policy hf:MODEL or hf:tiny-random")


def play_heldout(
    spec: EnvironmentSpec,
    policy: ChatPolicy,
    tasks: Sequence[Task],
    *,
    seed: int,
    sampling: Sampling,
    max_turns: int | None,
    env_args: Mapping[str, Any] | None = None,
) -> list[Episode]:
    """One episode of each held-out task from the fixed evaluation seed (``seed + 1``): the same sampling noise
    for every evaluation of a run (before/after training) and of ``mtrl eval``, so only the policy differs."""
    import torch

    torch.manual_seed(seed + 1)
    return play(spec, policy, tasks, sampling=sampling, max_turns=max_turns, env_args=env_args)


def run_try(
    spec: EnvironmentSpec,
    train_tasks: Sequence[Task],
    heldout_tasks: Sequence[Task],
    options: TryOptions,
    *,
    output: Path,
    env_args: Mapping[str, Any] | None = None,
    on_episodes: OnEpisodes | None = None,
    ids: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    import torch

    def played(episodes: list[Episode]) -> list[Episode]:
        if on_episodes is not None:
            on_episodes(episodes)
        return episodes

    started = time.perf_counter()
    torch.manual_seed(options.seed)
    policy = load_policy(options.policy, seed=options.seed)
    measured = list(train_tasks)[: options.tasks]
    heldout = list(heldout_tasks)[: options.eval_tasks]
    common: dict[str, Any] = {"sampling": options.sampling, "max_turns": options.max_turns, "env_args": env_args}
    groups = play_groups(spec, policy, measured, group_size=options.group_size, **common)
    played([episode for group in groups for episode in group])

    def evaluate(acting: Any, step: int) -> dict[str, Any]:
        episodes = played(play_heldout(spec, acting, heldout, seed=options.seed, **common))
        return {"step": step, "tasks": len(episodes), **episode_figures(episodes)}

    heldout_episodes = played(play_heldout(spec, policy, heldout, seed=options.seed, **common))
    summary = summarize_rollouts(groups, heldout_episodes, group_size=options.group_size, ids=ids)
    summary.update(
        {
            "env_id": spec.env_id,
            "policy": policy.name,
            "sampling": {
                "temperature": options.sampling.temperature,
                "top_p": options.sampling.top_p,
                "max_new_tokens": options.sampling.max_new_tokens,
            },
            "max_turns": spec.rules(max_turns=options.max_turns).max_turns,
            "seed": options.seed,
            "train_tasks_available": len(train_tasks),
            "heldout_tasks_available": len(heldout_tasks),
        }
    )
    output.mkdir(parents=True, exist_ok=True)
    with (output / "rollouts.jsonl").open("w", encoding="utf-8") as handle:
        for group in groups:
            for episode in group:
                handle.write(json.dumps(episode.to_dict(), sort_keys=True) + "\n")
    signal_plot = output / "signal.png"
    signal_plot.write_bytes(rollouts_png(summary, title=f"{spec.env_id} with {policy.name}: reward signal per group"))
    summary["plots"] = {"signal": str(signal_plot)}
    if options.train_steps:
        if not isinstance(policy, HFPolicy):
            raise PolicyError("--train-steps needs a local model: --policy hf:MODEL or hf:tiny-random")
        settings = GRPOSettings(
            steps=options.train_steps,
            tasks_per_step=min(options.tasks_per_step, len(train_tasks)),
            group_size=options.group_size,
            learning_rate=options.learning_rate,
            eval_every=options.eval_every,
            seed=options.seed,
        )
        trained = train_grpo(
            spec,
            policy,
            train_tasks,
            settings=settings,
            evaluate=evaluate,
            sampling=options.sampling,
            max_turns=options.max_turns,
            env_args=env_args,
            on_episodes=on_episodes,
        )
        before, after = trained.evaluations[0], trained.evaluations[-1]
        summary["training"] = {
            "steps": options.train_steps,
            "tasks_per_step": settings.tasks_per_step,
            "learning_rate": settings.learning_rate,
            "lora_rank": settings.lora_rank,
            "history": trained.history,
            "evaluations": trained.evaluations,
            "heldout_success_before": before["success_rate"],
            "heldout_success_after": after["success_rate"],
            "heldout_evaluation_before": before["evaluation_mean"],
            "heldout_evaluation_after": after["evaluation_mean"],
            "adapter_parameters": trained.adapter_parameters,
            "adapter_change_l2": trained.adapter_change,
            "seconds": round(trained.seconds, 2),
        }
        curve = output / "training.png"
        curve.write_bytes(
            curve_png(
                trained.history,
                trained.evaluations,
                title=f"{spec.env_id} with {policy.name}: held-out success "
                f"{before['success_rate']:.0%} → {after['success_rate']:.0%} (TRL GRPO, LoRA)",
            )
        )
        summary["plots"]["training"] = str(curve)
    summary["wall_seconds"] = round(time.perf_counter() - started, 2)
    summary["output"] = str(output)
    (output / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
    return summary
