"""flat_groups on a healthy binary reward: how often does it warn by chance? (research §2.2, S1)

With success probability p, a group of G rollouts is constant with probability q = p^G + (1-p)^G. A step of T
groups has a zero-spread share of Binomial(T, q) / T; flat_groups warns when that share is >= 0.6 on 3 consecutive
armed steps. "Healthy" here means every task is solved with probability in [0.3, 0.7] (GRPO has signal).
Stated bound: over 100 armed steps with T = 8 groups per step (the local default), the chance of one false
warning is below 1% for G = 4, 8 and 16 — computed exactly below, and checked against the engine by simulation.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import pytest

from mtrl.contracts.environment import EpisodeResult
from mtrl.health.episodes import EpisodeStatus, episode_fields
from mtrl.health.rules import FLAT_GROUPS, evaluate
from mtrl.health.signals import SignalHeader, SignalRow, Signals

GROUPS_PER_STEP = 8
ARMED_STEPS = 100
BOUND = 0.01


def constant_group_probability(p: float, group_size: int) -> float:
    return p**group_size + (1 - p) ** group_size


def step_flat_probability(q: float, groups: int, threshold: float) -> float:
    """P(Binomial(groups, q) / groups >= threshold)."""
    least = math.ceil(threshold * groups - 1e-12)
    return sum(math.comb(groups, k) * q**k * (1 - q) ** (groups - k) for k in range(least, groups + 1))


def fire_probability(step_probability: float, run_length: int, steps: int) -> float:
    """P(at least one run of ``run_length`` consecutive hits in ``steps`` independent steps): a Markov chain on
    the current run of hits (0 .. run_length - 1), with 'fired' absorbing."""
    states = [1.0] + [0.0] * (run_length - 1)
    fired = 0.0
    for _ in range(steps):
        moved = [0.0] * run_length
        for length, mass in enumerate(states):
            moved[0] += mass * (1 - step_probability)
            if length + 1 == run_length:
                fired += mass * step_probability
            else:
                moved[length + 1] += mass * step_probability
        states = moved
    return fired


def test_the_reference_figures_for_g8() -> None:
    # research §2.2: for G=8, p=0.5 → 0.8%; p=0.9 → 43%; p=0.95 → 66%; p=0.97 → 78%.
    assert constant_group_probability(0.5, 8) == pytest.approx(0.0078, abs=1e-4)
    assert constant_group_probability(0.9, 8) == pytest.approx(0.43, abs=0.005)
    assert constant_group_probability(0.95, 8) == pytest.approx(0.66, abs=0.005)
    assert constant_group_probability(0.97, 8) == pytest.approx(0.78, abs=0.005)


@pytest.mark.parametrize("group_size", [4, 8, 16])
def test_the_exact_false_warning_rate_is_under_the_bound(group_size: int) -> None:
    worst = 0.0
    for hundredth in range(30, 71):  # the worst p in [0.3, 0.7] is at the ends (q is convex, symmetric)
        q = constant_group_probability(hundredth / 100, group_size)
        per_step = step_flat_probability(q, GROUPS_PER_STEP, FLAT_GROUPS.warn.threshold)
        worst = max(worst, fire_probability(per_step, FLAT_GROUPS.warn.hits, ARMED_STEPS))
    print(f"G={group_size}: worst false-warning probability over {ARMED_STEPS} steps = {worst:.2e}")
    assert worst < BOUND


def test_a_degenerate_task_mix_does_warn() -> None:
    # The same arithmetic shows the rule is not blind: at p = 0.95 (almost always solved), G = 8, it warns.
    q = constant_group_probability(0.95, 8)
    per_step = step_flat_probability(q, GROUPS_PER_STEP, FLAT_GROUPS.warn.threshold)
    assert fire_probability(per_step, FLAT_GROUPS.warn.hits, ARMED_STEPS) > 0.99


@dataclass(frozen=True)
class _Episode:
    result: EpisodeResult | None
    status: EpisodeStatus = "completed"
    turns: int = 3
    hit_turn_limit: bool = False


def _simulated_run(rng: random.Random, p: float, group_size: int, steps: int) -> Signals:
    rows = []
    for step in range(1, steps + 1):
        groups = [
            [_Episode(EpisodeResult(reward=float(rng.random() < p))) for _ in range(group_size)]
            for _ in range(GROUPS_PER_STEP)
        ]
        fields = episode_fields(groups)
        rows.append(SignalRow(step=step, zero_spread_share=fields["zero_spread_share"]))
    return Signals(header=SignalHeader(planned_steps=steps, group_size=group_size), rows=tuple(rows))


def test_simulated_healthy_runs_through_the_engine_never_warn_and_match_the_exact_rate() -> None:
    """Seeded: 20 runs of 105 steps at p = 0.3 and G = 4 (the worst case above), scored by the real aggregation
    and judged by the real engine. Also: at p = 0.9 (a nearly solved task mix) the per-step flat condition's
    observed frequency matches the exact binomial figure."""
    rng = random.Random(22)
    warned = sum(bool(evaluate(_simulated_run(rng, 0.3, 4, 105), ended=True)["fired"]) for _ in range(20))
    assert warned == 0
    q = constant_group_probability(0.9, 4)
    exact = step_flat_probability(q, GROUPS_PER_STEP, FLAT_GROUPS.warn.threshold)
    run = _simulated_run(rng, 0.9, 4, 1000)
    observed = sum(1 for row in run.rows if (row.zero_spread_share or 0) >= FLAT_GROUPS.warn.threshold) / 1000
    print(f"p=0.9 G=4: per-step flat share >= 0.6 observed {observed:.3f}, exact {exact:.3f}")
    assert observed == pytest.approx(exact, abs=4 * math.sqrt(exact * (1 - exact) / 1000))
