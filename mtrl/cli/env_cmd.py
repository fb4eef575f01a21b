"""`mtrl env`: list reward environments and play an episode by hand.

``mtrl env play wordle`` is a game: a random task from the environment's sample (unless ``--task``/``--answer``),
the first observation at once, the environment's reply to each line typed, and at the end the reward, each of its
components and the answer. ``--action`` (repeatable) plays a scripted episode instead; with ``--json`` the lines on
standard input are the script.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Annotated, Any

import typer
from rich.table import Table

from mtrl.cli.output import EXIT_INVALID, console, fail, print_json
from mtrl.contracts.environment import EpisodeResult, TaskError
from mtrl.envs.registry import (
    EnvironmentNotFoundError,
    EnvironmentSpec,
    InvalidEnvironmentError,
    list_environments,
    load_spec,
)
from mtrl.envs.rollout import Message, Rollout, StopEpisode, scripted
from mtrl.envs.rollout import play as play_episode
from mtrl.sandbox import SandboxUnavailableError

app = typer.Typer(
    help="Reward environments: list them, play an episode by hand, try one locally.", no_args_is_help=True
)


@app.command("list")
def list_command(
    show_all: Annotated[bool, typer.Option("--all", help="Include the template in custom-environments/.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List built-in and custom environments."""
    rows: list[dict[str, str]] = []
    for env_id, source in list_environments(include_template=show_all):
        try:
            spec = load_spec(env_id, custom=source == "custom")
            description, problem = spec.description, ""
        except InvalidEnvironmentError as error:
            description, problem = "", "; ".join(error.problems)
        rows.append({"env_id": env_id, "source": source, "description": description, "problem": problem})
    if as_json:
        print_json(rows)
        return
    table = Table(title="reward environments")
    for column in ("id", "source", "description"):
        table.add_column(column, overflow="fold")
    for row in rows:
        text = row["description"] or f"[red]invalid: {row['problem']}[/]"
        table.add_row(row["env_id"], row["source"], text)
    console.print(table)


