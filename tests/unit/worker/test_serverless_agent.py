"""The serverless agent's runtime (the ``lambda/serverless_agent`` function's entry point) against a stubbed
``sagemakerjobruntime`` client."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber

from mtrl.worker import serverless_agent as agent

JOB_ARN = "arn:aws:sagemaker:us-east-1:111122223333:job/AgentRFT/smoke-test"


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stubber]:
    client = boto3.client(
        "sagemakerjobruntime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"
    )
    monkeypatch.setattr(agent, "job_runtime_client", lambda region: client)
    with Stubber(client) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


def payload(task: dict[str, Any], **metadata: str) -> dict[str, Any]:
    return {
        "prompt": json.dumps(task),
        "metadata": {"jobArn": JOB_ARN, "rolloutId": "r1", **metadata},
        "inferenceParams": {"temperature": 0.7, "maxTokens": 256, "topP": 0.9},
    }


def reply(content: str) -> dict[str, Any]:
    body = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
    return {"ContentType": "application/json", "Body": StreamingBody(io.BytesIO(body), len(body))}


def expect_sample(stubber: Stubber, content: str) -> None:
    stubber.add_response("sample", reply(content), {"JobArn": JOB_ARN, "TrajectoryId": "r1", "Body": ANY})


def expect_report(stubber: Stubber, reward: Any = ANY) -> None:
    stubber.add_response(
        "complete_rollout",
        {},
        {"JobArn": JOB_ARN, "TrajectoryId": "r1", "Status": "ready", "ClientToken": ANY},
    )
    rewards = ANY if reward is ANY else [reward]
    stubber.add_response(
        "update_reward", {}, {"JobArn": JOB_ARN, "TrajectoryId": "r1", "Rewards": rewards, "ClientToken": ANY}
    )


def test_plays_wordle_and_reports_the_reward(stub: Stubber) -> None:
    expect_sample(stub, "raise")
    expect_sample(stub, "beach")
    expect_report(stub)
    result = agent.handler(payload({"prompt": "Guess the 5-letter word", "answer": "beach", "id": "t1"}))
    assert result["reported"] is True
    assert result["ended"] == "done"
    assert 1.41 <= result["reward"] <= 1.49  # solved on guess 2: 1.45 ± 0.04 shaping
    assert result["metrics"]["outcome"] == pytest.approx(1.45)


def test_sample_request_carries_the_conversation_and_inference_params(stub: Stubber) -> None:
    sent: list[dict[str, Any]] = []
    original = agent.sample

    def spy(client: Any, job_arn: str, trajectory_id: str, messages: Any, params: Any) -> str:
        sent.append({"messages": [dict(m) for m in messages], "params": dict(params)})
        return str(original(client, job_arn, trajectory_id, messages, params))

    agent_sample = agent.sample
    agent.sample = spy
    try:
        expect_sample(stub, "beach")
        expect_report(stub)
        agent.handler(payload({"prompt": "Guess", "answer": "beach"}))
    finally:
        agent.sample = agent_sample
    assert sent[0]["params"] == {"temperature": 0.7, "max_tokens": 256, "top_p": 0.9}
    assert sent[0]["messages"][0]["role"] == "system"
    assert "Wordle" in sent[0]["messages"][0]["content"]


def test_fake_job_arn_smoke_test_is_recognised(stub: Stubber) -> None:
    stub.add_client_error("sample", "ValidationException", "Could not find job " + JOB_ARN, 400)
    result = agent.handler(payload({"prompt": "Guess the 5-letter word", "answer": "beach", "id": "smoke-test"}))
    assert result == {"reward": -1.5, "diagnosis": "job not found (expected for the fake-job-ARN smoke test)"}


def test_foreign_account_is_explained(stub: Stubber) -> None:
    stub.add_client_error("sample", "AccessDeniedException", "not authorized to access this resource", 403)
    result = agent.handler(payload({"prompt": "Guess", "answer": "beach"}))
    assert result["reward"] == -1.5
    assert "another account" in result["diagnosis"]


def test_bad_task_is_a_low_reward_not_an_error(stub: Stubber) -> None:
    expect_report(stub, -1.5)
    result = agent.handler(payload({"prompt": "Guess", "answer": "zzzzz"}))
    assert result["reward"] == -1.5
    assert "invalid task" in result["ended"]
    assert "status" not in result


def test_broken_model_output_is_scored_not_raised(stub: Stubber) -> None:
    body = b"not json"
    stub.add_response(
        "sample",
        {"ContentType": "text/plain", "Body": StreamingBody(io.BytesIO(body), len(body))},
        {"JobArn": JOB_ARN, "TrajectoryId": "r1", "Body": ANY},
    )
    expect_report(stub, -1.5)
    result = agent.handler(payload({"prompt": "Guess", "answer": "beach"}))
    assert result["reward"] == -1.5  # no valid guess: wordle's own no-play score
    assert result["ended"].startswith("episode failed")


def test_reporting_failure_still_returns_the_reward(stub: Stubber) -> None:
    expect_sample(stub, "beach")
    stub.add_client_error("complete_rollout", "InternalServiceError", "boom", 500)
    result = agent.handler(payload({"prompt": "Guess", "answer": "beach"}))
    assert result["reported"] is False
    assert result["reward"] > 1.5


def test_row_shaped_prompt_http_event_and_missing_metadata(stub: Stubber) -> None:
    expect_sample(stub, "beach")
    expect_report(stub)
    event = {"body": json.dumps(payload({"id": "w1", "metadata": {"prompt": "Guess", "answer": "beach"}}))}
    assert agent.handler(event)["reward"] > 1.5
    assert agent.handler({"prompt": "{}", "metadata": {}})["diagnosis"] == "missing jobArn or rolloutId in metadata"
    assert agent.handler(["not", "an", "object"])["diagnosis"] == "payload is not a JSON object"


def test_time_budget_stops_the_episode(stub: Stubber, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MTRL_TIME_MARGIN_S", "0")
    expect_report(stub)

    class Context:
        def get_remaining_time_in_millis(self) -> int:
            return 0

    result = agent.handler(payload({"prompt": "Guess", "answer": "beach"}), Context())
    assert result["ended"] == "time budget exhausted"
    assert result["reward"] == -1.5


def test_the_runs_reasoning_effort_reaches_every_sample_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """The adapter writes backend_options.reasoning_effort into the task JSON (mtrl_agent); the agent strips it from
    the task the environment sees and sends it with the Sample requests."""
    seen: dict[str, Any] = {}

    def play(env: Any, task: dict[str, Any], **kwargs: Any) -> Any:
        seen["task"], seen["params"] = task, kwargs["params"]
        raise agent.JobNotFoundError("Could not find job")

    monkeypatch.setattr(agent, "play", play)
    monkeypatch.setattr(agent, "job_runtime_client", lambda region: object())
    task = {
        "id": "w1",
        "prompt": "Guess the 5-letter word",
        "answer": "crane",
        "mtrl_agent": {"reasoning_effort": "high"},
    }
    result = agent.handle(payload(task))
    assert "job not found" in result["diagnosis"]
    assert seen["params"]["reasoning_effort"] == "high"
    assert "mtrl_agent" not in seen["task"]
    assert agent.agent_options(json.dumps({**task, "mtrl_agent": {"reasoning_effort": "max"}})) == {}


EVAL_JOB_ARN = "arn:aws:sagemaker:us-east-1:111122223333:job/AgentRFTEvaluation/mtrl-eval-run"


def _expect_eval_episode(stubber: Stubber, guesses: list[str], reward: float) -> None:
    for guess in guesses:
        stubber.add_response("sample", reply(guess), {"JobArn": EVAL_JOB_ARN, "TrajectoryId": "r1", "Body": ANY})
    stubber.add_response(
        "complete_rollout", {}, {"JobArn": EVAL_JOB_ARN, "TrajectoryId": "r1", "Status": "ready", "ClientToken": ANY}
    )
    stubber.add_response(
        "update_reward", {}, {"JobArn": EVAL_JOB_ARN, "TrajectoryId": "r1", "Rewards": [reward], "ClientToken": ANY}
    )


def test_an_evaluation_job_is_scored_by_the_external_evaluation_not_the_reward(stub: Stubber) -> None:
    # wordle's reward for a second-guess solve is ~1.45 plus shaping; its EVALUATION is solved → 1.0 exactly.
    _expect_eval_episode(stub, ["raise", "beach"], 1.0)
    result = agent.handler(
        {
            "prompt": json.dumps({"prompt": "Guess", "answer": "beach"}),
            "metadata": {"jobArn": EVAL_JOB_ARN, "rolloutId": "r1"},
        }
    )
    assert result["reward"] == 1.0
    assert result["metrics"]["reward"] > 1.0  # the training reward is still reported among the metrics
    assert result["metrics"]["evaluation"] == 1.0


def test_an_unplayable_episode_of_an_evaluation_job_scores_zero_not_the_low_reward(stub: Stubber) -> None:
    stub.add_response(
        "complete_rollout", {}, {"JobArn": EVAL_JOB_ARN, "TrajectoryId": "r1", "Status": "ready", "ClientToken": ANY}
    )
    stub.add_response(
        "update_reward", {}, {"JobArn": EVAL_JOB_ARN, "TrajectoryId": "r1", "Rewards": [0.0], "ClientToken": ANY}
    )
    result = agent.handler(
        {
            "prompt": json.dumps({"prompt": "Guess", "answer": "zzzzz"}),
            "metadata": {"jobArn": EVAL_JOB_ARN, "rolloutId": "r1"},
        }
    )
    assert result["reward"] == 0.0  # in [0, 1]: the -1.5 low reward would drag pass@k below any real score


def test_the_episode_metrics_name_the_job_and_count_malformed_guesses(
    stub: Stubber, capsys: pytest.CaptureFixture[str]
) -> None:
    # The agent serves every run of its environment: the serverless backend reads one job's series back into that
    # run's signal rows (mtrl.backends.episode_rows), so each line carries the job's name.
    expect_sample(stub, "12345")  # unparsable: wordle's malformed action
    expect_sample(stub, "beach")
    expect_report(stub)
    agent.handler(payload({"prompt": "Guess", "answer": "beach"}))
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    (episodes,) = [
        line
        for line in lines
        if line.get("_aws", {}).get("CloudWatchMetrics", [{}])[0].get("Namespace") == "mtrl/Episodes"
    ]
    assert episodes["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["Environment", "Job"]]
    assert (episodes["Environment"], episodes["Job"]) == ("wordle", "smoke-test")
    assert (episodes["MalformedShare"], episodes["Episodes"], episodes["MeanTurns"]) == (1.0, 1, 2.0)
    assert "RewardMean" in episodes


def test_the_job_name_comes_from_the_arn() -> None:
    assert agent.job_name_of(JOB_ARN) == "smoke-test"
    assert agent.job_name_of("not-an-arn") == "not-an-arn"
