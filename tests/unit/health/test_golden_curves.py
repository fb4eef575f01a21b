"""Golden curves: each synthetic run gives the verdict its failure mode must give; the healthy run fires nothing."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from mtrl.health.rules import evaluate
from mtrl.health.signals import SignalHeader, Signals
from tests.unit.health.curves import START, after, curve


def _fired(document: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [(item["rule"], item["level"], item["step"]) for item in document["fired"]]


def _rules_fired(document: dict[str, Any]) -> set[str]:
    return {item["rule"] for item in document["fired"]}


def test_a_healthy_run_fires_nothing_live_or_finished() -> None:
    signals = curve(100)
    assert evaluate(signals, ended=True)["fired"] == []
    assert evaluate(signals, ended=True)["verdict"] == "ok"
    live = evaluate(curve(100, steps=60), now=after(60), ended=False)
    assert live["verdict"] == "ok"
    assert live["current"] == "ok"
    assert live["fired"] == []


def test_healthy_runs_fire_nothing_over_many_seeds() -> None:
    noisy = [seed for seed in range(30) if evaluate(curve(100, seed=seed), ended=True)["fired"]]
    assert noisy == []


def test_a_plateau_warns_then_reaches_its_stop_level() -> None:
    def flat_after_30(step: int, values: dict[str, Any]) -> dict[str, Any]:
        if step > 30:
            values["reward_mean"] = 0.38 + (values["reward_mean"] - 0.2 - 0.6 * step / 100)  # noise only
        return values

    document = evaluate(curve(100, change=flat_after_30), ended=True)
    assert _rules_fired(document) == {"plateau"}
    plateau = [item for item in document["fired"] if item["rule"] == "plateau"]
    assert [item["level"] for item in plateau] == ["warn", "stop"]
    # The window K = 10 must be mostly past step 30 before the slope looks flat; warn needs 3 steps in a row.
    assert 33 <= plateau[0]["step"] <= 45
    # Stop needs 10 flat steps in a row, warn 3; a 95% interval excludes 0 by chance on ~5% of windows,
    # which restarts the count, so the stop comes at least 7 steps after the warning.
    assert 7 <= plateau[1]["step"] - plateau[0]["step"] <= 25
    assert document["verdict"] == "stop"


def test_flat_groups_fire_warn_after_3_steps_and_stop_after_5_once_armed() -> None:
    def constant(step: int, values: dict[str, Any]) -> dict[str, Any]:
        return {**values, "reward_mean": 0.0, "reward_spread_mean": 0.0, "zero_spread_share": 1.0}

    document = evaluate(curve(100, change=constant), ended=True)
    # warm-up = max(5, 5% of 100) = 5: steps 6, 7, 8 → warn at 8; 5 steps → stop at 10.
    assert _fired(document) == [("flat_groups", "warn", 8), ("flat_groups", "stop", 10)]
    assert document["verdict"] == "stop"
    assert document["rules"]["flat_groups"]["level"] == "stop"


def test_an_eval_divergence_warns_then_stops() -> None:
    def hacked(step: int, values: dict[str, Any]) -> dict[str, Any]:
        if values["evaluation_mean"] is not None and step > 40:
            values["evaluation_mean"] = 0.5 - 0.01 * (step - 40)
        return values

    document = evaluate(curve(100, change=hacked), ended=True)
    assert _rules_fired(document) == {"eval_divergence"}
    levels = [(item["level"], item["step"]) for item in document["fired"]]
    assert levels[0][0] == "warn"
    assert levels[1][0] == "stop"
    assert levels[1][1] == levels[0][1] + 5  # the next evaluation window (every 5 steps)
    assert document["fired"][0]["value"] >= 0.05
    assert document["verdict"] == "stop"


def test_a_malformed_drift_warns_at_baseline_plus_10pp_and_stops_above_half() -> None:
    def drifting(step: int, values: dict[str, Any]) -> dict[str, Any]:
        values["malformed_share"] = min(1.0, 0.02 + 0.01 * step)
        return values

    document = evaluate(curve(100, change=drifting), ended=True)
    assert _rules_fired(document) == {"malformed_actions"}
    warn, stop = document["fired"]
    # baseline = median(0.03, 0.04, 0.05) = 0.04 → warn above 0.14 (step 13 on) for 3 steps → step 15.
    assert (warn["level"], warn["step"]) == ("warn", 15)
    assert abs(warn["threshold"] - 0.14) < 1e-9
    # > 0.5 from step 49 on, 5 steps → 53.
    assert (stop["level"], stop["step"], stop["threshold"]) == ("stop", 53, 0.5)


def test_a_turn_collapse_while_the_reward_falls_warns() -> None:
    def answering_early(step: int, values: dict[str, Any]) -> dict[str, Any]:
        values["reward_mean"] = 0.7 - 0.006 * step + (values["reward_mean"] - 0.2 - 0.6 * step / 100)
        values["mean_turns"] = max(1.0, 6.0 - 0.1 * step)
        values["evaluation_mean"] = None
        return values

    document = evaluate(curve(100, change=answering_early), ended=True)
    assert _rules_fired(document) == {"turn_collapse"}
    assert document["fired"][0]["level"] == "warn"
    assert document["verdict"] == "warn"


def test_fewer_turns_while_the_reward_rises_is_learning_not_a_warning() -> None:
    # Down to about half the early level (a collapse to a quarter or less warns whatever the reward does:
    # tests/unit/health/test_run_history_rules.py).
    def efficient(step: int, values: dict[str, Any]) -> dict[str, Any]:
        values["mean_turns"] = max(2.0, 6.0 - 0.1 * step)
        return values

    assert evaluate(curve(100, change=efficient), ended=True)["fired"] == []


def test_a_stalled_run_warns_once_nothing_arrives_for_the_stall_limit() -> None:
    signals = curve(100, steps=20)
    quiet = evaluate(signals, now=after(20 + 10), ended=False)  # 10 minutes < max(3 x 60 s, 15 min)
    assert quiet["fired"] == []
    stalled = evaluate(signals, now=after(20 + 16), ended=False)
    assert _fired(stalled) == [("stalled", "warn", 20)]
    assert stalled["rules"]["stalled"]["threshold"] == 900.0
    assert stalled["current"] == "warn"
    assert evaluate(signals, now=after(20 + 16), ended=True)["rules"]["stalled"]["level"] == "ok"


def test_a_slow_run_stalls_only_after_three_times_its_median_step_time() -> None:
    signals = curve(100, steps=20)
    slow = Signals(
        header=signals.header,
        rows=tuple(row.__class__(**{**row.to_dict(), "time": _shift(row.step * 600)}) for row in signals.rows),
    )
    assert evaluate(slow, now=_at(20 * 600 + 1700), ended=False)["fired"] == []
    assert _fired(evaluate(slow, now=_at(20 * 600 + 1801), ended=False)) == [("stalled", "warn", 20)]


def _shift(seconds: float) -> str:
    return _at(seconds).isoformat().replace("+00:00", "Z")


def _at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


def test_a_zero_step_success_is_incomplete() -> None:
    document = evaluate(Signals(header=SignalHeader(planned_steps=100, group_size=8), rows=()), ended=True)
    assert document["verdict"] == "incomplete"
    assert _fired(document) == [("incomplete", "stop", 0)]


def test_a_run_that_ends_halfway_is_incomplete_but_not_while_it_runs() -> None:
    signals = curve(100, steps=50)
    assert evaluate(signals, ended=True)["verdict"] == "incomplete"
    assert evaluate(signals, now=after(50), ended=False)["verdict"] == "ok"


def test_hysteresis_two_flat_steps_do_not_fire_and_three_clean_ones_clear() -> None:
    def bursts(step: int, values: dict[str, Any]) -> dict[str, Any]:
        if step in {10, 11, 20, 21, 22}:
            values["zero_spread_share"] = 0.7
        return values

    document = evaluate(curve(100, change=bursts), ended=True)
    assert _fired(document) == [("flat_groups", "warn", 22)]
    segments = document["rules"]["flat_groups"]["segments"]
    assert {"from": 22, "to": 24, "level": "warn"} in segments  # 23, 24 clean; cleared on the 3rd (25)
    assert {"from": 25, "to": 100, "level": "ok"} in segments
    assert document["rules"]["flat_groups"]["level"] == "ok"
    assert document["verdict"] == "warn"  # the worst level the run reached
    assert document["current"] == "ok"


def test_warm_up_scales_with_planned_steps() -> None:
    def constant(step: int, values: dict[str, Any]) -> dict[str, Any]:
        return {**values, "zero_spread_share": 1.0, "reward_spread_mean": 0.0}

    document = evaluate(curve(400, change=constant), ended=True)
    assert document["warmup_steps"] == 20
    assert document["fired"][0]["step"] == 23


def test_spikes_reward_errors_entropy_cap_hits_and_truncation_fire_on_their_curves() -> None:
    def broken(step: int, values: dict[str, Any]) -> dict[str, Any]:
        if step in {40, 42}:
            values["grad_norm"] = 30.0
        if step >= 50:
            values["error_share"] = 0.3
        if step >= 60:
            values["entropy"] = 0.2
        if step >= 70:
            values["cap_hit_share"] = 0.6
        values["truncation_share"] = min(1.0, 0.01 * step)
        return values

    document = evaluate(curve(100, change=broken), ended=True)
    first: dict[tuple[str, str], int] = {}
    for item in document["fired"]:
        first.setdefault((item["rule"], item["level"]), item["step"])
    assert first[("kl_spike", "warn")] == 40
    assert first[("kl_spike", "stop")] == 42
    # 30% errors meet both levels' 3 steps at once: the level goes straight to stop (one entry).
    assert ("reward_errors", "warn") not in first
    assert first[("reward_errors", "stop")] == 52
    assert first[("entropy_collapse", "warn")] == 62
    assert first[("entropy_collapse", "stop")] == 63
    assert first[("cap_hits", "warn")] == 72
    assert first[("truncation", "warn")] == 23  # > 0.2 from step 21, rising
    assert first[("truncation", "stop")] == 55  # > 0.5 from step 51, 5 steps


def test_unknown_signals_are_not_judged() -> None:
    sparse = Signals(
        header=SignalHeader(planned_steps=30),
        rows=tuple(row.__class__(step=row.step, time=row.time) for row in curve(30).rows),
    )
    document = evaluate(sparse, ended=True)
    assert document["verdict"] == "ok"
    assert all(entry["value"] is None for name, entry in document["rules"].items() if name != "incomplete")
