"""--policy openai:BASE_URL: the official openai client against a real chat-completions server on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mtrl.cli import app
from tests.http_serving import serving
from tests.made_env import MADE_ENV

pytest.importorskip("openai", reason="the mtrl[llm] extra (make test installs it)")


class ChatServer(ThreadingHTTPServer):
    requests: list[dict[str, Any]]


class Handler(BaseHTTPRequestHandler):
    """POST /v1/chat/completions: asks for a hint first, then says the word the hints spell so far ('otter')."""

    server: ChatServer

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        body = json.loads(self.rfile.read(length))
        self.server.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        if self.path != "/v1/chat/completions":
            self.send_error(404)
            return
        turns = sum(1 for message in body["messages"] if message["role"] == "assistant")
        content = "hint" if turns == 0 else "otter"
        answer = {
            "id": f"chatcmpl-{len(self.server.requests)}",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10 * len(body["messages"]), "completion_tokens": 1, "total_tokens": 0},
        }
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:  # keep the test output quiet
        pass


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    server = ChatServer(("127.0.0.1", 0), Handler)
    server.requests = []
    with serving(server):
        yield server


def test_env_try_against_a_local_openai_compatible_server(
    chat_server: ChatServer, made_env_root: Path, tmp_path: Path
) -> None:
    base_url = f"http://127.0.0.1:{chat_server.server_address[1]}/v1"
    eval_file = tmp_path / "eval.jsonl"
    eval_file.write_text(
        "".join(
            json.dumps({"id": f"e{i}", "metadata": {"prompt": "Say the word.", "answer": word}}) + "\n"
            for i, word in enumerate(["otter", "ocean"])
        )
    )
    args = ["env", "try", MADE_ENV, "--policy", f"openai:{base_url}", "--model", "served-model"]
    args += ["--temperature", "0.7", "--top-p", "0.9", "--max-new-tokens", "16", "--group-size", "2", "--tasks", "1"]
    args += ["--dataset", str(made_env_root / "custom-environments" / MADE_ENV / "sample" / "train.jsonl")]
    args += ["--eval-dataset", str(eval_file), "--output", str(tmp_path / "o"), "--json"]
    result = CliRunner().invoke(app, args)
    summary = json.loads(result.stdout)
    # Both rollouts of 'otter' do the same (hint, then the word): the reward is flat. That is a finding, reported,
    # not a failure (issue 24 friction 7): exit 0, unless --strict asks for flat to fail.
    assert result.exit_code == 0, result.output
    assert summary["signal_health"]["reward"]["verdict"] == "flat"
    strict = CliRunner().invoke(app, [*args[:-3], "--output", str(tmp_path / "strict"), "--json", "--strict"])
    assert strict.exit_code == 1, strict.output
    assert json.loads(strict.stdout)["signal_health"]["reward"]["verdict"] == "flat"
    assert summary["policy"] == f"openai:{base_url} (served-model)"
    assert summary["groups"][0]["task"] == "train-1"  # the dataset row's id
    assert summary["groups"][0]["reward_mean"] == pytest.approx(1.0 + 0.3 - 0.1)
    # Held-out success is the environment's own criterion: 'otter' is solved, 'ocean' is not.
    assert summary["heldout"]["success_rate"] == 0.5
    # Every environment's policy gets a system prompt (the template declares none: the default one).
    assert summary["overall"]["tokens_per_episode"] == pytest.approx(10 * 2 + 1 + 10 * 4 + 1)
    sent = [request["body"] for request in chat_server.requests]
    assert all(request["path"] == "/v1/chat/completions" for request in chat_server.requests)
    assert {(body["model"], body["temperature"], body["top_p"], body["max_tokens"]) for body in sent} == {
        ("served-model", 0.7, 0.9, 16)
    }
    second_turn = next(body["messages"] for body in sent if len(body["messages"]) == 4)
    assert [message["role"] for message in second_turn] == ["system", "user", "assistant", "user"]
    assert second_turn[3]["content"].startswith("Hint: the word starts with")


def test_an_unreachable_endpoint_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "env",
            "try",
            "wordle",
            "--policy",
            "openai:http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--tasks",
            "1",
            "--eval-tasks",
            "1",
            "--output",
            str(tmp_path / "o"),
            "--json",
        ],
    )
    assert result.exit_code == 2
    assert "the endpoint failed" in json.loads(result.stdout)["error"]
