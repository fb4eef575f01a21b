"""The external evaluation is reported next to the reward and never mixed into it (AWS multi-turn RL best practices)."""

from __future__ import annotations

import math

import pytest

from mtrl.envs import EpisodeResult, list_environments, load_spec


def test_evaluation_is_a_metric_entry_and_not_part_of_the_reward() -> None:
    result = EpisodeResult(reward=0.25, components={"partial": 0.25}, evaluation=0.0)
    entries = {entry["name"]: entry for entry in result.metrics_list()}
    assert entries["evaluation"] == {"name": "evaluation", "value": 0.0, "type": "Metric"}
    assert entries["reward"]["value"] == 0.25
    assert result.to_dict()["evaluation"] == 0.0


def test_no_evaluation_means_no_entry() -> None:
    result = EpisodeResult(reward=1.0, components={"x": 1.0})
    assert "evaluation" not in {entry["name"] for entry in result.metrics_list()}
    assert result.to_dict()["evaluation"] is None


@pytest.mark.parametrize("bad", [1.5, -0.1, math.nan, math.inf, True])
def test_evaluation_out_of_range_is_a_contract_problem(bad: float) -> None:
    problems = EpisodeResult(reward=0.0, components={"x": 0.0}, evaluation=bad).problems()
    assert any("evaluation" in problem for problem in problems)


@pytest.mark.parametrize("env_id", [env_id for env_id, _ in list_environments(include_template=True)])
def test_every_shipped_environment_declares_and_reports_an_evaluation(env_id: str) -> None:
    spec = load_spec(env_id)
    assert spec.evaluation, f"{env_id} declares no EVALUATION"
    _, result = spec.play(spec.example_task, spec.example_actions)
    assert result.evaluation in (0.0, 1.0)
    assert spec.smoke_check() == []


def test_smoke_check_flags_a_declared_evaluation_that_is_never_set(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_spec("wordle")
    original = spec.module.make_env

    class NoEvaluation:
        def __init__(self) -> None:
            self.inner = original()

        def reset(self, task: object) -> str:
            return str(self.inner.reset(task))

        def step(self, action: str) -> object:
            return self.inner.step(action)

        @property
        def done(self) -> bool:
            return bool(self.inner.done)

        def result(self) -> EpisodeResult:
            full = self.inner.result()
            return EpisodeResult(reward=full.reward, components=full.components, success=full.success)

    monkeypatch.setattr(spec.module, "make_env", lambda **_: NoEvaluation())
    assert spec.smoke_check() == ["the environment declares EVALUATION but result() sets no evaluation"]
