"""`mtrl eval ENV_ID --policy P [--policy P2 …]`: baselines before training, side by side (the SageMaker AI multi-turn
RL best-practices post).

Before training, run the base model and a stronger reference model through the same evaluation to know the
starting point and the ceiling. Each policy plays one episode of each task of a split — the environment's held-out
``sample/eval.jsonl`` by default, its ``sample/train.jsonl`` or any dataset file — through the same episode loop
and scoring as ``mtrl env try`` (``mtrl.llm.tryout.play_heldout`` for language models, the local trainer's
held-out rollouts for the untrained ``features`` policy), from the same seed. Reported per policy: the external
evaluation mean (``mtrl.health.evaluation``: the environment's EVALUATION, or success as the labelled fallback), the
reward mean (the training signal, not the score), the success rate and the mean turns; ``--per-task FILE``
writes one JSON line per policy and task.

Exit code 0 when every policy was evaluated, 2 for a bad policy, environment, split or option.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from mtrl.cli.output import EXIT_INVALID, EXIT_USAGE, console, fail, print_json
from mtrl.contracts.environment import EpisodeResult, TaskError
from mtrl.contracts.text import plural
from mtrl.envs.registry import EnvironmentNotFoundError, EnvironmentSpec, InvalidEnvironmentError, load_spec
from mtrl.health.evaluation import describe, label
from mtrl.health.evaluation import score as evaluation_score
from mtrl.llm import LLMUnavailableError
from mtrl.llm.policies import PolicyError, PolicySpec, Sampling, parse_policy

SPLITS = {"heldout": Path("sample") / "eval.jsonl", "train": Path("sample") / "train.jsonl"}


def parse_policies(texts: Sequence[str], models: Sequence[str]) -> list[PolicySpec]:
    """The ``--policy`` values; ``--model`` goes to the ``openai:`` ones (one for all, or one each, in order)."""
    if not texts:
        raise PolicyError("give at least one --policy (features, hf:MODEL, hf:tiny-random or openai:BASE_URL)")
    endpoints = sum(1 for text in texts if text.startswith("openai:"))
    if models and (not endpoints or len(models) not in {1, endpoints}):
        raise PolicyError(
            f"--model is for the openai:BASE_URL policies: give one for all of them or one each ({endpoints} "
            f"openai policies, {len(models)} --model values)"
        )
    specs: list[PolicySpec] = []
    served = iter(models if len(models) != 1 else list(models) * endpoints)
    for text in texts:
        specs.append(parse_policy(text, model=next(served, None) if text.startswith("openai:") else None))
    labels = [spec.label for spec in specs]
    repeated = sorted({name for name in labels if labels.count(name) > 1})
    if repeated:
        raise PolicyError(f"--policy {', '.join(repeated)} is given more than once")
    return specs


def split_path(spec: EnvironmentSpec, split: str) -> Path:
    """``heldout`` / ``train`` (the environment's sample files) or a dataset file."""
    # The local trainer's modules (numpy) load when a command runs, never for --help.
    from mtrl.local.trainer import TrainingError  # noqa: PLC0415

    path = spec.path / SPLITS[split] if split in SPLITS else Path(split)
    if not path.is_file():
        where = f"the environment's {split} split" if split in SPLITS else "--split"
        raise TrainingError(f"{where}: {path} does not exist (pass --split heldout, train or a dataset FILE.jsonl)")
    return path


def _row(policy: str, index: int, task: dict[str, Any], result: EpisodeResult, turns: int) -> dict[str, Any]:
    from mtrl.llm.report import task_label  # noqa: PLC0415

    return {
        "policy": policy,
        "task": task_label(task, index),
        "evaluation": evaluation_score(result),
        "reward": float(result.reward),
        "success": bool(result.success),
        "turns": turns,
        "components": dict(result.components),
    }


def _features_rows(spec: EnvironmentSpec, tasks: list[dict[str, Any]], *, seed: int) -> list[dict[str, Any]]:
    """The untrained features policy (all weights 0) on every task: the local trainer's held-out rollouts."""
    from mtrl.local.agents import agent_for  # noqa: PLC0415
    from mtrl.local.config import TrainConfig  # noqa: PLC0415
    from mtrl.local.policy import LogLinearPolicy  # noqa: PLC0415
    from mtrl.local.trainer import TaskSplit, Trainer  # noqa: PLC0415

    agent = agent_for(spec.env_id)
    config = TrainConfig.from_mapping(spec.env_id, {"seed": seed, "eval_tasks": len(tasks)})
    trainer = Trainer(spec, agent, TaskSplit(train=tasks, holdout=tasks))
    rollouts = trainer.heldout_rollouts(LogLinearPolicy(agent.feature_names), config=config)
    return [
        _row("features", index, task, rollout.result, rollout.turns)
        for index, (task, rollout) in enumerate(zip(tasks, rollouts, strict=True))
    ]


def _chat_rows(
    spec: EnvironmentSpec,
    policy: PolicySpec,
    tasks: list[dict[str, Any]],
    *,
    seed: int,
    sampling: Sampling,
    max_turns: int | None,
) -> list[dict[str, Any]]:
    from mtrl.llm.policies import load_policy  # noqa: PLC0415  (torch/openai load only when a run starts)
    from mtrl.llm.tryout import play_heldout  # noqa: PLC0415

    acting = load_policy(policy, seed=seed)
    episodes = play_heldout(spec, acting, tasks, seed=seed, sampling=sampling, max_turns=max_turns)
    return [
        _row(acting.name, index, task, episode.result, episode.turns)
        for index, (task, episode) in enumerate(zip(tasks, episodes, strict=True))
    ]


def _play(
    spec: EnvironmentSpec,
    policy: PolicySpec,
    tasks: list[dict[str, Any]],
    *,
    seed: int,
    sampling: Sampling,
    max_turns: int | None,
    as_json: bool,
) -> list[dict[str, Any]]:
    """One policy's per-task rows; a policy that cannot run ends the command with a message naming it."""
    from mtrl.local.config import ConfigError  # noqa: PLC0415

    try:
        if policy.kind == "features":
            return _features_rows(spec, tasks, seed=seed)
        playing = f"{spec.env_id}: {policy.label} on {plural(len(tasks), 'task')}"
        working = console.status(playing) if not as_json else None
        with working or nullcontext():
            return _chat_rows(spec, policy, tasks, seed=seed, sampling=sampling, max_turns=max_turns)
    except (LLMUnavailableError, PolicyError, ConfigError) as error:
        fail(f"{policy.label}: {error}", code=EXIT_USAGE, as_json=as_json)
    except TaskError as error:
        fail(f"task is invalid for '{spec.env_id}': {error}", code=EXIT_INVALID, as_json=as_json)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def policy_figures(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {
        "tasks": len(rows),
        "evaluation_mean": _mean([row["evaluation"] for row in rows]),
        "reward_mean": _mean([row["reward"] for row in rows]),
        "success_rate": _mean([1.0 if row["success"] else 0.0 for row in rows]),
        "turns_mean": _mean([float(row["turns"]) for row in rows]),
    }


def evaluate(
    env_id: Annotated[str, typer.Argument(help="Environment id (built-in or custom), e.g. wordle.")],
    *,
    policies: Annotated[
        list[str],
        typer.Option(
            "--policy",
            help="Repeatable: features (untrained) | hf:MODEL | hf:tiny-random | openai:BASE_URL (with --model).",
        ),
    ],
    models: Annotated[
        list[str] | None,
        typer.Option("--model", help="The model an openai:BASE_URL endpoint serves (one for all, or one each)."),
    ] = None,
    split: Annotated[
        str, typer.Option(help="heldout (sample/eval.jsonl), train (sample/train.jsonl) or a dataset FILE.jsonl.")
    ] = "heldout",
    tasks: Annotated[int | None, typer.Option(help="Evaluate the first N tasks of the split (default: all).")] = None,
    seed: Annotated[int, typer.Option(help="Seed; every policy plays from the same one.")] = 0,
    temperature: Annotated[float, typer.Option(help="Language model: sampling temperature.")] = 1.0,
    top_p: Annotated[float, typer.Option(help="Language model: nucleus sampling top-p.")] = 1.0,
    # 64: sop_support's reference actions (a tool call as JSON) need about 40 tokens.
    max_new_tokens: Annotated[int, typer.Option(help="Language model: tokens per reply at most.")] = 64,
    max_turns: Annotated[
        int | None,
        typer.Option(
            help="Lower the environment's own turn limit (its MAX_TURNS) for a quick check; default: the "
            "environment's, as in training."
        ),
    ] = None,
    per_task: Annotated[Path | None, typer.Option(help="Write one JSON line per policy and task to this file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
) -> None:
    """Evaluate one or more policies on a split, side by side: the external evaluation, reward, success, turns."""
    from mtrl.cli.env_try_llm import read_tasks  # noqa: PLC0415
    from mtrl.local.agents import NoAgentError, agent_for  # noqa: PLC0415
    from mtrl.local.trainer import TrainingError  # noqa: PLC0415
    from mtrl.validation.rows import row_ids, task_key  # noqa: PLC0415

    try:
        specs = parse_policies(policies, models or [])
        sampling = Sampling(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
        if tasks is not None and tasks < 1:
            raise PolicyError(f"--tasks must be at least 1 (got {tasks})")
        if max_turns is not None and max_turns < 1:
            raise PolicyError(f"--max-turns must be at least 1 (got {max_turns})")
        spec = load_spec(env_id)
        if any(policy.kind == "features" for policy in specs):
            agent_for(env_id)  # refuse before any model loads
    except (PolicyError, EnvironmentNotFoundError, InvalidEnvironmentError, NoAgentError) as error:
        fail(str(error), code=EXIT_USAGE, as_json=as_json)
    try:
        path = split_path(spec, split)
        chosen = read_tasks(spec, path)[:tasks]
        ids = row_ids(path)
    except TrainingError as error:
        fail(str(error), code=EXIT_USAGE if "does not exist" in str(error) else EXIT_INVALID, as_json=as_json)
    if not chosen:
        fail(f"{path} has no tasks", code=EXIT_INVALID, as_json=as_json)
    rows: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for policy in specs:
        found = _play(spec, policy, chosen, seed=seed, sampling=sampling, max_turns=max_turns, as_json=as_json)
        for row, task in zip(found, chosen, strict=True):  # the dataset row's id: joins a result back to its row
            row["id"] = ids.get(task_key(task))
            row["task"] = row["id"] or row["task"]
        rows += found
        results.append({"policy": found[0]["policy"], **policy_figures(found)})
    document = {
        "env_id": env_id,
        "split": split,
        "source": str(path),
        "tasks": len(chosen),
        "seed": seed,
        "evaluation": describe(spec),
        "sampling": {"temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens},
        "max_turns": spec.rules(max_turns=max_turns).max_turns,
        "policies": results,
    }
    if per_task is not None:
        per_task.parent.mkdir(parents=True, exist_ok=True)
        per_task.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows), encoding="utf-8")
        document["per_task"] = str(per_task)
    if as_json:
        print_json(document)
        return
    _print(document)


def _print(document: dict[str, Any]) -> None:
    measure = document["evaluation"]
    heading = label(measure["measure"])
    console.print(
        f"[bold]{document['env_id']}[/]: {plural(document['tasks'], 'task')} from {document['source']} "
        f"({document['split']}); "
        f"{heading}: {measure['description']}",
        highlight=False,
    )
    table = Table(title="policies side by side (same tasks, same seed, same scoring as mtrl env try)")
    for column in ("policy", heading, "reward (training signal)", "success", "turns"):
        table.add_column(column, overflow="fold")
    for entry in document["policies"]:
        table.add_row(
            entry["policy"],
            f"{entry['evaluation_mean']:.1%}",
            f"{entry['reward_mean']:+.3f}",
            f"{entry['success_rate']:.0%}",
            f"{entry['turns_mean']:.1f}",
        )
    console.print(table)
    if document.get("per_task"):
        console.print(f"per task: {document['per_task']}", highlight=False)
