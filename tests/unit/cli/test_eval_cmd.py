"""`mtrl eval`: policies side by side on a split — the real CLI entry point, the tiny random model, the untrained
features policy, and an openai: policy against a real chat-completions server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mtrl.cli import app
from mtrl.envs.registry import project_root
from tests.made_env import MADE_ENV
from tests.unit.llm.test_openai_policy import ChatServer, chat_server  # noqa: F401  (the fixture)

pytest.importorskip("torch", reason="the mtrl[llm] extra (make test installs it)")

SHORT = ["--max-new-tokens", "2", "--max-turns", "2"]


def _eval(args: list[str]) -> tuple[int, dict[str, Any], str]:
    result = CliRunner().invoke(app, ["eval", *args, "--json"])
    document = json.loads(result.stdout) if result.stdout.strip().startswith("{") else {}
    return result.exit_code, document, result.output


def test_base_and_untrained_policies_side_by_side_through_python_dash_m(tmp_path: Path) -> None:
    per_task = tmp_path / "rows.jsonl"
    args = [sys.executable, "-m", "mtrl", "eval", "wordle", "--policy", "features", "--policy", "hf:tiny-random"]
    args += [*SHORT, "--tasks", "3", "--seed", "4", "--per-task", str(per_task), "--json"]
    done = subprocess.run(args, capture_output=True, text=True, check=False, cwd=project_root(), env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["source"].endswith("wordle/sample/eval.jsonl")  # the held-out split by default
    assert document["tasks"] == 3
    assert document["evaluation"]["measure"] == "evaluation"  # wordle declares EVALUATION
    assert [entry["policy"] for entry in document["policies"]] == ["features", "hf:tiny-random"]
    rows = [json.loads(line) for line in per_task.read_text().splitlines()]
    assert len(rows) == 6
    # Issue 24, friction 5: each row carries the dataset row's id (and is labelled by it), so results join back.
    first_ids = [json.loads(line)["id"] for line in Path(document["source"]).read_text().splitlines()[:3]]
    assert [row["id"] for row in rows] == first_ids * 2
    assert [row["task"] for row in rows] == first_ids * 2
    for entry in document["policies"]:
        mine = [row for row in rows if row["policy"] == entry["policy"]]
        assert [row["task"] for row in mine] == [row["task"] for row in rows[:3]]  # the same tasks for each
        assert entry["evaluation_mean"] == pytest.approx(sum(row["evaluation"] for row in mine) / 3)
        assert entry["reward_mean"] == pytest.approx(sum(row["reward"] for row in mine) / 3)
        assert entry["success_rate"] == pytest.approx(sum(row["success"] for row in mine) / 3)
        assert entry["turns_mean"] == pytest.approx(sum(row["turns"] for row in mine) / 3)
    # The reward is reported beside the evaluation, never in its place: wordle's loss reward is negative.
    assert all(row["reward"] < 0 <= row["evaluation"] for row in rows if not row["success"])
    # Same seed, same numbers: a baseline is reproducible (run again in this process: another process, another
    # torch state, the same command line; the entry point itself was proven above).
    code, again, output = _eval(args[4:-1])
    assert code == 0, output
    assert again["policies"] == document["policies"]


def test_the_human_table_names_the_evaluation_and_the_reward(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["eval", "wordle", "--policy", "features", "--split", "train", "--tasks", "2"])
    assert result.exit_code == 0, result.output
    # Rich wraps at the terminal width, so where a line breaks depends on the checkout's path: compare words.
    text = " ".join(result.stdout.split())
    assert "wordle/sample/train.jsonl (train)" in text
    assert "evaluation: the secret word is guessed" in text
    assert "reward (training signal)" in text
    assert "features" in text


def test_a_stronger_reference_endpoint_next_to_the_tiny_base_model(
    chat_server: ChatServer,  # noqa: F811
    made_env_root: Path,
    tmp_path: Path,
) -> None:
    base_url = f"http://127.0.0.1:{chat_server.server_address[1]}/v1"
    split = tmp_path / "heldout.jsonl"
    split.write_text(
        "".join(
            json.dumps({"id": f"e{i}", "metadata": {"prompt": "Say the word.", "answer": word}}) + "\n"
            for i, word in enumerate(["otter", "ocean", "otter"])
        )
    )
    args = [MADE_ENV, "--policy", "hf:tiny-random", "--policy", f"openai:{base_url}", "--model", "reference"]
    args += ["--split", str(split), "--max-new-tokens", "4", "--max-turns", "3"]
    args += ["--per-task", str(tmp_path / "r.jsonl")]
    code, document, output = _eval(args)
    assert code == 0, output
    tiny, reference = document["policies"]
    assert reference["policy"] == f"openai:{base_url} (reference)"
    # The server asks for a hint, then says 'otter': the template's exact-match evaluation solves 2 of 3 tasks.
    assert reference["evaluation_mean"] == pytest.approx(2 / 3)
    assert reference["success_rate"] == pytest.approx(2 / 3)
    assert reference["turns_mean"] == pytest.approx(7 / 3)  # 'ocean' is never said: it runs to --max-turns 3
    # Its reward includes the closeness shaping and the hint cost: a different figure from the evaluation.
    assert reference["reward_mean"] != pytest.approx(reference["evaluation_mean"])
    assert tiny["policy"] == "hf:tiny-random"
    assert tiny["evaluation_mean"] <= reference["evaluation_mean"]
    assert {body["model"] for body in (request["body"] for request in chat_server.requests)} == {"reference"}
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    mine = [row for row in rows if row["policy"] == reference["policy"]]
    assert [(row["evaluation"], row["turns"]) for row in mine] == [(1.0, 2), (0.0, 3), (1.0, 2)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["wordle", "--policy", "gpt4"], "unknown --policy 'gpt4'"),
        (["wordle", "--policy", "openai:http://127.0.0.1:9/v1"], "needs --model NAME"),
        (["wordle", "--policy", "hf:tiny-random", "--model", "m"], "--model is for the openai:BASE_URL policies"),
        (["wordle", "--policy", "features", "--policy", "features"], "is given more than once"),
        (["no_such_env", "--policy", "features"], "no_such_env"),
        (["wordle", "--policy", "features", "--split", "missing.jsonl"], "missing.jsonl does not exist"),
        (["wordle", "--policy", "features", "--tasks", "0"], "--tasks must be at least 1"),
    ],
)
def test_bad_policies_environments_and_splits_are_usage_errors(args: list[str], message: str) -> None:
    code, document, output = _eval(args)
    assert code == 2, output
    assert message in document["error"]


def test_features_on_an_environment_without_a_features_agent_is_refused(made_env_root: Path) -> None:
    code, document, _ = _eval([MADE_ENV, "--policy", "features"])
    assert code == 2
    assert "the features policy exists only for" in document["error"]


def test_an_unreachable_endpoint_names_the_policy(made_env_root: Path) -> None:
    code, document, _ = _eval([MADE_ENV, "--policy", "openai:http://127.0.0.1:9/v1", "--model", "m", "--tasks", "1"])
    assert code == 2
    assert document["error"].startswith("openai:http://127.0.0.1:9/v1 (m):")


def test_a_split_with_an_invalid_task_is_refused_before_any_policy_runs(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "x", "metadata": {"prompt": "p", "answer": "toolongword"}}) + "\n")
    code, document, _ = _eval(["wordle", "--policy", "features", "--split", str(bad)])
    assert code == 1
    assert "invalid tasks" in document["error"]