@app.command("check")
def check(
    env_id: Annotated[str, typer.Argument(help="Environment id (built-in or custom).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Run the deploy-time check: contract complete, EXAMPLE_TASK valid, one smoke episode scores."""
    from rich.markup import escape  # noqa: PLC0415

    from mtrl.envs.registry import check_environment  # noqa: PLC0415 - only this command needs it

    try:
        checked = check_environment(env_id)
    except SandboxUnavailableError as error:
        fail(str(error), as_json=as_json)
    problems = checked.problems
    if not checked.found:
        fail(problems[0], as_json=as_json)  # no such environment: a usage error
    problems = problems + _sample_pair_problems(env_id)
    if as_json:
        print_json(
            {
                "env_id": env_id,
                "ok": not problems,
                "problems": problems,
                "notes": checked.notes,
                "smoke_reward": checked.smoke_reward,
            }
        )
    else:
        for problem in problems:
            console.print(f"[red]✗[/] {escape(problem)}", highlight=False)
        for note in checked.notes:
            console.print(f"  note: {note}", highlight=False, markup=False)
        if not problems:
            console.print(
                f"[green]✓[/] {env_id}: contract complete, smoke episode scored reward {checked.smoke_reward:+.3f}",
                highlight=False,
            )
        else:
            console.print(f"{len(problems)} problem(s) to fix in '{env_id}'", highlight=False)
    if problems:
        raise typer.Exit(EXIT_INVALID)


SAMPLE_TASKS = ("sample/train.jsonl", "sample/eval.jsonl")


def _sample_pair_problems(env_id: str) -> list[str]:
    """The sample datasets as a run of them is validated: `mtrl demo` and `env try` train on sample/train.jsonl and
    evaluate on sample/eval.jsonl, and the pipeline refuses any row in both."""
    from mtrl.cli.validate_cmd import dataset_pair_problems  # noqa: PLC0415 - the validator loads for this check
    from mtrl.envs.registry import load_spec  # noqa: PLC0415

    try:
        spec = load_spec(env_id)
    except (LookupError, ValueError):
        return []  # the environment's own problems are reported already
    train, held_out = (spec.path / name for name in SAMPLE_TASKS)
    if not (train.is_file() and held_out.is_file()):
        return []
    return [f"sample dataset: {problem}" for problem in dataset_pair_problems(train, held_out, environment=env_id)]


def _random_sample_task(spec: EnvironmentSpec, seed: int | None) -> dict[str, Any] | None:
    """A random row's metadata from the environment's sample dataset (None when it ships none)."""
    from mtrl.validation.rows import RowError, iter_rows  # noqa: PLC0415 - only for `mtrl env play`

    rows: list[dict[str, Any]] = []
    for name in SAMPLE_TASKS:
        path = spec.path / name
        if path.is_file():
            try:
                rows += [row["metadata"] for _number, row in iter_rows(path) if isinstance(row.get("metadata"), dict)]
            except RowError as error:
                raise ValueError(f"{path} {error}") from None
    return random.Random(seed).choice(rows) if rows else None  # noqa: S311 - a game, not cryptography


def _task_from_options(task_json: str | None, answer: str | None, example: dict[str, Any]) -> dict[str, Any]:
    if task_json is not None and answer is not None:
        raise ValueError("give --task or --answer, not both")
    if task_json is not None:
        try:
            task = json.loads(task_json)
        except json.JSONDecodeError as error:
            raise ValueError(f"--task is not valid JSON ({error.msg})") from None
        if not isinstance(task, dict):
            raise ValueError("--task must be a JSON object (a dataset row's metadata)")
        task.setdefault("prompt", "")
        return task
    if answer is not None:
        return {"prompt": example.get("prompt", ""), "answer": answer}
    return example


@app.command("play")
def play(
    env_id: Annotated[str, typer.Argument(help="Environment id, e.g. wordle or ask_to_code.")],
    *,
    answer: Annotated[str | None, typer.Option(help="Shortcut for a task with this 'answer' (e.g. wordle).")] = None,
    task_json: Annotated[
        str | None,
        typer.Option("--task", help='The task row\'s metadata as JSON, e.g. \'{"info": {"task_id": "median"}}\'.'),
    ] = None,
    actions: Annotated[
        list[str] | None,
        typer.Option("--action", help="One policy turn (repeatable): a scripted episode instead of a game."),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed for the random sample task (default: a new one).")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON (the script is --action or stdin lines).")
    ] = False,
) -> None:
    """Play an episode: interactively (a line per move), or scripted with --action; then the reward and the answer."""
    try:
        spec = load_spec(env_id)
        sampled = None if task_json or answer else _random_sample_task(spec, seed)
        task = sampled or _task_from_options(task_json, answer, spec.example_task)
    except (EnvironmentNotFoundError, InvalidEnvironmentError, ValueError) as error:
        fail(str(error), as_json=as_json)
    problems = spec.validate_task(task)
    if problems:
        fail(f"task is invalid for '{env_id}': " + "; ".join(problems), code=EXIT_INVALID, as_json=as_json)
    if not actions and not as_json:
        _play_interactively(spec, task)
        return
    turns = list(actions) if actions else [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not turns:
        fail("no actions: pass --action (repeatable) or lines on stdin", as_json=as_json)
    rollout = play_episode(spec.make(), task, scripted(turns), spec.rules())
    _fail_on_episode_error(spec, rollout)
    assert rollout.result is not None  # no error: result() returned
    unused = len(turns) - rollout.turns
    if as_json:
        print_json(
            {
                "env_id": env_id,
                "task": task,
                "system_prompt": spec.system_prompt,
                "transcript": rollout.transcript,
                "done": rollout.ended == "done",
                "ended": rollout.ended,
                "unused_actions": unused,
            }
            | {"result": rollout.result.to_dict()}
        )
        return
    for message in rollout.messages:
        if message["role"] == "system":
            _say(f"[system] {message['content']}", style="dim")
        elif message["role"] == "assistant":
            console.print(f"[bold cyan]> {message['content']}[/]", highlight=False, markup=True)
        else:
            console.print(message["content"], highlight=False, markup=False)
    if unused:
        console.print(f"[yellow]{unused} action(s) not played: the episode ended first[/]")
    _print_result(rollout.result, task)


def _fail_on_episode_error(spec: EnvironmentSpec, rollout: Rollout) -> None:
    """A bad task or a missing sandbox is the user's to fix (clean exit); anything else is raised as it was."""
    if isinstance(rollout.error, TaskError):
        fail(f"task is invalid for '{spec.env_id}': {rollout.error}", code=EXIT_INVALID)
    if isinstance(rollout.error, SandboxUnavailableError):
        fail(str(rollout.error))
    rollout.raise_error()


def _say(text: str, *, style: str | None = None) -> None:
    console.print(text, highlight=False, markup=False, style=style)
    console.file.flush()  # a game: every line must reach a pipe or a terminal as soon as it is printed


def _play_interactively(spec: EnvironmentSpec, task: dict[str, Any]) -> None:
    """Show each observation as it comes, read one action per line, until the episode ends or input does."""
    interactive = sys.stdin.isatty()
    shown = 0  # messages already on screen

    def show_new(messages: list[Message]) -> None:
        nonlocal shown
        for message in messages[shown:]:
            if message["role"] == "system":
                _say(f"[system] {message['content']}", style="dim")
            elif message["role"] == "user":
                _say(message["content"])
        shown = len(messages)

    def read_action(messages: list[Message], *, timeout_s: float | None) -> str:
        show_new(messages)
        while True:
            if interactive:
                console.print("[bold cyan]> [/]", end="")
                console.file.flush()
            line = sys.stdin.readline()
            if not line:  # end of input: score the episode as it stands
                _say("(end of input: the episode is scored as it stands)", style="yellow")
                raise StopEpisode
            if line.strip():
                return line.strip()

    rollout = play_episode(spec.make(), task, read_action, spec.rules())
    if rollout.ended != "policy_stopped":
        show_new(rollout.messages)  # the last observation
    _fail_on_episode_error(spec, rollout)
    assert rollout.result is not None  # no error: result() returned
    _print_result(rollout.result, task)


def _print_result(result: EpisodeResult, task: dict[str, Any]) -> None:
    table = Table(title=f"reward {result.reward:+.4f} ({'success' if result.success else 'no success'})")
    for column in ("name", "value", "type"):
        table.add_column(column)
    for entry in result.metrics_list():
        table.add_row(entry["name"], f"{entry['value']:+.4f}", entry["type"])
    console.print(table)
    answer = task.get("answer")
    shown = answer if isinstance(answer, str) and answer else json.dumps(task.get("info") or task, sort_keys=True)
    _say(f"the answer was: {shown.upper() if isinstance(answer, str) and answer else shown}")
