"""End to end against the embedded emulator: the synthesized emulator variant deployed into MiniStack, then
`mtrl submit --watch` drives a real run (trigger rule, Lambdas, state machine, local backend) to SUCCEEDED.

Skipped (with the reason) only when ``.venv-emulator`` is absent; ``make emulator`` creates it.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mtrl.cli import app as cli
from mtrl.cli.demo.deployment import cli_hints
from mtrl.emulator import Emulator, deploy_app, find_emulator
from mtrl.emulator.deploy import session_for
from tests.conftest import make_app
from tests.unit.client.conftest import SAMPLE

pytestmark = pytest.mark.skipif(
    find_emulator() is None, reason="emulator not installed: run `make emulator` to create .venv-emulator"
)
runner = CliRunner()
# Tiny local-backend run: a couple of GRPO steps on a few tasks, so the whole run takes seconds.
MANIFEST = {
    "backend": "local",
    "environment": "wordle",
    "eval_split": 0.2,
    "hyperparameters": {"steps": 2, "tasks_per_step": 2, "group_size": 2, "eval_every": 1, "eval_tasks": 4},
}


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    out = tmp_path_factory.mktemp("emulator") / "cdk.out"
    # Short status polls: the tiny run finishes in its first poll, so the Wait state is most of the run time.
    make_app({"emulator": "true", "status_poll_seconds": 20, "run_timeout_minutes": 60}, outdir=out)[0].synth()
    with Emulator(environ={"SFN_WAIT_SCALE": "0.05"}) as running:
        stacks = deploy_app(session_for(running.client_kwargs), out, stacks=["mtrl-pipeline"])
        assert all(stack.ok for stack in stacks), [(stack.stack_name, stack.status, stack.failures) for stack in stacks]
        yield running


@pytest.fixture
def cli_env(emulator: Emulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """The emulator's dummy credentials, no user AWS configuration; returns the connection options."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", emulator.client_kwargs["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", emulator.client_kwargs["aws_secret_access_key"])
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("COLUMNS", "200")
    return ["--endpoint-url", emulator.endpoint_url, "--region", emulator.client_kwargs["region_name"]]


def test_submit_watch_runs_to_success_in_the_emulator(cli_env: list[str], tmp_path: Path) -> None:
    dataset = tmp_path / "wordle-e2e.jsonl"
    dataset.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:40]))
    manifest = tmp_path / "run.json"
    manifest.write_text(json.dumps(MANIFEST))
    args = ["submit", str(dataset), "--manifest", str(manifest), "--watch", "--interval", "0.5", "--json", *cli_env]
    result = runner.invoke(cli, args)
    view = json.loads(result.stdout) if result.stdout.strip() else {}
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert view["status"] == "SUCCEEDED"
    assert view["progress"]["step"] == 2
    run_id = view["run_id"]
    assert run_id.startswith("wordle-e2e-")
    listed = runner.invoke(cli, ["runs", "--json", *cli_env])
    assert listed.exit_code == 0, listed.output
    assert run_id in [run["run_id"] for run in json.loads(listed.stdout)["runs"]]
    status = runner.invoke(cli, ["status", run_id, *cli_env])
    assert status.exit_code == 0, status.output
    assert "SUCCEEDED" in status.stdout
    logs = runner.invoke(cli, ["logs", run_id, "--json", *cli_env])
    assert logs.exit_code == 0, logs.output
    groups = {line["log_group"] for line in json.loads(logs.stdout)["lines"]}
    assert {"/mtrl/pipeline/register", "/mtrl/pipeline/backend"} <= groups
    cost = runner.invoke(cli, ["cost", run_id, "--json", *cli_env])
    assert cost.exit_code == 0, cost.output
    assert float(json.loads(cost.stdout)["total"]) == 0  # local backend


def test_an_invalid_dataset_is_refused_with_line_numbers(cli_env: list[str], tmp_path: Path) -> None:
    dataset = tmp_path / "broken.jsonl"
    rows = SAMPLE.read_text().splitlines()[:5]
    rows[3] = '{"id": "half a row"'
    dataset.write_text("\n".join(rows) + "\n")
    result = runner.invoke(cli, ["submit", str(dataset), *cli_env])
    assert result.exit_code == 1
    assert f"{dataset}:line 4" in result.stderr


def test_the_kept_emulator_is_reached_as_the_demo_and_emulator_md_say(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Issue 38 item 14: `mtrl demo --keep-emulator` prints these lines, docs/emulator.md shows them; they must work.
    hints = cli_hints(emulator.endpoint_url)
    doc = (Path(__file__).resolve().parents[3] / "docs" / "emulator.md").read_text()
    exports = hints[0].split("#")[0].split()
    assert " ".join(exports) in doc
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    for assignment in exports[1:]:
        name, _, value = assignment.partition("=")
        monkeypatch.setenv(name, value)
    runs_command = shlex.split(hints[1])
    assert runs_command[0] == "mtrl"
    listed = runner.invoke(cli, [*runs_command[1:], "--json"])
    assert listed.exit_code == 0, listed.output
    assert isinstance(json.loads(listed.stdout)["runs"], list)
