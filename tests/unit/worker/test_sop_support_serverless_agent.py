"""sop_support in the serverless agent (mtrl/worker/serverless_agent.py) against a stubbed ``sagemakerjobruntime``
client, as tests/unit/worker/test_serverless_agent.py plays wordle."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.stub import Stubber
from test_serverless_agent import agent, expect_report, expect_sample, payload, stub

from environments.sop_support import SYSTEM_PROMPT, solve
from mtrl.envs.episode_state import open_states

__all__ = ["stub"]  # the stubbed-client fixture, shared with the wordle tests


@pytest.fixture(autouse=True)
def _sop_support(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MTRL_ENV_ID", "sop_support")


def test_plays_the_reference_episode_and_reports_reward_and_evaluation(stub: Stubber) -> None:
    sent: list[list[dict[str, Any]]] = []
    original = agent.sample

    def spy(client: Any, job_arn: str, trajectory_id: str, messages: Any, params: Any) -> str:
        sent.append([dict(m) for m in messages])
        return str(original(client, job_arn, trajectory_id, messages, params))

    for action in solve("T007").actions:
        expect_sample(stub, action)
    expect_report(stub, 1.0)
    before = len(open_states())
    agent.sample = spy
    try:
        result = agent.handler(payload({"prompt": "", "info": {"ticket_id": "T007"}, "id": "t7"}))
    finally:
        agent.sample = original
    assert result["reported"] is True
    assert result["ended"] == "done"
    assert result["reward"] == 1.0
    assert result["metrics"]["evaluation"] == 1.0
    assert result["metrics"]["state"] == 1.0
    assert sent[0][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert "Ticket T007" in sent[0][1]["content"]
    assert "<tool_response>" in sent[-1][-1]["content"]  # the last lookup's reply reached the model
    assert len(open_states()) == before  # the episode's sandbox was freed


def test_prose_instead_of_tools_scores_like_no_answer(stub: Stubber, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MTRL_MAX_TURNS", "3")
    for _ in range(3):
        expect_sample(stub, '{"decision": "refund", "refund_amount": 49.0}')  # JSON, but outside <final_output>
    expect_report(stub, 0.0)
    result = agent.handler(payload({"prompt": "", "info": {"ticket_id": "T001"}}))
    assert result["reward"] == 0.0
    assert result["ended"] == "turn limit reached"
    assert result["metrics"]["answered"] == 0.0


def test_an_unknown_ticket_is_a_low_reward_not_an_error(stub: Stubber) -> None:
    expect_report(stub, -1.5)
    result = agent.handler(payload({"prompt": "", "info": {"ticket_id": "T999"}}))
    assert result["reward"] == -1.5
    assert "is not a sop_support ticket" in result["ended"]
