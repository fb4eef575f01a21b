"""The trainer's progress, read from verl's console output: its step lines become ``progress.json``, the trainer side
of the training-health rows (``signals.jsonl``) and the held-out ``evaluation.json`` under the run's output prefix."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from mtrl.backends.verl.evaluation import EVALUATION_FILE, evaluation_document, is_validation_only, validation_figures
from mtrl.backends.verl.rollouts import ROLLOUT_PROBLEM, Rollouts
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
# its own prefix, so a forged ``step:`` line never matches. Ray colours the prefix (``print_worker_logs``: ANSI codes
# unless RAY_COLOR_PREFIX=0, whether or not the output is a terminal); the codes are ignored. ``ip=A`` says the actor
# runs on another node than verl's driver: where its rollout dump is written (``mtrl.backends.verl.rollouts``).
_TRAINER = re.compile(r"^\((?P<name>TaskRunner(?:V1)?) pid=(?P<pid>\d+)(?:, ip=(?P<ip>[0-9A-Fa-f.:]+))?[,)]")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_STEP_LINE = re.compile(
    r"^(?:\(TaskRunner(?:V1)? pid=(?P<pid>\d+)(?:, ip=[0-9A-Fa-f.:]+)?\) )?step:(?P<step>\d{1,9}) - (?P<metrics>.*)$"
)
_NUMPY_SCALAR = re.compile(r"np\.(?:float|int|uint)\d*\((.*)\)")


def parse_step_line(line: str) -> tuple[int, dict[str, float]] | None:
    """``(step, metrics)`` from one of verl's console lines (``step:N - name:value - ...``), else None.

    verl prints each value with ``pprint.pformat``: a NumPy 2 scalar reads ``np.float64(0.25)``, a Python one ``0.25``.
    """
    found = _STEP_LINE.match(_plain(line))
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


def _plain(line: str) -> str:
    """The line as text: without Ray's colour codes and surrounding space."""
    return _ANSI.sub("", line).strip() if "\x1b" in line else line.strip()


def trainer_row(step: int, metrics: Mapping[str, float], *, when: float) -> SignalRow:
    """The trainer-side fields of one step's training-health row (the environment side comes from its rollout dump:
    ``rollout_rows``)."""
    figures = {field: metrics.get(name) for name, field in TRAINER_METRICS.items()}
    return signal_row(step, figures, time=iso_time(when))


READ_TRIES = 3  # reads of one step's dump that may fail (a node or Ray call gone wrong) before it is given up


def _noted(row: SignalRow, problem: str | None) -> SignalRow:
    """``row`` saying why its environment side is missing (``problem``), or no longer (None)."""
    extra = {key: value for key, value in row.extra.items() if key != ROLLOUT_PROBLEM}
    if problem is not None:
        extra[ROLLOUT_PROBLEM] = problem
    return replace(row, extra=extra)


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
        rollouts: Rollouts | None = None,
    ) -> None:
        """``rollouts`` reads each step's dump where verl writes it; ``rollout_dir`` alone: on this machine."""
        self.s3 = s3
        self.rollouts = rollouts or (Rollouts(rollout_dir) if rollout_dir is not None else None)
        self.pending: dict[int, int] = {}  # steps whose rollout dump is not read yet: failed reads so far
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
        if self.rollouts is not None:
            self.pending[step] = 0
        self._put(SIGNALS_FILE, render_signals(self.header, self.rows), "application/x-ndjson")
        self._put("progress.json", json.dumps({"step": step}) + "\n", "application/json")

    def trainer_seen(self, class_name: str, pid: int, ip: str | None) -> None:
        """verl's TaskRunner printed its first line (its rollout dumps are written on its node)."""
        if self.rollouts is not None:
            self.rollouts.trainer_seen(class_name, pid, ip)

    def finish(self) -> None:
        """After the trainer exits (verl has drained its dumps): the last steps' environment side; a step whose dump
        never came says so in its row."""
        if not self.pending or self.rollouts is None:
            return
        self._fill_from_rollouts(before=None)
        for step in sorted(self.pending):
            if not self._problem(step):
                self._note(step, self.rollouts.missing(step))
        self.pending.clear()
        self._put(SIGNALS_FILE, render_signals(self.header, self.rows), "application/x-ndjson")

    def _fill_from_rollouts(self, *, before: int | None) -> bool:
        if self.rollouts is None:
            return False
        changed = False
        failed: str | None = None  # after one failed read, the others wait for the next round (each may time out)
        for step in sorted(s for s in self.pending if before is None or s < before):
            found = self.rollouts.read(step) if failed is None else f"step {step}'s rollout dump was not read: {failed}"
            if found is None:
                continue
            changed = True
            if isinstance(found, str):  # the row says why; a few more tries, at the next steps and at the end
                self._note(step, found)
                failed = failed or found
                self.pending[step] += 1
                if self.pending[step] >= READ_TRIES:
                    del self.pending[step]
                continue
            del self.pending[step]
            # The trainer's own figures win: the rollouts fill in what its metrics did not measure.
            self.rows = [_noted(merged(row, found), None) if row.step == step else row for row in self.rows]
        return changed

    def _note(self, step: int, problem: str) -> None:
        self.rows = [_noted(row, problem) if row.step == step else row for row in self.rows]

    def _problem(self, step: int) -> bool:
        return any(ROLLOUT_PROBLEM in row.extra for row in self.rows if row.step == step)

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
        plain = _plain(line)
        prefix, source = _TRAINER.match(plain), _STEP_LINE.match(plain)
        if trainer_pid is None and prefix is not None:
            trainer_pid = prefix.group("pid")
            progress.trainer_seen(prefix.group("name"), int(trainer_pid), prefix.group("ip"))
        parsed = parse_step_line(line) if source and source.group("pid") in {None, trainer_pid} else None
        if parsed is not None:
            step, metrics = parsed
            figures = validation_figures(metrics)
            if figures is not None:
                progress.evaluated(step, figures)
            if not is_validation_only(metrics):
                progress.step(step, metrics)
        yield line
