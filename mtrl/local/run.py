"""A local training run persisted in a store (a directory, or the run's S3 output prefix).

Layout under the store: ``tasks.json`` (train/held-out split, written once), ``state.json`` (the resumable
training state, rewritten after every chunk), ``cancel`` (a marker), and at the end ``summary.json`` and
``training.png``. ``advance_run`` is what both ``mtrl env try`` and the backend adapter's ``status`` call.

The ``features`` policy trains in resumable chunks (``mtrl.local.trainer``); a language-model policy
(``hf:MODEL``, any environment) trains whole in one call (``mtrl.local.llm_run``), into the same state shape.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mtrl.envs.registry import EnvironmentSpec, load_spec
from mtrl.health.emf import EpisodeMetrics
from mtrl.local.agents import Agent, agent_for
from mtrl.local.config import TrainConfig
from mtrl.local.policy import Adam, LogLinearPolicy
from mtrl.local.report import plot_png, summarize
from mtrl.local.trainer import Task, TaskSplit, Trainer, TrainingError, TrainingState, new_state
from mtrl.validation.rows import RowError, iter_rows

STATE = "state.json"
TASKS = "tasks.json"
CANCEL = "cancel"
SUMMARY = "summary.json"
PLOT = "training.png"


class Store(Protocol):
    def read(self, name: str) -> bytes | None: ...

    def write(self, name: str, data: bytes, *, content_type: str) -> str:
        """Store ``data`` under ``name``; returns where it is (a path or an s3:// URI)."""
        ...


class DirectoryStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def read(self, name: str) -> bytes | None:
        path = self.directory / name
        return path.read_bytes() if path.is_file() else None

    def write(self, name: str, data: bytes, *, content_type: str) -> str:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / name
        temporary = path.with_suffix(path.suffix + ".tmp")
        temporary.write_bytes(data)
        temporary.replace(path)  # atomic: a reader never sees half a state file
        return str(path)


def parse_jsonl(text: str, *, source: str) -> list[dict[str, Any]]:
    """Dataset rows' ``metadata`` objects: what an environment's ``reset`` takes."""
    tasks: list[dict[str, Any]] = []
    try:
        for number, row in iter_rows(text):
            metadata = row.get("metadata")
            if not isinstance(metadata, dict):
                raise TrainingError(f"{source} line {number}: expected an object with a 'metadata' object")
            tasks.append(metadata)
    except RowError as error:
        raise TrainingError(f"{source} {error}") from None
    return tasks


@dataclass
class LoadedRun:
    spec: EnvironmentSpec
    agent: Agent | None  # None for a language-model policy
    trainer: Trainer | None
    state: TrainingState
    tasks: TaskSplit


def _initial_state(config: TrainConfig) -> TrainingState:
    if not config.uses_language_model:
        return new_state(config, agent_for(config.env_id))
    # A language-model run keeps no log-linear weights (its weights are the LoRA adapter), nor their optimiser.
    return TrainingState(
        config=config, policy=LogLinearPolicy(()), optimiser=Adam(learning_rate=config.learning_rate), rng_state={}
    )


def create_run(
    store: Store,
    config: TrainConfig,
    train_rows: Sequence[Task],
    eval_rows: Sequence[Task] | None = None,
) -> TrainingState:
    """Check the environment and tasks, split them, and write the initial state (idempotent per store)."""
    existing = store.read(STATE)
    if existing is not None:
        return TrainingState.from_dict(json.loads(existing))
    spec = load_spec(config.env_id)
    state = _initial_state(config)  # refuses an environment the features policy has no agent for
    problems = [
        f"task {index + 1}: {problem}"
        for index, task in enumerate([*train_rows, *(eval_rows or [])])
        for problem in spec.validate_task(task)
    ]
    if problems:
        raise TrainingError("invalid tasks: " + "; ".join(problems[:5]))
    split = TaskSplit.from_rows(train_rows, eval_rows, holdout_fraction=config.holdout_fraction, seed=config.seed)
    store.write(
        TASKS,
        json.dumps({"train": list(split.train), "holdout": list(split.holdout)}).encode(),
        content_type="application/json",
    )
    _save(store, state)
    return state


def load_run(store: Store) -> LoadedRun:
    raw_state, raw_tasks = store.read(STATE), store.read(TASKS)
    if raw_state is None or raw_tasks is None:
        raise TrainingError("no local training run in this location (it was never submitted, or was removed)")
    state = TrainingState.from_dict(json.loads(raw_state))
    tasks = json.loads(raw_tasks)
    spec = load_spec(state.config.env_id)
    split = TaskSplit(train=tasks["train"], holdout=tasks["holdout"])
    if state.config.uses_language_model:
        return LoadedRun(spec=spec, agent=None, trainer=None, state=state, tasks=split)
    agent = agent_for(state.config.env_id)
    trainer = Trainer(spec, agent, split, env_args=state.config.env_args)
    return LoadedRun(spec=spec, agent=agent, trainer=trainer, state=state, tasks=split)


def cancel_requested(store: Store) -> bool:
    return store.read(CANCEL) is not None


def request_cancel(store: Store) -> None:
    store.write(CANCEL, b"cancelled\n", content_type="text/plain")


def advance_run(
    store: Store,
    *,
    time_budget_s: float | None = None,
    max_steps: int | None = None,
    on_step: Callable[[TrainingState, dict[str, Any]], None] | None = None,
    extra_summary: Mapping[str, Any] | None = None,
    metrics: EpisodeMetrics | None = None,
) -> TrainingState:
    """Train for one chunk, persist the state, and write the summary and plot when the run completes; ``metrics``
    publishes each step's environment-side metrics."""
    loaded = load_run(store)
    if loaded.state.done:
        return loaded.state
    if loaded.trainer is None:
        from mtrl.local.llm_run import train_language_model  # noqa: PLC0415 - torch only for a language model

        state = train_language_model(loaded.spec, loaded.tasks, loaded.state, on_step=on_step)
    else:
        loaded.trainer.metrics = metrics
        state = loaded.trainer.advance(loaded.state, time_budget_s=time_budget_s, max_steps=max_steps, on_step=on_step)
    if state.done:
        plot_uri = store.write(PLOT, plot_png(state), content_type="image/png")
        summary = summarize(state, extra={"plot": plot_uri, **dict(extra_summary or {})})
        store.write(SUMMARY, json.dumps(summary, indent=2, sort_keys=True).encode(), content_type="application/json")
    _save(store, state)  # last: a state marked done implies the summary and plot exist
    return state


def read_summary(store: Store) -> dict[str, Any] | None:
    raw = store.read(SUMMARY)
    return None if raw is None else dict(json.loads(raw))


def _save(store: Store, state: TrainingState) -> None:
    store.write(STATE, json.dumps(state.to_dict()).encode(), content_type="application/json")
