"""The trainer's progress, read from verl's console output: its step lines become ``progress.json``, the trainer side
of the training-health rows (``signals.jsonl``) and the held-out ``evaluation.json`` under the run's output prefix."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from mtrl.backends.verl.evaluation import EVALUATION_FILE, evaluation_document, is_validation_only, validation_figures
from mtrl.backends.verl.rollout_rows import read_step
from mtrl.health.rows import merged, signal_row
from mtrl.health.signals import SIGNALS_FILE, SignalHeader, SignalRow, iso_time, render_signals

# verl metric name → signal-row field (verl/trainer/ppo/metric_utils.py and the actor's metrics).
TRAINER_METRICS = {
    "critic/score/mean": "reward_mean",
    "response_length/clip_ratio": "truncation_share",
    "actor/entropy": "entropy",
    "actor/kl_loss": "kl",
    "actor/grad_norm": "grad_norm",
    "num_turns/mean": "mean_turns",
}
# verl's LocalLogger prints ``step:N - name:value - ...`` in the TaskRunner actor (verl 0.9: main_ppo.TaskRunnerV1,
# main_ppo_v0.TaskRunner) and Ray forwards it as ``(TaskRunnerV1 pid=N[, ip=A]) step:...``; only those lines, or the
# driver's own (unprefixed), count. Any other actor's output (an environment printing in an agent-loop worker) carries
# its own prefix, so a forged ``step:`` line never matches.
_TRAINER = re.compile(r"^\(TaskRunner(?:V1)? pid=(?P<pid>\d+)[,)]")
_STEP_LINE = re.compile(
    r"^(?:\(TaskRunner(?:V1)? pid=(?P<pid>\d+)(?:, ip=[0-9A-Fa-f.:]+)?\) )?step:(?P<step>\d{1,9}) - (?P<metrics>.*)$"
)
_NUMPY_SCALAR = re.compile(r"np\.(?:float|int|uint)\d*\((.*)\)")


def parse_step_line(line: str) -> tuple[int, dict[str, float]] | None:
    """``(step, metrics)`` from one of verl's console lines (``step:N - name:value - ...``), else None.

    verl prints each value with ``pprint.pformat``: a NumPy 2 scalar reads ``np.float64(0.25)``, a Python one ``0.25``.
    """
    found = _STEP_LINE.match(line.strip())
    if found is None:
        return None
    metrics: dict[str, float] = {}
    for part in found.group("metrics").split(" - "):
        name, _, value = part.rpartition(":")
        scalar = _NUMPY_SCALAR.fullmatch(value.strip())
        try:
            metrics[name.strip()] = float(scalar.group(1) if scalar else value)
        except ValueError:
            continue
    return int(found.group("step")), metrics


def trainer_row(step: int, metrics: Mapping[str, float], *, when: float) -> SignalRow:
    """The trainer-side fields of one step's training-health row (the environment side comes from its rollout dump:
    ``rollout_rows``)."""
    figures = {field: metrics.get(name) for name, field in TRAINER_METRICS.items()}
    return signal_row(step, figures, time=iso_time(when))


class Progress:
    """Writes ``progress.json`` and ``signals.jsonl`` under the run's output prefix after every step, and
    ``evaluation.json`` after every validation of the held-out split."""

    def __init__(
        self,
        s3: Any,
        output_uri: str,
        *,
        planned_steps: int,
        group_size: int,
        eval_tasks: int = 0,
        rollout_dir: Path | None = None,
    ) -> None:
        self.s3 = s3
        self.rollout_dir = rollout_dir
        self.pending: set[int] = set()  # steps whose rollout dump is not read yet
        self.bucket, _, prefix = output_uri.removeprefix("s3://").partition("/")
        self.prefix = prefix.rstrip("/") + "/"
        self.header = SignalHeader(planned_steps=planned_steps, group_size=group_size)
        self.rows: list[SignalRow] = []
        self.eval_tasks = eval_tasks
        self.before: dict[str, float] | None = None
        self.after: dict[str, float] | None = None

    def start(self) -> None:
        self._put(SIGNALS_FILE, render_signals(self.header, []), "application/x-ndjson")

    def step(self, step: int, metrics: Mapping[str, float], *, when: float | None = None) -> None:
        self.rows = [row for row in self.rows if row.step != step]
        self.rows.append(trainer_row(step, metrics, when=time.time() if when is None else when))
        # A step's rollout dump is complete once a later step has been logged (verl writes it from a background
        # thread) or the trainer has exited: the environment side of a row lands one step late.
        self._fill_from_rollouts(before=step)
        if self.rollout_dir is not None:
            self.pending.add(step)
        self._put(SIGNALS_FILE, render_signals(self.header, self.rows), "application/x-ndjson")
        self._put("progress.json", json.dumps({"step": step}) + "\n", "application/json")

    def finish(self) -> None:
        """After the trainer exits (verl has drained its dumps): the last steps' environment side."""
        if self.pending and self._fill_from_rollouts(before=None):
            self._put(SIGNALS_FILE, render_signals(self.header, self.rows), "application/x-ndjson")

    def _fill_from_rollouts(self, *, before: int | None) -> bool:
        if self.rollout_dir is None:
            return False
        filled = False
        for step in sorted(s for s in self.pending if before is None or s < before):
            found = read_step(self.rollout_dir, step)
            if found is None:
                continue
            self.pending.discard(step)
            # The trainer's own figures win: the rollouts fill in what its metrics did not measure.
            self.rows = [merged(row, found) if row.step == step else row for row in self.rows]
            filled = True
        return filled

    def evaluated(self, step: int, figures: Mapping[str, float]) -> None:
        """One validation: at step 0 the untrained policy (the baseline), later the trained one."""
        if step == 0:
            self.before = dict(figures)
        else:
            self.after = dict(figures)
        document = evaluation_document(tasks=self.eval_tasks, before=self.before, after=self.after)
        self._put(EVALUATION_FILE, json.dumps(document, sort_keys=True) + "\n", "application/json")

    def _put(self, name: str, body: str, content_type: str) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=self.prefix + name, Body=body.encode(), ContentType=content_type)


def follow(lines: Iterable[str], progress: Progress) -> Iterator[str]:
    """Pass the trainer's output through, recording every step line and every validation in it (the one before
    training is a line of validation figures only, at step 0: no step was trained)."""
    # The first TaskRunner to print anything (it starts long before any environment runs) is the trainer: an actor an
    # environment names TaskRunnerV1 later is not.
    trainer_pid: str | None = None
    for line in lines:
        prefix, source = _TRAINER.match(line.strip()), _STEP_LINE.match(line.strip())
        trainer_pid = trainer_pid or (prefix.group("pid") if prefix else None)
        parsed = parse_step_line(line) if source and source.group("pid") in {None, trainer_pid} else None
        if parsed is not None:
            step, metrics = parsed
            figures = validation_figures(metrics)
            if figures is not None:
                progress.evaluated(step, figures)
            if not is_validation_only(metrics):
                progress.step(step, metrics)
        yield line
