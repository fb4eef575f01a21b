"""`mtrl demo`: the offline end-to-end demo (``mtrl.cli.demo.run``); its libraries load only when it runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from mtrl.cli.output import EXIT_INVALID, EXIT_USAGE, console, fail


def _hyperparameters(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; a value is read as JSON when it parses (``8``, ``0.5``, ``true``), else as text."""
    values: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            fail(f"--hyperparameter needs KEY=VALUE (got {pair!r})", code=EXIT_USAGE)
        try:
            values[key.strip()] = json.loads(text)
        except json.JSONDecodeError:
            values[key.strip()] = text
    return values


def demo(
    work_dir: Annotated[
        Path, typer.Option(help="Where the demo keeps its synthesized app, logs and the run's outputs.")
    ] = Path(".build/demo"),
    env: Annotated[
        str,
        typer.Option(
            "--env",
            help="The environment to train, built-in or custom (its sample/train.jsonl and sample/eval.jsonl).",
        ),
    ] = "wordle",
    policy: Annotated[
        str | None,
        typer.Option(
            help="features (the built-ins' hand-made feature agents: fast, not a language model) or hf:MODEL "
            "(TRL GRPO + LoRA; hf:tiny-random or a local path). Default: features where it exists, else "
            "hf:tiny-random.",
        ),
    ] = None,
    hyperparameter: Annotated[
        list[str] | None,
        typer.Option(
            "--hyperparameter",
            "-H",
            help="KEY=VALUE for the run's hyperparameters (repeatable), e.g. -H steps=1 -H max_new_tokens=16.",
        ),
    ] = None,
    keep_emulator: Annotated[
        bool,
        typer.Option(
            "--keep-emulator",
            help="Keep the emulator running after the demo, printing how to reach it from the CLI (Ctrl-C stops "
            "it; docs/emulator.md).",
        ),
    ] = False,
) -> None:
    """Deploy the real pipeline into an embedded AWS emulator, train on the sample dataset, reject a bad one."""
    from mtrl.cli.demo.plan import DemoError, plan_for  # noqa: PLC0415 - the demo's libraries load when it runs
    from mtrl.cli.demo.run import run_demo  # noqa: PLC0415
    from mtrl.emulator import EmulatorError  # noqa: PLC0415
    from mtrl.envs.registry import EnvironmentNotFoundError, InvalidEnvironmentError  # noqa: PLC0415

    try:
        plan = plan_for(env, policy=policy, hyperparameters=_hyperparameters(hyperparameter or []))
    except (DemoError, EnvironmentNotFoundError, InvalidEnvironmentError) as error:
        fail(str(error), code=EXIT_USAGE)
    try:
        result = run_demo(work_dir=work_dir.resolve(), console=console, plan=plan, keep_emulator=keep_emulator)
    except (DemoError, EmulatorError) as error:
        fail(str(error), code=EXIT_INVALID)
    if not result.ok:
        raise typer.Exit(EXIT_INVALID)
