"""The reward-worker runtime: concurrency bound, timeouts, bad episodes, graceful shutdown, transports."""

from __future__ import annotations

import http.server
import io
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import boto3
import pytest

from mtrl.envs import load_spec
from mtrl.worker import RolloutOutcome, RolloutRequest, WorkerConfig, WorkerRuntime, play_episode
from mtrl.worker.__main__ import ConfigError, config_from_env
from mtrl.worker.__main__ import main as worker_main
from mtrl.worker.transport import (
    HttpChatPolicy,
    MalformedRequestError,
    SqsResultSink,
    SqsRolloutSource,
    parse_request,
    result_body,
)

WORDLE = load_spec("wordle")


def request(rollout_id: str, answer: str = "beach", group: str = "g1") -> RolloutRequest:
    return RolloutRequest(rollout_id=rollout_id, group_id=group, task={"prompt": "Guess", "answer": answer})


class MemorySource:
    def __init__(self, requests: list[RolloutRequest]) -> None:
        self.pending = list(requests)
        self.acked: list[str] = []
        self.released: list[str] = []
        self.lock = threading.Lock()

    def receive(self, max_count: int, wait_s: float) -> list[RolloutRequest]:
        with self.lock:
            taken, self.pending = self.pending[:max_count], self.pending[max_count:]
        if not taken:
            time.sleep(0.005)
        return taken

    def ack(self, req: RolloutRequest) -> None:
        self.acked.append(req.rollout_id)

    def release(self, req: RolloutRequest) -> None:
        self.released.append(req.rollout_id)


class MemorySink:
    def __init__(self) -> None:
        self.outcomes: list[RolloutOutcome] = []

    def publish(self, outcome: RolloutOutcome) -> None:
        self.outcomes.append(outcome)


class ScriptedPolicy:
    """Plays fixed guesses; tracks how many calls run at once."""

    def __init__(self, guesses: list[str], delay_s: float = 0.0) -> None:
        self.guesses = guesses
        self.delay_s = delay_s
        self.active = 0
        self.peak = 0
        self.lock = threading.Lock()

    def act(self, messages: list[dict[str, str]], *, timeout_s: float) -> str:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        try:
            time.sleep(min(self.delay_s, timeout_s + 0.05))
            turn = sum(1 for message in messages if message["role"] == "assistant")
            return self.guesses[min(turn, len(self.guesses) - 1)]
        finally:
            with self.lock:
                self.active -= 1


def run_until(runtime: WorkerRuntime, condition: Any, timeout: float = 5.0) -> None:
    thread = threading.Thread(target=runtime.run)
    thread.start()
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    runtime.request_shutdown()
    thread.join(timeout)
    assert not thread.is_alive()


