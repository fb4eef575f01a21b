"""`mtrl env try ENV --policy hf:…|openai:…`: the language-model branch of `mtrl env try` (see mtrl/llm/tryout.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mtrl.cli.local_runs import try_output
from mtrl.cli.output import EXIT_INVALID, EXIT_USAGE, console, error_console, fail, print_json
from mtrl.contracts.environment import TaskError
from mtrl.contracts.text import plural
from mtrl.envs.registry import EnvironmentNotFoundError, EnvironmentSpec, InvalidEnvironmentError, load_spec
from mtrl.health import signal_health
from mtrl.health.evaluation import label as evaluation_label
from mtrl.llm import LLMUnavailableError
from mtrl.llm.policies import PolicyError, Sampling, parse_policy
from mtrl.llm.rollout import Episode
from mtrl.llm.tryout import TryOptions, run_try  # torch itself is imported only when a run starts
from mtrl.local.run import parse_jsonl
from mtrl.local.trainer import TaskSplit, TrainingError
from mtrl.validation.rows import row_ids

SAMPLE_TRAIN = Path("sample") / "train.jsonl"
SAMPLE_EVAL = Path("sample") / "eval.jsonl"
HOLDOUT_FRACTION = 0.2  # only when there is no evaluation file: a seeded share of the training rows


def try_with_language_model(
    env_id: str,
    *,
    policy: str,
    defaulted: bool,
    values: dict[str, Any],
    dataset: Path | None,
    eval_dataset: Path | None,
    output: Path | None,
    as_json: bool,
    strict: bool = False,
) -> None:
    try:
        spec = load_spec(env_id)
        options = TryOptions(
            policy=parse_policy(policy, model=values["model"]),
            sampling=Sampling(
                temperature=values["temperature"], top_p=values["top_p"], max_new_tokens=values["max_new_tokens"]
            ),
            **{key: values[key] for key in values if key not in {"model", "temperature", "top_p", "max_new_tokens"}},
        )
    except (EnvironmentNotFoundError, InvalidEnvironmentError, PolicyError) as error:
        fail(str(error), as_json=as_json)
    out_dir = output or try_output(env_id)
    if (out_dir / "summary.json").exists() or (out_dir / "state.json").exists():
        fail(f"{out_dir} already holds a run; pass another --output", as_json=as_json)
    split, source, ids = _load_tasks(spec, dataset, eval_dataset, seed=options.seed, as_json=as_json)
    if defaulted and not as_json:
        error_console.print(
            f"[yellow]note:[/] '{env_id}' has no features policy: using hf:tiny-random, a random model that checks "
            "the plumbing only — pass --policy hf:MODEL or openai:BASE_URL --model NAME for a real one",
            highlight=False,
        )
    collected: list[Episode] = []
    total = options.total_episodes(len(split.train), len(split.holdout))
    try:
        if as_json:
            summary = run_try(
                spec, split.train, split.holdout, options, output=out_dir, on_episodes=collected.extend, ids=ids
            )
        else:
            with _progress() as progress:
                bar = progress.add_task(f"{env_id}: {options.policy.label}", total=total)

                def on_episodes(episodes: list[Episode]) -> None:
                    collected.extend(episodes)
                    progress.update(bar, completed=len(collected))

                summary = run_try(
                    spec, split.train, split.holdout, options, output=out_dir, on_episodes=on_episodes, ids=ids
                )
    except KeyboardInterrupt:
        _interrupted(out_dir, collected, total, as_json=as_json)
    except (LLMUnavailableError, PolicyError) as error:
        fail(str(error), code=EXIT_USAGE, as_json=as_json)
    except TaskError as error:
        fail(f"task is invalid for '{env_id}': {error}", code=EXIT_INVALID, as_json=as_json)
    summary["heldout"]["source"] = source
    if as_json:
        print_json(summary)
    else:
        print_summary(summary)
    if strict and summary["signal_health"]["reward"]["verdict"] == signal_health.FLAT:
        raise typer.Exit(EXIT_INVALID)  # a flat reward is a finding (reported above); --strict makes it a failure


EXIT_INTERRUPTED = 130  # the shell's code for a command stopped by Ctrl-C (128 + SIGINT)


def _progress() -> Progress:
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("episodes"))
    return Progress(*columns, TimeElapsedColumn(), console=error_console, transient=False)


def _interrupted(out_dir: Path, collected: list[Episode], total: int, *, as_json: bool) -> None:
    """Ctrl-C: say so, and keep the episodes played so far (``partial-rollouts.jsonl``) rather than lose them."""
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = out_dir / "partial-rollouts.jsonl"
    with partial.open("w", encoding="utf-8") as handle:
        for episode in collected:
            handle.write(json.dumps(episode.to_dict(), sort_keys=True, default=str) + "\n")
    message = f"interrupted after {len(collected)} of {plural(total, 'episode')}; those played are in {partial}"
    if as_json:
        print_json({"interrupted": True, "episodes": len(collected), "total_episodes": total, "partial": str(partial)})
    else:
        error_console.print(f"[bold yellow]interrupted[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_INTERRUPTED)


def _load_tasks(
    spec: EnvironmentSpec, dataset: Path | None, eval_dataset: Path | None, *, seed: int, as_json: bool
) -> tuple[TaskSplit, str, dict[str, str]]:
    """The training and held-out tasks, where the held-out ones come from (the sample's eval.jsonl by default), and
    the rows' ids by task (``row_ids``: what reports name a task by)."""
    train_path = dataset or spec.path / SAMPLE_TRAIN
    eval_path = eval_dataset or (spec.path / SAMPLE_EVAL if dataset is None else None)
    if not train_path.is_file():
        fail(f"no dataset: {train_path} does not exist (pass --dataset FILE.jsonl)", as_json=as_json)
    if eval_dataset is not None and not eval_dataset.is_file():
        fail(f"no evaluation dataset: {eval_dataset} does not exist", as_json=as_json)
    try:
        train_rows = read_tasks(spec, train_path)
        eval_rows = read_tasks(spec, eval_path) if eval_path is not None and eval_path.is_file() else None
        split = TaskSplit.from_rows(train_rows, eval_rows, holdout_fraction=HOLDOUT_FRACTION, seed=seed)
    except TrainingError as error:
        fail(str(error), code=EXIT_INVALID, as_json=as_json)
    source = str(eval_path) if eval_rows else f"a seeded {HOLDOUT_FRACTION:.0%} of {train_path}"
    ids = row_ids(train_path)
    if eval_rows and eval_path is not None:
        ids.update(row_ids(eval_path))
    return split, source, ids


def read_tasks(spec: EnvironmentSpec, path: Path) -> list[dict[str, Any]]:
    """The tasks (rows' metadata) of a JSONL file, each checked by the environment (raises TrainingError)."""
    rows = parse_jsonl(path.read_text(encoding="utf-8"), source=str(path))
    problems = [
        f"{path} task {index + 1}: {problem}" for index, task in enumerate(rows) for problem in spec.validate_task(task)
    ]
    if problems:
        raise TrainingError("invalid tasks: " + "; ".join(problems[:5]))
    return rows


def print_summary(summary: dict[str, Any]) -> None:
    overall, heldout = summary["overall"], summary["heldout"]
    console.print(
        f"\n[bold]{summary['env_id']}[/] with {summary['policy']}: {overall['episodes']} rollouts "
        f"({plural(len(summary['groups']), 'task')} × {summary['group_size']}), "
        f"{overall['tokens_per_episode']:.0f} tokens "
        f"and {overall['seconds_per_episode']:.2f} s per episode",
        highlight=False,
    )
    components = sorted(overall["components"])
    table = Table(title="per task group (GRPO learns only from the spread inside a group)")
    for column in ("task", "reward", *components, "spread", "flat components"):
        table.add_column(column, overflow="fold")
    for group in summary["groups"]:
        table.add_row(
            group["task"],
            f"{group['reward_mean']:+.3f}",
            *(f"{group['components'].get(name, 0.0):+.3f}" for name in components),
            f"{group['reward_spread']:.3f}",
            ", ".join(group["flat"]) or "—",
        )
    health = summary["signal_health"]
    table.add_row(
        "[bold]overall[/]",
        f"{overall['reward_mean']:+.3f}",
        *(f"{overall['components'][name]:+.3f}" for name in components),
        f"{health['reward']['mean_spread']:.3f}",
        f"{health['reward']['zero_spread_share']:.0%} of groups flat",
        style="bold",
    )
    console.print(table)
    verdicts = Table(title=f"signal health (flat = constant in ≥ {summary['threshold']:.0%} of groups)")
    for column in ("component", "mean", signal_health.SPREAD_HEADING, signal_health.ZERO_SPREAD_HEADING, "verdict"):
        verdicts.add_column(column)
    for name, item in health.items():
        colour = "red" if item["verdict"] == signal_health.FLAT else "green"
        verdicts.add_row(
            name,
            f"{item['mean']:+.3f}",
            f"{item['mean_spread']:.4f}",
            f"{item['zero_spread_share']:.0%}",
            f"[{colour}]{item['verdict']}[/]",
        )
    console.print(verdicts)
    for callout in summary["callouts"]:
        console.print(f"[yellow]•[/] {callout}", highlight=False)
    console.print(
        f"held-out ({plural(heldout['tasks'], 'task')} from {heldout.get('source', 'the evaluation set')}): "
        f"{evaluation_label(heldout.get('evaluation_measure'))} [bold]{heldout['evaluation_mean']:.0%}[/], "
        f"success {heldout['success_rate']:.0%}, reward {heldout['reward_mean']:+.3f} (training signal, not the score)",
        highlight=False,
    )
    training = summary.get("training")
    if training:
        console.print(
            f"GRPO ({plural(training['steps'], 'step')}, TRL + LoRA rank {training['lora_rank']}, "
            f"{training['seconds']:.1f} s): held-out evaluation [bold]{training['heldout_evaluation_before']:.0%} → "
            f"{training['heldout_evaluation_after']:.0%}[/], success {training['heldout_success_before']:.0%} → "
            f"{training['heldout_success_after']:.0%}; adapter weights moved by "
            f"{training['adapter_change_l2']:.3g} (L2)",
            highlight=False,
        )
        for record in training["history"]:
            console.print(
                f"  step {record['step']}: reward {record['reward_mean']:+.3f}, spread {record['reward_spread']:.3f}, "
                f"loss {record['loss']:.4g}",
                highlight=False,
            )
    for entry in summary["transcripts"]:
        _print_transcripts(entry)
    plots = summary["plots"]
    console.print(
        "\n" + "\n".join(f"{name} plot: {path}" for name, path in plots.items()) + f"\nsummary: {summary['output']}"
    )


OPENING_LINES = 12  # of a task's opening message (a long procedure and tool schema would repeat in every transcript)
SHOWN_MESSAGES = 8  # after the opening: four turns (a reply and the environment's answer each)


def _print_transcripts(entry: dict[str, Any]) -> None:
    """One task's best and worst rollouts: the opening message once, then each rollout's turns (once if identical)."""
    best, worst = entry["best"], entry["worst"]
    messages = best["transcript"]
    opening = messages[0]["content"] if messages and messages[0]["role"] == "user" else None
    if opening is not None:
        lines = opening.splitlines() or [""]
        console.print(f"\n[bold]{escape(entry['task'])}[/]: the opening message", highlight=False)
        for line in lines[:OPENING_LINES]:
            console.print(f"  {line}", highlight=False, markup=False)
        if len(lines) > OPENING_LINES:
            console.print(f"  … {len(lines) - OPENING_LINES} more lines in rollouts.jsonl", highlight=False)
    same = best["transcript"] == worst["transcript"]
    for which, episode in (("best and worst (the same)", best),) if same else (("best", best), ("worst", worst)):
        console.print(
            f"[bold]{which}[/] rollout of {escape(entry['task'])} (reward {episode['result']['reward']:+.3f}):",
            highlight=False,
        )
        turns = episode["transcript"][1:] if opening is not None else episode["transcript"]
        for turn in turns[:SHOWN_MESSAGES]:
            marker = "> " if turn["role"] in {"policy", "assistant"} else "  "
            console.print(f"{marker}{turn['content']}", highlight=False, markup=False)
        hidden = sum(1 for turn in turns[SHOWN_MESSAGES:] if turn["role"] in {"policy", "assistant"})
        if hidden:
            console.print(f"  … {hidden} more turn(s) in rollouts.jsonl", highlight=False)
