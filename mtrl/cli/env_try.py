"""`mtrl env try ENV_ID`: the reward designer's dry run — does this reward give GRPO a signal for this policy?

Two kinds of policy:

- ``--policy features`` (wordle, ask_to_code, sop_support): the small log-linear policy over a hand-written agent's
  features, trained with the local GRPO backend (fast, offline; says nothing about how a language model behaves);
- ``--policy hf:MODEL`` / ``hf:tiny-random`` / ``openai:BASE_URL --model NAME``: a language model playing any
  environment through its contract alone (``mtrl.llm``), groups of rollouts per task, optionally
  ``--train-steps N`` of GRPO with TRL + LoRA.

Both report the held-out external evaluation (``mtrl.health.evaluation``: the environment's EVALUATION, or its
success as
the labelled fallback) and success on the evaluation set — never the training reward, reported beside them — and
per-component signal health with the one verdict rule of ``mtrl.health.signal_health``. A flat reward is a finding,
reported, not a failure: exit code 0 unless ``--strict`` (then 1 when the reward is flat); 1 when training failed,
2 for usage errors, 130 when interrupted (the episodes played so far are kept).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mtrl.cli.local_runs import try_output
from mtrl.cli.output import EXIT_INVALID, EXIT_USAGE, console, fail, print_json
from mtrl.contracts.text import plural
from mtrl.envs.registry import EnvironmentNotFoundError, InvalidEnvironmentError, load_spec
from mtrl.health import signal_health
from mtrl.health.evaluation import label as evaluation_label

if TYPE_CHECKING:
    from mtrl.local.config import TrainConfig
    from mtrl.local.run import DirectoryStore
    from mtrl.local.trainer import TrainingState

SAMPLE_TRAIN = Path("sample") / "train.jsonl"
SAMPLE_EVAL = Path("sample") / "eval.jsonl"


def register(app: typer.Typer) -> None:
    """Add the ``try`` command to a command group (`mtrl env` lists it lazily: ``mtrl.cli``'s command table)."""
    app.command("try")(try_environment)


def try_environment(
    env_id: Annotated[str, typer.Argument(help="Environment id (built-in or custom), e.g. wordle.")],
    *,
    steps: Annotated[int | None, typer.Option(help="GRPO steps (default: the environment's local default).")] = None,
    seed: Annotated[int, typer.Option(help="Random seed; the same seed gives the same run.")] = 0,
    dataset: Annotated[
        Path | None, typer.Option(help="Training JSONL (default: the environment's sample/train.jsonl).")
    ] = None,
    eval_dataset: Annotated[
        Path | None,
        typer.Option(help="Held-out JSONL (default: sample/eval.jsonl, or a seeded share of the training rows)."),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            help="Directory for state, summary.json and the plots (default: a new folder under $MTRL_RUNS_DIR, "
            "else $XDG_STATE_HOME/mtrl/runs-local, else ~/.local/state/mtrl/runs-local)."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    policy: Annotated[
        str | None,
        typer.Option(
            help="features | hf:MODEL (hub id or local path) | hf:tiny-random | openai:BASE_URL (with --model). "
            "Default: features where the environment has a features agent, else hf:tiny-random."
        ),
    ] = None,
    model: Annotated[str | None, typer.Option(help="The model name an openai:BASE_URL endpoint serves.")] = None,
    temperature: Annotated[float, typer.Option(help="Language model: sampling temperature.")] = 1.0,
    top_p: Annotated[float, typer.Option(help="Language model: nucleus sampling top-p.")] = 1.0,
    # 64: sop_support's reference actions (a tool call as JSON) need about 40 tokens.
    max_new_tokens: Annotated[int, typer.Option(help="Language model: tokens per reply at most.")] = 64,
    group_size: Annotated[int, typer.Option(help="Language model: rollouts per task (a GRPO group).")] = 4,
    tasks: Annotated[int, typer.Option(help="Language model: training tasks rolled out.")] = 4,
    eval_tasks: Annotated[int, typer.Option(help="Language model: held-out tasks evaluated.")] = 8,
    max_turns: Annotated[
        int | None,
        typer.Option(
            help="Lower the environment's own turn limit (its MAX_TURNS) for a quick check; default: the "
            "environment's, as in training."
        ),
    ] = None,
    train_steps: Annotated[int, typer.Option(help="Language model (hf:…): GRPO steps with TRL + LoRA.")] = 0,
    tasks_per_step: Annotated[int, typer.Option(help="Language model: tasks per GRPO step.")] = 2,
    learning_rate: Annotated[float, typer.Option(help="Language model: LoRA learning rate.")] = 5e-4,
    strict: Annotated[
        bool, typer.Option("--strict", help="Exit 1 when the reward is flat (a finding, reported either way).")
    ] = False,
) -> None:
    """Dry-run an environment's reward with a policy and report its signal health and held-out success."""
    # The trainers (numpy, the language-model stack) load when a try starts, never for --help.
    from mtrl.local.agents import AGENTS  # noqa: PLC0415

    _refuse_what_a_run_would_refuse(env_id, dataset, eval_dataset, as_json=as_json)
    chosen = policy or ("features" if env_id in AGENTS else "hf:tiny-random")
    if chosen == "features" and env_id not in AGENTS:
        # Asked for by name: training another policy under this one's name would report the wrong thing.
        fail(
            f"--policy features: there is no hand-written features agent for '{env_id}' (there is one for "
            f"{', '.join(sorted(AGENTS))}, in mtrl/local/agents/); try a language model instead: "
            f"`mtrl env try {env_id}` (hf:tiny-random, a plumbing check) or --policy hf:MODEL",
            as_json=as_json,
        )
    if chosen != "features":
        if steps is not None:
            fail("--steps is for --policy features; a language model trains with --train-steps N", as_json=as_json)
        from mtrl.cli.env_try_llm import try_with_language_model  # noqa: PLC0415

        try_with_language_model(
            env_id,
            policy=chosen,
            defaulted=policy is None,
            values={
                "model": model,
                "temperature": temperature,
                "top_p": top_p,
                "max_new_tokens": max_new_tokens,
                "group_size": group_size,
                "tasks": tasks,
                "eval_tasks": eval_tasks,
                "max_turns": max_turns,
                "seed": seed,
                "train_steps": train_steps,
                "tasks_per_step": tasks_per_step,
                "learning_rate": learning_rate,
            },
            dataset=dataset,
            eval_dataset=eval_dataset,
            output=output,
            as_json=as_json,
            strict=strict,
        )
        return
    if train_steps:
        fail(
            "--train-steps is for a language model (--policy hf:…); the features policy trains with --steps N",
            as_json=as_json,
        )
    _try_features(
        env_id,
        steps=steps,
        seed=seed,
        dataset=dataset,
        eval_dataset=eval_dataset,
        output=output,
        as_json=as_json,
        strict=strict,
    )


def _refuse_what_a_run_would_refuse(
    env_id: str, dataset: Path | None, eval_dataset: Path | None, *, as_json: bool
) -> None:
    """The training and evaluation files this try uses, validated as the pipeline's Validate does: a pair it would
    refuse (a row in both, say) is refused here (exit 1), not first by the run."""
    from mtrl.cli.validate_cmd import dataset_pair_problems  # noqa: PLC0415

    try:
        spec = load_spec(env_id)
    except (EnvironmentNotFoundError, InvalidEnvironmentError):
        return  # each path reports it in its own words
    train = dataset or spec.path / SAMPLE_TRAIN
    held_out = eval_dataset or (spec.path / SAMPLE_EVAL if dataset is None else None)
    if held_out is None or not (train.is_file() and held_out.is_file()):
        return
    problems = dataset_pair_problems(train, held_out, environment=env_id)
    if problems:
        shown = "; ".join(problems[:5]) + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
        fail(f"a run would refuse these datasets: {shown}", code=EXIT_INVALID, as_json=as_json)


def _try_features(
    env_id: str,
    *,
    steps: int | None,
    seed: int,
    dataset: Path | None,
    eval_dataset: Path | None,
    output: Path | None,
    as_json: bool,
    strict: bool,
) -> None:
    from mtrl.local.agents import NoAgentError  # noqa: PLC0415
    from mtrl.local.config import ConfigError, TrainConfig  # noqa: PLC0415
    from mtrl.local.run import DirectoryStore, advance_run, create_run, parse_jsonl, read_summary  # noqa: PLC0415
    from mtrl.local.trainer import TrainingError  # noqa: PLC0415

    try:
        spec = load_spec(env_id)
        values: dict[str, Any] = {"seed": seed, "policy": "features"}
        if steps is not None:
            values["steps"] = steps
        config = TrainConfig.from_mapping(env_id, values)
    except (EnvironmentNotFoundError, InvalidEnvironmentError, ConfigError) as error:
        fail(str(error), as_json=as_json)
    train_path = dataset or spec.path / SAMPLE_TRAIN
    eval_path = eval_dataset or (spec.path / SAMPLE_EVAL if dataset is None else None)
    if not train_path.is_file():
        fail(f"no dataset: {train_path} does not exist (pass --dataset FILE.jsonl)", as_json=as_json)
    out_dir = output or try_output(env_id)
    if (out_dir / "state.json").exists():
        fail(f"{out_dir} already holds a run; pass another --output", as_json=as_json)
    store = DirectoryStore(out_dir)
    started = time.perf_counter()
    try:
        train_rows = parse_jsonl(train_path.read_text(encoding="utf-8"), source=str(train_path))
        eval_rows = (
            parse_jsonl(eval_path.read_text(encoding="utf-8"), source=str(eval_path))
            if eval_path is not None and eval_path.is_file()
            else None
        )
        create_run(store, config, train_rows, eval_rows)
        if as_json:
            advance_run(store)
        else:
            _train_with_progress(store, config)
    except (TrainingError, NoAgentError) as error:
        fail(str(error), code=EXIT_INVALID if isinstance(error, TrainingError) else EXIT_USAGE, as_json=as_json)
    summary = read_summary(store)
    if summary is None:  # advance_run writes it when the state is done; its absence is a bug, not user error
        fail("training ended without a summary", code=EXIT_INVALID, as_json=as_json)
    summary["wall_seconds"] = round(time.perf_counter() - started, 2)
    summary["output"] = str(out_dir)
    # The untrained policy's groups are the reward designer's view (a trained policy converges and flattens).
    reward_health = summary.get("signal_health_first_step", {}).get("reward", {})
    no_signal = bool(summary["steps"]) and signal_health.is_flat(reward_health.get("zero_spread_share", 0.0))
    if as_json:
        print_json(summary)
    else:
        _print_summary(summary)
    if no_signal and not as_json:
        console.print(
            "[bold red]no learning signal:[/] "
            + signal_health.explain_flat("reward", reward_health.get("zero_spread_share", 1.0))
        )
    if no_signal and strict:
        raise typer.Exit(EXIT_INVALID)


def _train_with_progress(store: DirectoryStore, config: TrainConfig) -> None:
    from mtrl.local.run import advance_run  # noqa: PLC0415

    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[detail]}"),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task(f"{config.env_id} GRPO", total=config.steps, detail="evaluating the untrained policy")

        def on_step(state: TrainingState, record: dict[str, Any]) -> None:
            detail = f"reward {record['reward_mean']:+.3f}  success {record['success_rate']:.0%}"
            progress.update(bar, completed=state.step, detail=detail)

        state = advance_run(store, on_step=on_step)
        progress.update(bar, completed=state.step, detail="done")


def _print_summary(summary: dict[str, Any]) -> None:
    heldout = summary["heldout"]
    console.print(
        f"policy: features — a log-linear policy over the hand-written {summary['env_id']} agent's candidate "
        "actions (mtrl/local/agents/), not a language model; for one: --policy hf:MODEL",
        highlight=False,
    )
    console.print(
        f"\n[bold]{summary['env_id']}[/]: {plural(summary['steps'], 'GRPO step')} in {summary['wall_seconds']:.1f} s; "
        f"held-out ({plural(heldout['tasks'], 'task')}): {evaluation_label(heldout.get('evaluation_measure'))} "
        f"[bold]{_pct(heldout.get('evaluation_before'))} → {_pct(heldout.get('evaluation_after'))}[/]; "
        f"success {_pct(heldout['success_before'])} → {_pct(heldout['success_after'])}; "
        f"reward {_num(heldout['reward_before'])} → {_num(heldout['reward_after'])} (training signal, not the score)"
    )
    table = Table(title="signal health per reward component (GRPO learns only from spread inside a group)")
    spread, zero = signal_health.SPREAD_HEADING, signal_health.ZERO_SPREAD_HEADING
    for column in ("component", f"{spread}, step 1", f"{zero}, step 1", f"{zero}, whole run", "verdict"):
        table.add_column(column)
    first = summary.get("signal_health_first_step", {})
    ordered = sorted(summary["signal_health"].items(), key=lambda item: (item[0] != "reward", item[0]))
    for name, health in ordered:
        start = first.get(name, health)
        table.add_row(
            name,
            f"{start['mean_spread']:.4f}",
            f"{start['zero_spread_share']:.0%}",
            f"{health['zero_spread_share']:.0%}",
            _verdict(start),
        )
    console.print(table)
    weights = ", ".join(f"{name} {value:+.2f}" for name, value in summary["weights"].items())
    console.print(f"policy weights: {weights}")
    console.print(f"plot: {summary['plot']}\nsummary: {Path(summary['output']) / 'summary.json'}")


def _verdict(health: dict[str, float]) -> str:
    share = health["zero_spread_share"]
    if signal_health.is_flat(share):
        return f"[red]flat: constant in {share:.0%} of groups[/]"
    return f"[green]signal[/] (flat in {share:.0%})"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:+.3f}"
