"""`mtrl env`: list reward environments and play an episode by hand.

``mtrl env play wordle --answer beach --action raise --action beach`` prints each turn (action and
observation; for wordle the G/Y/X feedback), then the reward and each of its components. Actions come from
``--action`` (repeatable) or, when none is given, one per line on standard input.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.table import Table

from mtrl.cli import env_try
from mtrl.cli.output import EXIT_INVALID, console, fail, print_json
from mtrl.envs.contract import TaskError, run_episode
from mtrl.envs.registry import EnvironmentNotFoundError, InvalidEnvironmentError, list_environments, load_spec
from mtrl.sandbox import SandboxUnavailableError

app = typer.Typer(
    help="Reward environments: list them, play an episode by hand, try one locally.", no_args_is_help=True
)
env_try.register(app)  # `mtrl env try` (local GRPO dry run) lives in its own module


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
    answer: Annotated[str | None, typer.Option(help="Shortcut for a task with this 'answer' (e.g. wordle).")] = None,
    task_json: Annotated[
        str | None,
        typer.Option("--task", help='The task row\'s metadata as JSON, e.g. \'{"info": {"task_id": "median"}}\'.'),
    ] = None,
    actions: Annotated[
        list[str] | None, typer.Option("--action", help="One policy turn (repeatable); default: lines on stdin.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Play one episode with the given actions and print the transcript and the reward."""
    try:
        spec = load_spec(env_id)
        task = _task_from_options(task_json, answer, spec.example_task)
    except (EnvironmentNotFoundError, InvalidEnvironmentError, ValueError) as error:
        fail(str(error), as_json=as_json)
    problems = spec.validate_task(task)
    if problems:
        fail(f"task is invalid for '{env_id}': " + "; ".join(problems), code=EXIT_INVALID, as_json=as_json)
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
    table = Table(title=f"reward {result.reward:+.4f} ({'success' if result.success else 'no success'})")
    for column in ("name", "value", "type"):
        table.add_column(column)
    for entry in result.metrics_list():
        table.add_row(entry["name"], f"{entry['value']:+.4f}", entry["type"])
    console.print(table)
