"""A few local GRPO steps on a Hugging Face policy: TRL's ``GRPOTrainer`` with a LoRA adapter (PEFT).

Why ``rollout_func`` and not TRL's own multi-turn support: TRL's ``environment_factory`` exposes an environment's
methods as *tools* the model must call with the chat template's tool-call syntax, and feeds ``reset``'s text into the
prompt. The mtrl contract is different — every reply is free text passed to ``step(action)``, the observation comes
back as the next user turn, and ``result()`` scores the whole episode with named components — and models that were
never tuned for tool calls (the tiny random one, most small open models) would never call a tool at all. So each
GRPO step's rollouts are the project's own (``mtrl.llm.rollout.play``, the same code ``mtrl env try`` measures
with), handed to TRL through ``rollout_func``: the prompt tokens, then the whole episode as the completion with
``env_mask`` = 0 on the environment's tokens so only the model's own tokens are trained, and the episode's reward as
the reward. The loss, advantages (group-normalised over ``num_generations`` rollouts of one task), optimiser and
LoRA are TRL's, PEFT's and PyTorch's — no hand-written GRPO loss here.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mtrl.envs.registry import EnvironmentSpec
from mtrl.health import signal_health
from mtrl.health.episodes import episode_fields
from mtrl.llm import require
from mtrl.llm.policies import HFPolicy, PolicyError, Sampling
from mtrl.llm.rollout import Episode, play

Task = Mapping[str, Any]


@dataclass(frozen=True)
class GRPOSettings:
    steps: int
    tasks_per_step: int = 2
    group_size: int = 4
    learning_rate: float = 5e-4
    lora_rank: int = 8
    eval_every: int = 0  # 0: held-out success only before and after training
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.steps <= 10_000:
            raise PolicyError(f"--train-steps must be between 1 and 10000 (got {self.steps})")
        if not (math.isfinite(self.learning_rate) and 0 < self.learning_rate <= 1):
            raise PolicyError(f"--learning-rate must be in (0, 1] (got {self.learning_rate})")


@dataclass
class TrainResult:
    history: list[dict[str, Any]] = field(default_factory=list)  # one record per GRPO step
    evaluations: list[dict[str, Any]] = field(default_factory=list)  # held-out success at the steps measured
    adapter_change: float = 0.0  # L2 norm of the LoRA weights' change over training
    adapter_parameters: int = 0
    seconds: float = 0.0


def _adapter_snapshot(model: Any) -> dict[str, Any]:
    return {name: p.detach().clone() for name, p in model.named_parameters() if "lora_" in name}


def train_grpo(
    spec: EnvironmentSpec,
    policy: HFPolicy,
    train_tasks: Sequence[Task],
    *,
    settings: GRPOSettings,
    sampling: Sampling,
    max_turns: int | None,
    evaluate: Callable[[HFPolicy, int], dict[str, Any]],
    env_args: Mapping[str, Any] | None = None,
    on_episodes: Callable[[list[Episode]], None] | None = None,
) -> TrainResult:
    """Run ``settings.steps`` GRPO steps; ``evaluate(policy, step)`` measures held-out success (before, after)."""
    for module in ("torch", "trl", "peft", "datasets"):
        require(module)
    import os
    import time

    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import PrinterCallback, TrainerCallback

    # rollout_func is marked experimental by TRL; this module pins the TRL version it was written against.
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig, GRPOTrainer

    started = time.perf_counter()
    result = TrainResult()
    result.evaluations.append(evaluate(policy, 0))
    # Tasks travel through TRL's dataset as JSON text: several tasks may share a prompt (every wordle row does).
    rows = [json.dumps(dict(task), sort_keys=True) for task in train_tasks]
    dataset = Dataset.from_dict({"prompt": rows})
    tokenizer = policy.tokenizer

    def rollout_func(prompts: list[str], trainer: Any) -> dict[str, Any]:
        # The sampler already repeats each task num_generations times, consecutively: one episode per entry.
        tasks = [json.loads(prompt) for prompt in prompts]
        acting = HFPolicy.__new__(HFPolicy)  # the trainer's (LoRA-wrapped) model, same tokenizer and device
        acting.__dict__.update(policy.__dict__)
        acting.model = trainer.model
        was_training = trainer.model.training
        trainer.model.eval()
        try:
            episodes = play(spec, acting, tasks, sampling=sampling, max_turns=max_turns, env_args=env_args)
        finally:
            trainer.model.train(was_training)
        result.history.append(_step_record(len(result.history) + 1, episodes, settings.group_size))
        if on_episodes is not None:
            on_episodes(episodes)
        return {
            "prompt_ids": [e.context.ids[: e.context.prompt_length] for e in episodes],
            "completion_ids": [e.context.ids[e.context.prompt_length :] for e in episodes],
            "logprobs": None,  # sampled by the same weights in this process: no importance correction needed
            "env_mask": [list(e.context.mask) for e in episodes],
            "env_reward": [e.result.reward for e in episodes],
        }

    def environment_reward(prompts: list[str], completions: list[Any], env_reward: list[float], **_: Any) -> Any:
        """The episode's reward from the environment's ``result()``, computed during the rollout."""
        return list(env_reward)

    class HeldOut(TrainerCallback):  # type: ignore[misc]  # TrainerCallback is Any (untyped extra)
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            step = int(state.global_step)
            if settings.eval_every and step % settings.eval_every == 0 and step < settings.steps:
                result.evaluations.append(evaluate(_wrapped(policy, kwargs["model"]), step))

    use_cpu = not torch.cuda.is_available()
    with tempfile.TemporaryDirectory(prefix="mtrl-grpo-") as output_dir:
        config = GRPOConfig(
            output_dir=output_dir,
            max_steps=settings.steps,
            per_device_train_batch_size=settings.tasks_per_step * settings.group_size,
            gradient_accumulation_steps=1,
            num_generations=settings.group_size,
            steps_per_generation=1,
            num_iterations=1,
            learning_rate=settings.learning_rate,
            beta=0.0,  # no reference model: a KL term needs a second copy of the model; LoRA keeps steps small
            # An episode's end is the environment's decision, not an end-of-sequence token: never drop episodes
            # whose last reply ran into max_new_tokens.
            mask_truncated_completions=False,
            max_completion_length=1_000_000,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            use_cpu=use_cpu,
            bf16=False,
            seed=settings.seed,
            disable_tqdm=True,
            log_level="error",
            gradient_checkpointing=False,  # small models on the CPU: recomputing activations only costs time
        )
        peft_config = LoraConfig(
            r=settings.lora_rank, lora_alpha=2 * settings.lora_rank, target_modules="all-linear", task_type="CAUSAL_LM"
        )
        trainer = GRPOTrainer(
            model=policy.model,
            reward_funcs=[environment_reward],
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=peft_config,
            rollout_func=rollout_func,
            callbacks=[HeldOut()],
        )
        trainer.remove_callback(PrinterCallback)  # its per-step dicts on stdout would corrupt `--json` output
        before = _adapter_snapshot(trainer.model)
        trainer.train()
        after = _adapter_snapshot(trainer.model)
    result.adapter_parameters = sum(int(tensor.numel()) for tensor in after.values())
    result.adapter_change = float(math.sqrt(sum(float(((after[name] - before[name]) ** 2).sum()) for name in after)))
    _attach_logged(result.history, trainer.state.log_history)
    trained = _wrapped(policy, trainer.model)
    result.evaluations.append(evaluate(trained, settings.steps))
    policy.model = trainer.model  # the caller's policy is now the trained one (base weights + adapter)
    result.seconds = time.perf_counter() - started
    return result


def _attach_logged(history: list[dict[str, Any]], log_history: Sequence[Mapping[str, Any]]) -> None:
    """Each step record gets the loss and gradient norm TRL logged for that step (NaN when it logged none)."""
    logged: dict[int, dict[str, Any]] = {}
    for entry in log_history:  # a step can have several entries (its log, then the end-of-training summary)
        if "step" in entry:
            logged.setdefault(int(entry["step"]), {}).update(entry)
    for record in history:
        entry = logged.get(record["step"], {})
        record["loss"] = float(entry.get("loss", math.nan))
        record["grad_norm"] = float(entry.get("grad_norm", math.nan))


def _wrapped(policy: HFPolicy, model: Any) -> HFPolicy:
    view = HFPolicy.__new__(HFPolicy)
    view.__dict__.update(policy.__dict__)
    view.model = model
    return view


def _step_record(step: int, episodes: Sequence[Episode], group_size: int) -> dict[str, Any]:
    """One GRPO step's figures, with the same ``signal_health`` and ``episode_signals`` fields as the local
    trainer's records, so both become the same signal rows (``mtrl.local.signals``)."""
    groups = [list(episodes[i : i + group_size]) for i in range(0, len(episodes), group_size)]
    health = signal_health.compute([[e.result for e in group] for group in groups])
    components = sorted({name for e in episodes for name in e.result.components})
    metric_names = sorted({name for e in episodes for name in e.result.metrics})
    return {
        "step": step,
        "episodes": len(episodes),
        "reward_mean": sum(e.result.reward for e in episodes) / len(episodes),
        "success_rate": sum(1.0 for e in episodes if e.result.success) / len(episodes),
        "components": {
            name: sum(e.result.components.get(name, 0.0) for e in episodes) / len(episodes) for name in components
        },
        "metrics": {
            name: sum(e.result.metrics[name] for e in episodes if name in e.result.metrics)
            / sum(1 for e in episodes if name in e.result.metrics)
            for name in metric_names
        },
        "reward_spread": health.aggregate.mean_spread,
        "reward_zero_spread_share": health.aggregate.zero_spread_share,
        "signal_health": {
            item.name: {"mean_spread": item.mean_spread, "zero_spread_share": item.zero_spread_share, "mean": item.mean}
            for item in [health.aggregate, *health.components.values()]
        },
        "signal_warnings": list(health.warnings),
        "episode_signals": episode_fields([[e.rollout for e in group if e.rollout is not None] for group in groups]),
        "informative_groups": sum(
            1 for group in groups if max(e.result.reward for e in group) - min(e.result.reward for e in group) > 1e-9
        ),
        "completion_tokens": sum(e.completion_tokens for e in episodes),
    }
