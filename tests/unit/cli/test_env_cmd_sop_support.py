"""sop_support through the CLI entry points, as a user runs it: `mtrl env list/check/play/try`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from environments.sop_support import EXAMPLE_ACTIONS, solve, tickets
from mtrl.cli import app
from mtrl.envs.registry import project_root
from tests.unit.cli.test_env_cmd import _read_until

runner = CliRunner()


def test_list_and_check() -> None:
    rows = {row["env_id"]: row for row in json.loads(runner.invoke(app, ["env", "list", "--json"]).stdout)}
    assert rows["sop_support"]["source"] == "builtin"
    assert "procedure" in rows["sop_support"]["description"]
    checked = runner.invoke(app, ["env", "check", "sop_support", "--json"])
    assert checked.exit_code == 0, checked.output
    document = json.loads(checked.stdout)
    assert (document["env_id"], document["ok"], document["problems"]) == ("sop_support", True, [])
    assert document["smoke_reward"] is not None  # the smoke episode's reward (issue 24 friction 10)


def test_play_scripted_json_scores_the_reference_episode() -> None:
    ticket_id = "T002"
    task = json.dumps({"prompt": "", "info": {"ticket_id": ticket_id}})
    args = ["env", "play", "sop_support", "--task", task, "--json"]
    for action in solve(ticket_id).actions:
        args += ["--action", action]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["done"] is True
    assert document["result"]["reward"] == 1.0
    assert document["result"]["evaluation"] == 1.0
    assert {"name": "evaluation", "value": 1.0, "type": "Metric"} in document["result"]["metrics_list"]
    assert "Ticket T002" in document["transcript"][0]["content"]


def test_play_refuses_an_unknown_ticket() -> None:
    bad = runner.invoke(
        app, ["env", "play", "sop_support", "--task", '{"info": {"ticket_id": "T999"}}', "--action", "x", "--json"]
    )
    assert bad.exit_code == 1
    assert "is not a sop_support ticket" in json.loads(bad.stdout)["error"]


def test_play_is_interactive_line_by_line() -> None:
    task = json.dumps({"prompt": "", "info": {"ticket_id": "T001"}})
    game = subprocess.Popen(
        [sys.executable, "-m", "mtrl", "env", "play", "sop_support", "--task", task],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=project_root(),
    )
    assert game.stdin is not None
    try:
        assert "Ticket T001" in _read_until(game, "that ends the ticket")
        game.stdin.write(EXAMPLE_ACTIONS[0].encode() + b"\n")
        game.stdin.flush()
        assert '"customer_id": "C1005"' in _read_until(game, "</tool_response>")  # the reply before the next line
        game.stdin.write("".join(action + "\n" for action in EXAMPLE_ACTIONS[1:]).encode())
        game.stdin.flush()
        rest = _read_until(game, "the answer was")
        assert "reward +1.0000 (success)" in rest
        assert game.wait(timeout=30) == 0
    finally:
        game.kill()


def test_try_with_the_features_policy_and_its_defaults_trains_and_the_held_out_evaluation_improves(
    tmp_path: Path,
) -> None:
    result = runner.invoke(app, ["env", "try", "sop_support", "--output", str(tmp_path / "run"), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    heldout = summary["heldout"]
    assert heldout["tasks"] == sum(1 for line in (project_root() / "environments/sop_support/sample/eval.jsonl").open())
    assert heldout["success_before"] <= 0.2
    assert heldout["success_after"] >= 0.8
    assert heldout["reward_after"] > heldout["reward_before"]
    assert set(heldout["components_after"]) == {"fields", "state", "procedure", "excess_calls"}
    assert summary["signal_health_first_step"]["reward"]["zero_spread_share"] < 0.5  # the partial reward separates
    assert len(tickets()) == 54
