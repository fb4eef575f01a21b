"""The training-health rules: a pure function from a run's signal rows to a verdict.

Every threshold starts from a survey of published training-health signals (S1–S11; the public source of each — a
paper, a framework's metric, a guide — is named next to its rule); a departure is justified where it is made.
Conventions (from the same survey):

- warm-up: per-step rules arm after ``max(5, 5% of planned steps)`` steps (the first steps of a run are its
  baseline, not its behaviour);
- the baseline of a signal is the median of its first 3 measured steps;
- hysteresis: a level fires when its condition held on ``hits`` of the last ``window`` judged steps
  (``n`` consecutive steps when both are ``n``) and clears after ``clear`` clean ones;
- a step where a signal is unknown (null) is not judged: it neither counts towards firing nor clears.

``evaluate`` returns ``{"verdict": "ok|warn|stop|incomplete", "fired": [...], "rules": {...}, ...}``; the
verdict is the worst level any rule reached during the run (``incomplete`` above all), ``current`` the worst level
active at the last step (what the live metric ``mtrl/RunHealth`` publishes).
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mtrl.health.signals import SignalRow, Signals, parse_time
from mtrl.health.stats import RunningMedian, Series, median

OK, WARN, STOP, INCOMPLETE = "ok", "warn", "stop", "incomplete"
WARMING_UP = "warm-up"
LEVEL_NUMBER = {OK: 0, WARN: 1, STOP: 2}
BASELINE_STEPS = 3
STALL_FLOOR_SECONDS = 15 * 60.0  # S11: max(3 x median step time, 15 min)
STALL_FACTOR = 3.0
MAX_STALLS_LISTED = 20
EPSILON = 1e-12


@dataclass(frozen=True)
class Level:
    threshold: float
    hits: int  # the condition held on `hits` of the last `window` judged steps
    window: int
    clear: int  # clean judged steps that clear an active level
    meaning: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "fires_after": f"{self.hits} of the last {self.window} steps"
            if self.hits != self.window
            else f"{self.hits} consecutive step(s)",
            "clears_after": f"{self.clear} clean step(s)",
            "meaning": self.meaning,
        }


@dataclass(frozen=True)
class Judgement:
    value: float
    warn: bool
    stop: bool = False


class Context:
    """What the judges share: the rows, the planned length, warm-up, the window K and the baselines."""

    def __init__(self, signals: Signals) -> None:
        self.rows = signals.rows
        self.planned = signals.header.planned_steps
        self.warmup = max(5, math.ceil(0.05 * self.planned))
        self.window = max(10, math.ceil(0.10 * self.planned))  # S4's K
        self.series = {
            name: Series([(r.step, v) for r in self.rows if (v := r.value(name)) is not None])
            for name in ("reward_mean", "evaluation_mean", "truncation_share")
        }
        self.baselines = {
            name: median([v for r in self.rows if (v := r.value(name)) is not None][:BASELINE_STEPS])
            for name in ("reward_spread_mean", "malformed_share", "mean_turns")
        }

    def reward_slope(self, step: int) -> float | None:
        fit = self.series["reward_mean"].fit(step, self.window)
        return None if fit is None else fit.slope


Judge = Callable[[Context, int, SignalRow], Judgement | None]


@dataclass(frozen=True)
class Rule:
    name: str
    source: str
    warn: Level
    stop: Level | None
    judge: Judge


# -- judges: (context, row index, row) -> Judgement | None (not judged) ---------------------------------------------
def _flat_groups(ctx: Context, index: int, row: SignalRow) -> Judgement | None:
    share = row.zero_spread_share
    if share is None:
        return None
    return Judgement(share, warn=share >= FLAT_GROUPS.warn.threshold, stop=share >= _stop(FLAT_GROUPS).threshold)


def _spread_collapse(ctx: Context, index: int, row: SignalRow) -> Judgement | None:
    baseline, spread = ctx.baselines["reward_spread_mean"], row.reward_spread_mean
    slope = ctx.reward_slope(row.step)
    if baseline is None or baseline <= EPSILON or spread is None or slope is None:
        return None  # a reward constant from the start is flat_groups' case, not a collapse
    ratio = spread / baseline
    return Judgement(ratio, warn=ratio < SPREAD_COLLAPSE.warn.threshold and slope <= 0)


def _eval_divergence(ctx: Context, index: int, row: SignalRow) -> Judgement | None:
    if row.evaluation_mean is None:
        return None
    evaluations = ctx.series["evaluation_mean"]
    seen = evaluations.count_upto(row.step)
    if seen < 3:
        return None
    # The evaluation points of the last K steps (at least the last 3: evaluations are sparser than steps).
    in_window = seen - evaluations.count_upto(row.step - ctx.window)
    first = evaluations.steps[seen - max(3, in_window)]
    eval_fit = evaluations.fit_since(first, row.step)
    reward_fit = ctx.series["reward_mean"].fit_since(first, row.step)
    if eval_fit is None or reward_fit is None:
        return None
    drop = max(evaluations.values[:seen]) - row.evaluation_mean
    diverging = eval_fit.slope < 0 < reward_fit.slope and drop >= EVAL_DIVERGENCE.warn.threshold
    return Judgement(drop, warn=diverging, stop=diverging)


def _plateau(ctx: Context, index: int, row: SignalRow) -> Judgement | None:
    noise = ctx.baselines["reward_spread_mean"]
    fit = ctx.series["reward_mean"].fit(row.step, ctx.window)
    if noise is None or fit is None or fit.points < ctx.window or row.reward_mean is None:
        return None
    # Departure: the reference multiplies by the steps remaining; near the planned end that goes to 0 and any
    # noisy run would "plateau". Projecting over at least one more window K keeps the test about the trend.
    remaining = max(ctx.planned - row.step, ctx.window)
    projected_gain = fit.slope * remaining
    flat = fit.contains_zero and projected_gain < noise
    return Judgement(projected_gain, warn=flat, stop=flat)


def _malformed(ctx: Context, index: int, row: SignalRow) -> Judgement | None:
    share = row.malformed_share
    if share is None:
        return None
    baseline = ctx.baselines["malformed_share"] or 0.0
    threshold = min(baseline + MALFORMED_MARGIN, MALFORMED.warn.threshold)
    return Judgement(share, warn=share > threshold, stop=share > _stop(MALFORMED).threshold)


def _turn_collapse(ctx: Context, index: int, row: SignalRow) -> Judgement | None:
    baseline, turns = ctx.baselines["mean_turns"], row.mean_turns
    if baseline is None or baseline <= EPSILON or turns is None:
        return None
    ratio = turns / baseline
    if ratio < TURN_COLLAPSE_SEVERE:
        # Departure from S6: episodes down to a quarter of their early length are a different behaviour, not a
        # policy getting faster at the same one (answering before the task is done, or an environment that ends
        # episodes early); a rising reward does not explain it away, so it is reported whatever the reward does.
        return Judgement(ratio, warn=True)
    slope = ctx.reward_slope(row.step)
    if slope is None:
        return None
    # "while success is not rising" (S6): the training reward's slope stands for success, as it is known every step.
    return Judgement(ratio, warn=ratio < TURN_COLLAPSE.warn.threshold and slope <= 0)


def _cap_hits(ctx: Context, index: int, row: SignalRow) -> Judgement | None:
    share = row.cap_hit_share
    return None if share is None else Judgement(share, warn=share > CAP_HITS.warn.threshold)


def _truncation(ctx: Context, index: int, row: SignalRow) -> Judgement | None:
    share = row.truncation_share
    if share is None:
        return None
    fit = ctx.series["truncation_share"].fit(row.step, ctx.window)
    rising = fit is not None and fit.slope > 0
    return Judgement(share, warn=share > TRUNCATION.warn.threshold and rising, stop=share > _stop(TRUNCATION).threshold)


def _entropy(ctx: Context, index: int, row: SignalRow) -> Judgement | None:
    entropy = row.entropy
    if entropy is None:
        return None
    return Judgement(
        entropy, warn=entropy < ENTROPY_COLLAPSE.warn.threshold, stop=entropy < _stop(ENTROPY_COLLAPSE).threshold
    )


class _SpikeJudge:
    """S9: KL or gradient norm over the median of its own earlier values (absolute scales differ per model)."""

    MIN_HISTORY = 3

    def __init__(self) -> None:
        self.medians: dict[str, RunningMedian] = {}
        self.upto = -1

    def __call__(self, ctx: Context, index: int, row: SignalRow) -> Judgement | None:
        for earlier in ctx.rows[self.upto + 1 : index]:
            self._add(earlier)
        ratios = []
        for name in ("kl", "grad_norm"):
            value, running = row.value(name), self.medians.get(name)
            reference = running.value() if running is not None and len(running) >= self.MIN_HISTORY else None
            if value is not None and reference is not None and reference > EPSILON:
                ratios.append(value / reference)
        self._add(row)
        self.upto = index
        if not ratios:
            return None
        ratio = max(ratios)
        return Judgement(ratio, warn=ratio > KL_SPIKE.warn.threshold, stop=ratio > _stop(KL_SPIKE).threshold)

    def _add(self, row: SignalRow) -> None:
        for name in ("kl", "grad_norm"):
            value = row.value(name)
            if value is not None:
                self.medians.setdefault(name, RunningMedian()).add(value)


def _reward_errors(ctx: Context, index: int, row: SignalRow) -> Judgement | None:
    if row.error_share is None and row.timeout_share is None:
        return None
    share = (row.error_share or 0.0) + (row.timeout_share or 0.0)
    return Judgement(share, warn=share > REWARD_ERRORS.warn.threshold, stop=share > _stop(REWARD_ERRORS).threshold)


def _stop(rule: Rule) -> Level:
    assert rule.stop is not None
    return rule.stop


# -- the table ------------------------------------------------------------------------------------------------------
FLAT_GROUPS = Rule(
    "flat_groups",
    "S1: share of groups whose reward is identical (GRPO gets no gradient from them; DAPO, TRL frac_reward_zero_std)",
    Level(0.6, 3, 3, 3, "zero-spread share >= 0.6 (the peer monitor's WARN)"),
    Level(0.9, 5, 5, 5, "zero-spread share >= 0.9 (mtrl's FLAT_WARNING_SHARE)"),
    _flat_groups,
)
SPREAD_COLLAPSE = Rule(
    "spread_collapse",
    "S2: mean within-group reward std relative to its baseline, while the reward is not rising (RAGEN)",
    Level(0.5, 3, 3, 3, "spread < 50% of the baseline while the reward slope <= 0"),
    None,
    _spread_collapse,
)
EVAL_DIVERGENCE = Rule(
    "eval_divergence",
    "S3: the external evaluation falls while the reward rises (AWS multi-turn RL best practices; Nova 'validation "
    "drops')",
    Level(0.05, 1, 1, 2, "evaluation slope < 0, reward slope > 0, evaluation >= 0.05 below its best: 1 window"),
    Level(0.05, 2, 2, 2, "the same in 2 consecutive evaluation windows"),
    _eval_divergence,
)
PLATEAU = Rule(
    "plateau",
    "S4: OLS slope of the reward over the last K = max(10, 10% planned) steps indistinguishable from 0 and too "
    "small to matter (slope x remaining steps < the baseline within-group std)",
    Level(0.0, 3, 3, 3, "95% CI of the slope contains 0 and projected gain < baseline within-group std"),
    Level(0.0, 10, 10, 3, "the same for 10 consecutive steps"),
    _plateau,
)
MALFORMED_MARGIN = 0.10  # S5's operator-facing default margin over the baseline
MALFORMED = Rule(
    "malformed_actions",
    "S5: share of episodes with an unparsable action or final answer (TRL tools/failure_frequency; Echo Trap)",
    Level(0.20, 3, 3, 3, "share > baseline + 0.10, or > 0.20 absolute (threshold reported: the lower)"),
    Level(0.50, 5, 5, 5, "share > 0.50"),
    _malformed,
)
TURN_COLLAPSE_SEVERE = 0.25
TURN_COLLAPSE = Rule(
    "turn_collapse",
    "S6: mean turns per episode collapsing while the reward is not rising ('answering early', AWS multi-turn RL best "
    "practices), or below a quarter of the baseline whatever the reward does",
    Level(0.5, 3, 3, 3, "mean turns < 50% of the baseline while the reward slope <= 0, or < 25% of it"),
    None,
    _turn_collapse,
)
CAP_HITS = Rule(
    "cap_hits",
    "S6: share of episodes hitting the turn limit ('tool spam', AWS multi-turn RL best practices)",
    Level(0.5, 3, 3, 3, "cap-hit share > 0.5"),
    None,
    _cap_hits,
)
TRUNCATION = Rule(
    "truncation",
    "S7: share of truncated responses (DAPO overlong shaping; TRL completions/clipped_ratio)",
    Level(0.2, 3, 3, 3, "truncation share > 0.2 and rising"),
    Level(0.5, 5, 5, 5, "truncation share > 0.5"),
    _truncation,
)
ENTROPY_COLLAPSE = Rule(
    "entropy_collapse",
    "S8: policy entropy (DAPO's entropy collapse; the peer monitor's thresholds)",
    Level(0.5, 3, 3, 3, "entropy < 0.5"),
    Level(0.3, 4, 5, 5, "entropy < 0.3"),
    _entropy,
)
KL_SPIKE = Rule(
    "kl_spike",
    "S9: KL or gradient norm relative to its running median (RAGEN: gradient spikes precede collapse)",
    # A spike is one step by nature: warn on one, clear after 3 clean ones.
    Level(5.0, 1, 1, 3, "> 5x the running median"),
    Level(20.0, 2, 5, 3, "> 20x the running median twice within 5 steps"),
    _SpikeJudge(),
)
REWARD_ERRORS = Rule(
    "reward_errors",
    "S10: share of episodes whose reward errored or timed out (Nova 'high percentage of reward function errors')",
    Level(0.05, 3, 3, 3, "error + timeout share > 5%"),
    Level(0.25, 3, 3, 3, "error + timeout share > 25% (rewards then measure the infrastructure)"),
    _reward_errors,
)
STEP_RULES = (
    FLAT_GROUPS,
    SPREAD_COLLAPSE,
    EVAL_DIVERGENCE,
    PLATEAU,
    MALFORMED,
    TURN_COLLAPSE,
    CAP_HITS,
    TRUNCATION,
    ENTROPY_COLLAPSE,
    KL_SPIKE,
    REWARD_ERRORS,
)
STALLED, INCOMPLETE_RULE = "stalled", "incomplete"
RULE_NAMES = (*(rule.name for rule in STEP_RULES), STALLED, INCOMPLETE_RULE)
STOP_RULES = (*(rule.name for rule in STEP_RULES if rule.stop is not None), INCOMPLETE_RULE)


class _LevelState:
    def __init__(self, level: Level) -> None:
        self.level = level
        self.recent: deque[bool] = deque(maxlen=level.window)
        self.active = False
        self.clean = 0

    def observe(self, hit: bool) -> None:
        self.recent.append(hit)
        if self.active:
            self.clean = 0 if hit else self.clean + 1
            if self.clean >= self.level.clear:
                self.active, self.clean = False, 0
                self.recent.clear()
        elif sum(self.recent) >= self.level.hits:
            self.active, self.clean = True, 0


def _run_rule(rule: Rule, judge: Judge, ctx: Context, fired: list[dict[str, Any]]) -> dict[str, Any]:
    warn_state = _LevelState(rule.warn)
    stop_state = _LevelState(rule.stop) if rule.stop is not None else None
    segments: list[dict[str, Any]] = []
    current, worst, value = OK, OK, None
    fired_here: list[int] = []

    def mark(step: int, level: str) -> None:
        if segments and segments[-1]["level"] == level and segments[-1]["to"] == step - 1:
            segments[-1]["to"] = step
        else:
            segments.append({"from": step, "to": step, "level": level})

    previous_step = 0
    for index, row in enumerate(ctx.rows):
        if segments and row.step != previous_step + 1:  # a gap in the rows: keep segments honest
            segments.append({"from": previous_step + 1, "to": row.step - 1, "level": "unknown"})
        previous_step = row.step
        if row.step <= ctx.warmup:
            mark(row.step, WARMING_UP)
            continue
        judgement = judge(ctx, index, row)
        if judgement is not None:
            value = judgement.value
            warn_state.observe(judgement.warn)
            if stop_state is not None:
                stop_state.observe(judgement.stop)
            level = STOP if stop_state is not None and stop_state.active else WARN if warn_state.active else OK
            if LEVEL_NUMBER[level] > LEVEL_NUMBER[current]:
                threshold = (stop_state.level if level == STOP and stop_state else rule.warn).threshold
                if rule is MALFORMED and level == WARN:
                    threshold = min((ctx.baselines["malformed_share"] or 0.0) + MALFORMED_MARGIN, threshold)
                fired.append(
                    {"rule": rule.name, "level": level, "step": row.step, "value": value, "threshold": threshold}
                )
                fired_here.append(row.step)
            current = level
            worst = max(worst, level, key=LEVEL_NUMBER.__getitem__)
        mark(row.step, current)
    return {
        "description": rule.source,
        "warn": rule.warn.to_dict(),
        "stop": rule.stop.to_dict() if rule.stop else None,
        "level": current,
        "worst": worst,
        "value": value,
        "fired_at": fired_here,
        "segments": segments,
    }


def _stalled(ctx: Context, *, now: datetime | None, ended: bool, fired: list[dict[str, Any]]) -> dict[str, Any]:
    """A stall now (a live run with no step for the limit) and every stall in the run's past: a gap between two
    consecutive steps over the same limit, so a run that stalled and then recovered still says where it stalled
    (its ``worst`` is warn; its ``level`` is warn only while it is stalled now)."""
    times = [(row.step, parse_time(row.time)) for row in ctx.rows if row.time is not None]
    entry: dict[str, Any] = {
        "description": "S11: no new step for max(3x the median step time, 15 min) (verl #6583; hung-job detection), "
        "now or between two steps of the run",
        "warn": {"threshold": None, "fires_after": "immediately", "meaning": "max(3x median step time, 900 s)"},
        "stop": None,
        "level": OK,
        "worst": OK,
        "value": None,
        "threshold": None,
        "stalls": [],
        "stall_count": 0,
    }
    if not times:
        return entry
    gaps = [(first, (b - a).total_seconds()) for (first, a), (_, b) in itertools.pairwise(times)]
    typical = median([gap for _, gap in gaps if gap >= 0])
    threshold = max(STALL_FACTOR * typical, STALL_FLOOR_SECONDS) if typical is not None else STALL_FLOOR_SECONDS
    entry["threshold"] = threshold
    stalls = [(step, gap) for step, gap in gaps if gap > threshold]
    entry["stall_count"] = len(stalls)
    for step, gap in stalls[:MAX_STALLS_LISTED]:  # a flapping run lists its first stalls, and counts them all
        entry["stalls"].append({"after_step": step, "seconds": gap})
        entry.update(worst=WARN, value=gap)
        fired.append({"rule": STALLED, "level": WARN, "step": step, "value": gap, "threshold": threshold})
    if ended or now is None:
        return entry
    waited = (now - times[-1][1]).total_seconds()
    entry["value"] = waited
    if waited > threshold:
        entry.update(level=WARN, worst=WARN)
        fired.append({"rule": STALLED, "level": WARN, "step": times[-1][0], "value": waited, "threshold": threshold})
    return entry


def _incomplete(signals: Signals, *, ended: bool, fired: list[dict[str, Any]]) -> dict[str, Any]:
    planned, last = signals.header.planned_steps, signals.last_step
    entry: dict[str, Any] = {
        "description": "S11: the run ended with its last step below planned_steps "
        "(verl #5725/#7401: a silent 0-step exit)",
        "warn": None,
        "stop": {"threshold": planned, "fires_after": "when the run ends", "meaning": "last step < planned_steps"},
        "level": OK,
        "worst": OK,
        "value": last,
        "threshold": planned,
    }
    if ended and last < planned:
        entry.update(level=STOP, worst=STOP)
        fired.append({"rule": INCOMPLETE_RULE, "level": STOP, "step": last, "value": last, "threshold": planned})
    return entry


def evaluate(signals: Signals, *, now: datetime | None = None, ended: bool = False) -> dict[str, Any]:
    """The verdict document for a run's rows so far. ``now`` (aware) enables ``stalled`` on a live run;
    ``ended`` says the run has finished (enables ``incomplete``, disables ``stalled``)."""
    ctx = Context(signals)
    fired: list[dict[str, Any]] = []
    rules: dict[str, dict[str, Any]] = {}
    for rule in STEP_RULES:
        judge = _SpikeJudge() if isinstance(rule.judge, _SpikeJudge) else rule.judge  # fresh state per call
        rules[rule.name] = _run_rule(rule, judge, ctx, fired)
    rules[STALLED] = _stalled(ctx, now=now, ended=ended, fired=fired)
    rules[INCOMPLETE_RULE] = _incomplete(signals, ended=ended, fired=fired)
    fired.sort(key=lambda item: (item["step"], RULE_NAMES.index(item["rule"])))
    worst = max((entry["worst"] for entry in rules.values()), key=LEVEL_NUMBER.__getitem__, default=OK)
    current = max((entry["level"] for entry in rules.values()), key=LEVEL_NUMBER.__getitem__, default=OK)
    return {
        "verdict": INCOMPLETE if rules[INCOMPLETE_RULE]["level"] == STOP else worst,
        "current": current,
        "fired": fired,
        "rules": rules,
        "steps": len(signals.rows),
        "last_step": signals.last_step,
        "planned_steps": signals.header.planned_steps,
        "group_size": signals.header.group_size,
        "warmup_steps": ctx.warmup,
        "window_steps": ctx.window,
        "ended": ended,
        "truncated_tail": signals.truncated_tail,
    }


def health_level(document: dict[str, Any]) -> int:
    """``mtrl/RunHealth``: 0 ok, 1 warn, 2 stop (an incomplete run is 2)."""
    if document["verdict"] == INCOMPLETE:
        return 2
    return LEVEL_NUMBER[document["current"]]


def stop_rules(document: dict[str, Any], wanted: Sequence[str] | None = None) -> list[str]:
    """The step rules at their stop level at the last step (restricted to ``wanted`` when given)."""
    return [
        name
        for name, entry in document["rules"].items()
        if entry["level"] == STOP and name != INCOMPLETE_RULE and (wanted is None or name in wanted)
    ]