def test_episodes_are_played_published_and_acknowledged_with_bounded_concurrency() -> None:
    source = MemorySource([request(f"r{i}", group=f"g{i % 2}") for i in range(12)])
    sink = MemorySink()
    policy = ScriptedPolicy(["raise", "beach"], delay_s=0.01)
    health = io.StringIO()
    config = WorkerConfig(concurrency=3, group_size=6, health_every_groups=1, health_dimensions={"RunId": "r"})
    runtime = WorkerRuntime(WORDLE, source, sink, policy, config, health_stream=health)
    run_until(runtime, lambda: len(sink.outcomes) == 12)
    assert sorted(source.acked) == sorted(f"r{i}" for i in range(12))
    assert policy.peak <= 3
    assert all(
        o.status == "completed" and o.reward == pytest.approx(1.45 + o.result.components["shaping"])
        for o in sink.outcomes
        if o.result
    )
    documents = [json.loads(line) for line in health.getvalue().splitlines()]
    emf = [doc for doc in documents if doc["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "mtrl/RewardSignal"]
    assert {doc["Component"] for doc in emf} == {"reward", "outcome", "shaping"}
    assert all(doc["RunId"] == "r" and doc["Environment"] == "wordle" for doc in documents)
    # The external evaluation beside the reward: every scripted episode solves on guess 2 (evaluation 1.0),
    # while the reward is 1.45 plus shaping — two different figures, published apart.
    evaluations = [doc for doc in documents if doc["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "mtrl/Evaluation"]
    assert evaluations
    assert sum(doc["Episodes"] for doc in evaluations) == 12
    assert all(doc["Measure"] == "evaluation" and doc["EvaluationMean"] == 1.0 for doc in evaluations)
    assert all(doc["RewardMean"] > 1.4 for doc in evaluations)


def test_timeout_and_bad_episodes_are_low_rewards_not_crashes() -> None:
    slow = play_episode(
        WORDLE, request("slow"), ScriptedPolicy(["raise"], delay_s=0.3), WorkerConfig(episode_timeout_s=0.1)
    )
    assert slow.status == "timeout"
    assert slow.reward == pytest.approx(-1.5)  # no guess was made in time: the environment's own no-play score

    class Broken:
        def act(self, messages: list[dict[str, str]], *, timeout_s: float) -> str:
            raise ConnectionError("policy endpoint down")

    broken = play_episode(WORDLE, request("broken"), Broken(), WorkerConfig())
    assert broken.status == "error"
    assert "ConnectionError" in broken.error
    invalid = play_episode(WORDLE, request("bad", answer="zzzzz"), Broken(), WorkerConfig(error_reward=-2.0))
    assert invalid.status == "error"
    assert invalid.reward == -2.0
    assert "invalid task" in invalid.error


def test_shutdown_finishes_quick_episodes_and_releases_the_rest() -> None:
    stuck = RolloutRequest("stuck", "g", {"prompt": "STUCK", "answer": "beach"})
    source = MemorySource([request("quick1"), request("quick2"), stuck])
    sink = MemorySink()
    gate = threading.Event()

    class Policy:
        def act(self, messages: list[dict[str, str]], *, timeout_s: float) -> str:
            if messages[1]["content"].startswith("STUCK"):
                gate.wait(3)  # hangs until after shutdown has given up on it
            return "beach"

    runtime = WorkerRuntime(WORDLE, source, sink, Policy(), WorkerConfig(concurrency=3, grace_s=0.2))
    run_until(runtime, lambda: len(sink.outcomes) == 2)
    gate.set()
    time.sleep(0.1)  # the released episode finishing late must not publish
    assert sorted(o.rollout_id for o in sink.outcomes) == sorted(source.acked) == ["quick1", "quick2"]
    assert source.released == ["stuck"]
    assert (runtime.published, runtime.abandoned) == (2, 1)


def test_parse_request_and_result_size() -> None:
    row = parse_request(json.dumps({"id": "x1", "metadata": {"prompt": "p", "answer": "beach"}}), "rh")
    same = parse_request(json.dumps({"rollout_id": "x2", "task": {"answer": "beach", "prompt": "p"}}))
    assert row.group_id == same.group_id  # same task, same group
    assert row.receipt == "rh"
    for bad in ("nope", "[]", json.dumps({"task": {}}), json.dumps({"id": "a"})):
        with pytest.raises(MalformedRequestError):
            parse_request(bad)
    big = RolloutOutcome("r", "g", "completed", 1.0, None, transcript=[{"role": "user", "content": "x" * 300_000}])
    assert json.loads(result_body(big))["transcript_dropped"] is True


def test_sqs_transport_round_trip(mocked_aws: None) -> None:
    sqs = boto3.client("sqs", region_name="us-east-1")
    requests_url = sqs.create_queue(QueueName="requests")["QueueUrl"]
    results_url = sqs.create_queue(QueueName="results")["QueueUrl"]
    for i in range(3):
        sqs.send_message(
            QueueUrl=requests_url,
            MessageBody=json.dumps({"rollout_id": f"r{i}", "task": {"prompt": "p", "answer": "beach"}}),
        )
    sqs.send_message(QueueUrl=requests_url, MessageBody="not json")
    source, sink = SqsRolloutSource(sqs, requests_url), SqsResultSink(sqs, results_url)
    runtime = WorkerRuntime(
        WORDLE, source, sink, ScriptedPolicy(["beach"]), WorkerConfig(concurrency=2, receive_wait_s=0)
    )
    results: list[dict[str, Any]] = []

    def drained() -> bool:
        for message in sqs.receive_message(QueueUrl=results_url, MaxNumberOfMessages=10).get("Messages", []):
            results.append(json.loads(message["Body"]))
        return len(results) == 3 and source.malformed == 1

    run_until(runtime, drained)
    assert sorted(r["id"] for r in results) == ["r0", "r1", "r2"]
    assert all(r["aggregate_reward_score"] > 1.5 for r in results)  # solved on guess 1
    assert source.malformed == 1
    attributes = sqs.get_queue_attributes(QueueUrl=requests_url, AttributeNames=["ApproximateNumberOfMessages"])
    assert attributes["Attributes"]["ApproximateNumberOfMessages"] == "0"  # malformed one is in flight for redrive


def test_http_policy_against_a_local_server() -> None:
    seen: list[dict[str, Any]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            body = json.dumps({"choices": [{"message": {"role": "assistant", "content": "crane"}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.handle_request, daemon=True).start()
    policy = HttpChatPolicy(f"http://127.0.0.1:{server.server_port}/v1", model="m")
    assert policy.act([{"role": "user", "content": "go"}], timeout_s=5) == "crane"
    assert seen == [{"model": "m", "messages": [{"role": "user", "content": "go"}]}]
    server.server_close()
    with pytest.raises(ValueError, match="http"):
        HttpChatPolicy("file:///etc/passwd")


def test_entry_point_configuration_errors() -> None:
    assert config_from_env({"MTRL_CONCURRENCY": "2", "MTRL_RUN_ID": "run-1"}).health_dimensions == {"RunId": "run-1"}
    with pytest.raises(ConfigError, match="MTRL_EPISODE_TIMEOUT_S"):
        config_from_env({"MTRL_EPISODE_TIMEOUT_S": "soon"})
    with pytest.raises(ConfigError, match="concurrency"):
        config_from_env({"MTRL_CONCURRENCY": "0"})
    assert worker_main({"MTRL_ENV_ID": "wordle"}) == 2  # no queue URLs
    assert worker_main({"MTRL_ENV_ID": "nope"}) == 2
    assert config_from_env({"MTRL_ENV_ARGS": '{"max_turns": 4}'}).env_args == {"max_turns": 4}
    with pytest.raises(ConfigError, match="MTRL_ENV_ARGS is not valid JSON"):
        config_from_env({"MTRL_ENV_ARGS": "{max_turns: 4}"})
    with pytest.raises(ConfigError, match="MTRL_ENV_ARGS must be a JSON object"):
        config_from_env({"MTRL_ENV_ARGS": "[4]"})


def test_sigterm_stops_the_loop_gracefully() -> None:
    import os
    import signal

    previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    source = MemorySource([request("only")])
    sink = MemorySink()
    runtime = WorkerRuntime(WORDLE, source, sink, ScriptedPolicy(["beach"]), WorkerConfig(receive_wait_s=0))
    try:
        runtime.install_signal_handlers()
        thread = threading.Thread(target=runtime.run)
        thread.start()
        deadline = time.monotonic() + 5
        while not sink.outcomes and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)
        thread.join(5)
        assert not thread.is_alive()
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
    assert source.acked == ["only"]


def test_nova_forge_mode_execs_the_starter_kit_client(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, list[str], dict[str, str]]] = []
    monkeypatch.setattr("os.execvpe", lambda file, args, env: calls.append((file, args, env)))
    assert worker_main({"MTRL_ENV_ID": "wordle", "MTRL_NOVA_FORGE_COMMAND": "nova-env-client --workers 4"}) == 0
    file, args, env = calls[0]
    assert (file, args) == ("nova-env-client", ["nova-env-client", "--workers", "4"])
    assert env["MTRL_ENV_MODULE"] == "environments.wordle"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(Path(__file__).resolve().parents[3])
    assert worker_main({"MTRL_ENV_ID": "nope", "MTRL_NOVA_FORGE_COMMAND": "x"}) == 2
    assert worker_main({"MTRL_NOVA_FORGE_COMMAND": "  "}) == 2
