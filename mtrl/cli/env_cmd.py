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
from mtrl.envs.contract import EpisodeResult, TaskError, closing, run_episode
from mtrl.envs.registry import (
    EnvironmentNotFoundError,
    EnvironmentSpec,
    InvalidEnvironmentError,
    list_environments,
    load_spec,
)
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
    try:
        spec = load_spec(env_id)
        problems = spec.smoke_check()
    except EnvironmentNotFoundError as error:
        fail(str(error), as_json=as_json)
    except InvalidEnvironmentError as error:
        problems = error.problems
    except SandboxUnavailableError as error:
        fail(str(error), as_json=as_json)
    if as_json:
        print_json({"env_id": env_id, "ok": not problems, "problems": problems})
    elif problems:
        for problem in problems:
            console.print(f"[red]✗[/] {problem}", highlight=False)
    else:
        console.print(f"[green]✓[/] {env_id}: contract complete, smoke episode scored", highlight=False)
    if problems:
        raise typer.Exit(EXIT_INVALID)


SAMPLE_TASKS = ("sample/train.jsonl", "sample/eval.jsonl")


def _random_sample_task(spec: EnvironmentSpec, seed: int | None) -> dict[str, Any] | None:
    """A random row's metadata from the environment's sample dataset (None when it ships none)."""
    rows: list[dict[str, Any]] = []
    for name in SAMPLE_TASKS:
        path = spec.path / name
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                row = json.loads(line) if line.strip() else None
                if isinstance(row, dict) and isinstance(row.get("metadata"), dict):
                    rows.append(row["metadata"])
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
    env = spec.make()
    try:
        transcript, result = run_episode(env, task, turns)
    except TaskError as error:
        fail(f"task is invalid for '{env_id}': {error}", code=EXIT_INVALID, as_json=as_json)
    except SandboxUnavailableError as error:
        fail(str(error), as_json=as_json)
    unused = len(turns) - sum(1 for turn in transcript if turn["role"] == "policy")
    if as_json:
        print_json(
            {"env_id": env_id, "task": task, "transcript": transcript, "done": env.done, "unused_actions": unused}
            | {"result": result.to_dict()}
        )
        return
    for turn in transcript:
        if turn["role"] == "policy":
            console.print(f"[bold cyan]> {turn['content']}[/]", highlight=False, markup=True)
        else:
            console.print(turn["content"], highlight=False, markup=False)
    if unused:
        console.print(f"[yellow]{unused} action(s) not played: the episode ended first[/]")
    _print_result(result, task)


def _say(text: str, *, style: str | None = None) -> None:
    console.print(text, highlight=False, markup=False, style=style)
    console.file.flush()  # a game: every line must reach a pipe or a terminal as soon as it is printed


def _play_interactively(spec: EnvironmentSpec, task: dict[str, Any]) -> None:
    """Show the first observation at once, then one environment reply per line read, until done or end of input."""
    with closing(spec.make()) as env:
        try:
            _say(env.reset(task))
            interactive = sys.stdin.isatty()
            while not env.done:
                if interactive:
                    console.print("[bold cyan]> [/]", end="")
                    console.file.flush()
                line = sys.stdin.readline()
                if not line:  # end of input: score the episode as it stands
                    _say("(end of input: the episode is scored as it stands)", style="yellow")
                    break
                if not line.strip():
                    continue
                _say(env.step(line.strip()).observation)
        except TaskError as error:
            fail(f"task is invalid for '{spec.env_id}': {error}", code=EXIT_INVALID)
        except SandboxUnavailableError as error:
            fail(str(error))
        _print_result(env.result(), task)


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
