"""The local backend's language-model policy: any environment, trained with TRL GRPO + LoRA (``mtrl.llm.train``).

The feature policies (``mtrl.local.agents``) exist for the three built-ins only; this plays any registered
environment through its contract, with the same chat policy and GRPO steps as ``mtrl env try --train-steps``, and
records the run in the same ``TrainingState`` shape as the feature trainer (history records with ``signal_health``
and ``episode_signals``, held-out evaluations at step 0 and at the end) so the summary, the plot and the signal rows
are the same code for both policies. The log-linear weights stay empty: the trained weights are the LoRA adapter.

A run is trained whole in one call (before-evaluation, every step, after-evaluation): TRL's trainer cannot be
sliced into resumable chunks the way the numpy trainer is. It is sized for dry runs (the defaults: 2 steps of
2 tasks × 2 rollouts); the backend function's timeout bounds it. Needs the ``mtrl[llm]`` extra.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from mtrl.envs.registry import EnvironmentSpec
from mtrl.local.trainer import Task, TaskSplit, TrainingState


def _evaluation_record(episodes: Sequence[Any], step: int) -> dict[str, Any]:
    from mtrl.llm.report import episode_figures  # noqa: PLC0415 - the optional extra

    names = sorted({name for e in episodes for name in e.result.components})
    count = max(1, len(episodes))
    return {
        "step": step,
        "tasks": len(episodes),
        **episode_figures(episodes),
        "components": {name: sum(e.result.components.get(name, 0.0) for e in episodes) / count for name in names},
        "mean_turns": sum(float(e.turns) for e in episodes) / count,
    }


def train_language_model(
    spec: EnvironmentSpec,
    tasks: TaskSplit,
    state: TrainingState,
    *,
    on_step: Callable[[TrainingState, dict[str, Any]], None] | None = None,
) -> TrainingState:
    """Evaluate the untrained model on the held-out tasks, run ``config.steps`` GRPO steps, evaluate again."""
    from mtrl.llm import require  # noqa: PLC0415 - the optional extra, imported only for a language-model run

    require("torch")
    import torch  # noqa: PLC0415

    from mtrl.llm.policies import HFPolicy, Sampling  # noqa: PLC0415
    from mtrl.llm.train import GRPOSettings, train_grpo  # noqa: PLC0415
    from mtrl.llm.tryout import play_heldout  # noqa: PLC0415

    config = state.config
    started = time.perf_counter()
    torch.manual_seed(config.seed)
    policy = HFPolicy.load(config.policy.removeprefix("hf:"), seed=config.seed)
    sampling = Sampling(max_new_tokens=config.max_new_tokens)
    max_turns = config.max_turns or None
    heldout: list[Task] = list(tasks.holdout)[: config.eval_tasks]

    def evaluate(acting: Any, step: int) -> dict[str, Any]:
        episodes = play_heldout(
            spec, acting, heldout, seed=config.seed, sampling=sampling, max_turns=max_turns, env_args=config.env_args
        )
        return _evaluation_record(episodes, step)

    if config.steps == 0:
        state.evaluations = [evaluate(policy, 0)]
    else:
        settings = GRPOSettings(
            steps=config.steps,
            tasks_per_step=min(config.tasks_per_step, len(tasks.train)),
            group_size=config.group_size,
            learning_rate=config.learning_rate,
            eval_every=config.eval_every if config.eval_every < config.steps else 0,
            seed=config.seed,
        )
        trained = train_grpo(
            spec,
            policy,
            list(tasks.train),
            settings=settings,
            sampling=sampling,
            max_turns=max_turns,
            evaluate=evaluate,
            env_args=config.env_args,
        )
        state.history = trained.history
        state.evaluations = trained.evaluations
        state.step = config.steps
        for record in state.history:
            if on_step is not None:
                on_step(state, record)
    state.phase = "done"
    state.train_seconds += time.perf_counter() - started
    return state
