"""A backend that needs reward workers refuses a worker count that cannot score a rollout (issue 23 §10).

``{"backend": "hyperpod", "worker_count": 0}`` was accepted at Register: the run would take GPUs and then wait
for rollouts no worker could score. Refused now in manifest resolution (Register and ``mtrl submit``), naming
the key, and at deploy time when the default backend is hyperpod and the default or the ceiling is 0. The
backends that score rollouts elsewhere (serverless: the agent Lambda; local: in process) accept 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mtrl.contracts.errors import ConfigurationError
from mtrl.runs.manifest import resolve_run_settings
from mtrl.settings import SettingsError, load_settings
from mtrl.settings.pipeline import PipelineSettings
from tests.aws_fixtures import fake_credentials
from tests.unit.runs.test_manifest_limits import adapter_view

DEFAULTS = PipelineSettings.model_validate({})
# Nova Forge needs a restricted instance group; with one, hyperpod is the deployment's default backend.
NOVA_RIG = {"hyperpod_restricted_instance_group": json.dumps({"name": "nova-rig", "instance_type": "ml.p5.48xlarge"})}
REPO_ROOT = Path(__file__).resolve().parents[3]


def test_a_hyperpod_manifest_without_workers_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigurationError) as raised:
        resolve_run_settings(DEFAULTS, {"backend": "hyperpod", "worker_count": 0}, source="m.run.json")
    message = str(raised.value)
    assert message.startswith("m.run.json: key 'worker_count': 0 reward workers cannot score a rollout")
    assert "needs at least 1" in message
    view = adapter_view({"backend": "hyperpod", "worker_count": 0})  # what Register hands the adapter
    assert isinstance(view, str)
    assert "key 'worker_count'" in view


def test_one_worker_is_enough_and_other_backends_need_none() -> None:
    assert resolve_run_settings(DEFAULTS, {"backend": "hyperpod", "worker_count": 1}).worker_count == 1
    for backend in ("verl", "serverless", "local"):
        assert resolve_run_settings(DEFAULTS, {"backend": backend, "worker_count": 0}).worker_count == 0


def test_a_default_of_zero_is_refused_when_a_manifest_picks_hyperpod() -> None:
    defaults = PipelineSettings.model_validate({"run_backend": "serverless", "run_worker_count": 0})
    with pytest.raises(ConfigurationError, match=r"key 'worker_count': 0 .*\(the deployment's default run_worker"):
        resolve_run_settings(defaults, {"backend": "hyperpod"})


@pytest.mark.parametrize("key", ["run_worker_count", "run_max_worker_count"])
def test_a_hyperpod_deployment_cannot_default_to_no_workers(key: str) -> None:
    with pytest.raises(SettingsError, match="invalid configuration") as raised:
        load_settings({**NOVA_RIG, key: 0}, environ={})
    assert f"setting '{key}': 0 reward workers cannot score a rollout" in str(raised.value)
    for backend in ("verl", "serverless"):  # no reward workers used
        load_settings({**NOVA_RIG, "run_worker_count": 0, key: 0, "run_backend": backend}, environ={})
    load_settings({"run_worker_count": 0, key: 0}, environ={})  # the default backend without a rig is verl


def test_the_cli_refuses_the_manifest_before_any_upload(tmp_path: Path) -> None:
    """The real entry point: ``mtrl submit`` resolves the manifest as Register does, before any AWS call (the
    endpoint given here refuses every connection, so reaching it would be a different error)."""
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"prompt": "p", "info": {"answer": "crane"}}) + "\n", encoding="utf-8")
    manifest = tmp_path / "rows.run.json"
    manifest.write_text(json.dumps({"backend": "hyperpod", "worker_count": 0}), encoding="utf-8")
    completed = subprocess.run(
        [
            *(sys.executable, "-m", "mtrl", "submit", str(data), "--manifest", str(manifest)),
            *("--region", "us-east-1", "--endpoint-url", "http://127.0.0.1:9"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO_ROOT,
        env={**os.environ, **fake_credentials()},
    )
    assert completed.returncode == 2
    assert "key 'worker_count': 0 reward workers cannot score a rollout" in completed.stdout + completed.stderr
