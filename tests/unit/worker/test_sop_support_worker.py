"""sop_support in the reward worker: episodes through ``python -m mtrl.worker``'s ``main`` (SQS in moto, the policy
over real HTTP), and the timeout and error paths, each freeing the episode's sandbox."""

from __future__ import annotations

import http.server
import json
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from environments.sop_support import solve
from mtrl.envs.episode_state import open_states
from mtrl.envs.registry import load_spec
from mtrl.worker import RolloutRequest, WorkerConfig, play_episode
from mtrl.worker.__main__ import main as worker_main
from tests.http_serving import serving

SPEC = load_spec("sop_support")
TICKETS = ("T001", "T002", "T007", "T010")
_TICKET = re.compile(r"Ticket (T\d{3})")


class ReferencePolicy(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint that plays the SOP's reference episode of the ticket in the conversation."""

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        messages = request["messages"]
        found = _TICKET.search(messages[1]["content"])
        ticket_id = found.group(1) if found else "T001"
        turn = sum(1 for message in messages if message["role"] == "assistant")
        actions = solve(ticket_id).actions
        body = json.dumps(
            {"choices": [{"message": {"role": "assistant", "content": actions[min(turn, len(actions) - 1)]}}]}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def policy_url() -> Iterator[str]:
    with serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), ReferencePolicy)) as server:
        yield f"http://127.0.0.1:{server.server_port}/v1"


def test_the_worker_entry_point_scores_sop_support_episodes(
    policy_url: str, mocked_aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    sqs = boto3.client("sqs", region_name="us-east-1")
    requests_url = sqs.create_queue(QueueName="requests")["QueueUrl"]
    results_url = sqs.create_queue(QueueName="results")["QueueUrl"]
    for ticket_id in TICKETS:
        task = {"prompt": "", "info": {"ticket_id": ticket_id}}
        sqs.send_message(QueueUrl=requests_url, MessageBody=json.dumps({"rollout_id": ticket_id, "task": task}))
    results: dict[str, dict[str, Any]] = {}
    before = len(open_states())
    previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)

    def collect_then_stop() -> None:
        deadline = time.monotonic() + 60
        while len(results) < len(TICKETS) and time.monotonic() < deadline:
            for message in sqs.receive_message(QueueUrl=results_url, MaxNumberOfMessages=10).get("Messages", []):
                body = json.loads(message["Body"])
                results[body["id"]] = body
            time.sleep(0.05)
        if signal.getsignal(signal.SIGTERM) is not previous[0]:  # only once main() handles it (never kill pytest)
            os.kill(os.getpid(), signal.SIGTERM)  # what ECS sends: the worker drains and stops

    exits: list[int] = []
    monkeypatch.setattr(os, "_exit", exits.append)  # main() ends the process; here it returns instead
    collector = threading.Thread(target=collect_then_stop)
    collector.start()
    try:
        code = worker_main(
            {
                "MTRL_ENV_ID": "sop_support",
                "MTRL_REQUEST_QUEUE_URL": requests_url,
                "MTRL_RESULT_QUEUE_URL": results_url,
                "MTRL_POLICY_URL": policy_url,
                "MTRL_POLICY_AUTH": "none",
                "MTRL_CONCURRENCY": "2",
                "MTRL_GRACE_S": "5",
            }
        )
    finally:
        collector.join(70)
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
    assert (code, exits) in ((0, [0]), (None, [0]))
    assert sorted(results) == sorted(TICKETS)
    for ticket_id, body in results.items():
        assert body["status"] == "completed", body
        assert body["aggregate_reward_score"] == 1.0
        metrics = {entry["name"]: entry["value"] for entry in body["metrics_list"]}
        assert metrics["evaluation"] == 1.0
        assert metrics["fields"] == metrics["state"] == metrics["procedure"] == 1.0
        assert len(body["messages"]) == 1 + 2 * len(solve(ticket_id).actions)
    assert len(open_states()) == before  # every episode's sandbox was freed


def test_timeouts_and_policy_errors_score_low_and_free_the_sandbox() -> None:
    before = len(open_states())
    task = {"prompt": "", "info": {"ticket_id": "T001"}}

    class Slow:
        def act(self, messages: list[dict[str, str]], *, timeout_s: float) -> str:
            time.sleep(min(0.3, timeout_s + 0.05))
            return solve("T001").actions[0]

    slow = play_episode(SPEC, RolloutRequest("slow", "g", task), Slow(), WorkerConfig(episode_timeout_s=0.1))
    assert slow.status == "timeout"
    assert slow.reward == 0.0  # no answer: the environment's own score for an unfinished ticket

    class Broken:
        def act(self, messages: list[dict[str, str]], *, timeout_s: float) -> str:
            raise ConnectionError("policy endpoint down")

    broken = play_episode(SPEC, RolloutRequest("broken", "g", task), Broken(), WorkerConfig())
    assert broken.status == "error"
    assert "ConnectionError" in broken.error
    assert len(open_states()) == before
