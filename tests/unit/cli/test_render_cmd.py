"""`mtrl render --manifest FILE [--run-id ID] [--json]` through the real command (issue 21 item 8)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st
from jsonschema import Draft7Validator
from typer.testing import CliRunner

from mtrl.backends.verl.rayjob import controller_problems, rayjob_name
from mtrl.cli import app as cli
from mtrl.cli.yaml_text import dump_documents
from tests.unit.backends.verl.rayjob_schema import RAYJOB_SCHEMA
from tests.unit.backends.verl.verl_support import IMAGE, MODEL, RUN_ID

REPO_ROOT = Path(__file__).resolve().parents[3]
CONFIGURED = ["-c", "verl_models=" + json.dumps([MODEL]), "-c", f"verl_image_uri={IMAGE}"]
runner = CliRunner()


def _manifest(tmp_path: Path, document: dict[str, Any]) -> Path:
    path = tmp_path / "wordle.run.json"
    path.write_text(json.dumps(document))
    return path


def _render(tmp_path: Path, document: dict[str, Any], *args: str) -> Any:
    manifest = _manifest(tmp_path, document)
    base = ["render", "--manifest", str(manifest), "--cdk-json", str(REPO_ROOT / "cdk.json")]
    return runner.invoke(cli, [*base, *args])


def test_json_lists_the_config_map_and_the_rayjob(tmp_path: Path) -> None:
    result = _render(tmp_path, {"environment": "wordle"}, *CONFIGURED, "--run-id", RUN_ID, "--json")
    assert result.exit_code == 0, result.output
    objects = json.loads(result.stdout)
    assert [o["kind"] for o in objects] == ["ConfigMap", "RayJob"]
    assert objects[1]["metadata"]["name"] == rayjob_name(RUN_ID)
    assert controller_problems(objects[1]) == []
    # The CRD check of `mtrl render` of a wordle run (issue 21, done-when): KubeRay 1.7.0's RayJob schema, closed.
    assert [e.message for e in Draft7Validator(RAYJOB_SCHEMA).iter_errors(objects[1])] == []


def test_the_default_text_is_yaml_of_the_same_objects(tmp_path: Path) -> None:
    args = [*CONFIGURED, "--run-id", RUN_ID]
    as_yaml = _render(tmp_path, {"backend_options": {"steps": 7}}, *args)
    as_json = _render(tmp_path, {"backend_options": {"steps": 7}}, *args, "--json")
    assert as_yaml.exit_code == 0, as_yaml.output
    assert as_yaml.stdout.startswith("---\napiVersion: ")
    assert list(yaml.safe_load_all(as_yaml.stdout)) == json.loads(as_json.stdout)


def test_overrides_reach_the_objects_as_at_synth(tmp_path: Path) -> None:
    result = _render(tmp_path, {}, *CONFIGURED, "-c", "verl_kueue_queue_name=team-a", "-c", "prefix=lab", "--json")
    assert result.exit_code == 0, result.output
    rayjob = json.loads(result.stdout)[1]
    assert rayjob["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert rayjob["metadata"]["namespace"] == "lab-verl"


def test_without_a_run_id_one_is_made_from_the_manifest_name(tmp_path: Path) -> None:
    result = _render(tmp_path, {}, *CONFIGURED, "--json")
    assert result.exit_code == 0, result.output
    run_id = json.loads(result.stdout)[1]["metadata"]["annotations"]["mtrl/run-id"]
    assert run_id.startswith("wordle-")


@pytest.mark.parametrize(
    ("document", "args", "message"),
    [
        ({}, [], "mtrl image build verl"),
        ({}, [], "mtrl model import <hub-id>"),
        ({"backend": "local"}, CONFIGURED, "backend 'local' submits no Kubernetes objects"),
        ({"no_such_key": 1}, CONFIGURED, "no_such_key"),
        ({"backend_options": {"steps": 5000}}, CONFIGURED, "steps 5000 is above the deployment's limit"),
        ({"backend_options": {"verl_max_steps": 9}}, CONFIGURED, "a deploy-time setting"),
        ({}, [*CONFIGURED, "--run-id", "Not A Run Id"], "is not a run id"),
        ({}, [*CONFIGURED, "-c", "run_backend=hyperpod"], "hyperpod_restricted_instance_group"),
    ],
)
def test_what_cannot_be_rendered_is_refused_plainly(
    tmp_path: Path, document: dict[str, Any], args: list[str], message: str
) -> None:
    result = _render(tmp_path, document, *args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_eval_split_renders_the_split_files_validate_writes_and_their_eval_uri(tmp_path: Path) -> None:
    # Issue 38 item 10: the run trains on the training split only and evaluates on the held-out one
    # (mtrl.runs.phases.inputs.data_inputs), not on the whole upload with no evaluation set.
    result = _render(tmp_path, {"eval_split": 0.2}, *CONFIGURED, "--run-id", RUN_ID, "--json")
    assert result.exit_code == 0, result.output
    rendered = result.stdout
    assert f"s3://DATA-BUCKET/runs/{RUN_ID}/data/train.jsonl" in rendered
    assert f"s3://DATA-BUCKET/runs/{RUN_ID}/data/eval.jsonl" in rendered
    assert "training-data/wordle.jsonl" not in rendered


def test_without_a_split_the_run_reads_the_copies_validate_made(tmp_path: Path) -> None:
    # Issue 38 item 2: every backend reads the bytes Validate checked, copied under the run's own prefix
    # (mtrl.runs.phases.inputs.validated_keys), never the uploaded key a later upload may overwrite.
    result = _render(tmp_path, {"eval_dataset": "eval-data/held-out.jsonl"}, *CONFIGURED, "--run-id", RUN_ID, "--json")
    assert result.exit_code == 0, result.output
    rendered = result.stdout
    assert f"s3://DATA-BUCKET/runs/{RUN_ID}/data/dataset.jsonl" in rendered
    assert f"s3://DATA-BUCKET/runs/{RUN_ID}/data/eval-dataset.jsonl" in rendered
    assert "training-data/" not in rendered
    assert "eval-data/" not in rendered


@pytest.mark.parametrize(
    ("environment", "args", "message"),
    [
        ("wordel", [], "key 'environment': no environment 'wordel' (did you mean 'wordle'?"),
        ("template", [], "'template' is a custom environment, which a deployment serves only with use_custom_env"),
        ("wordle", ["-c", "run_environment=wordel"], "no environment 'wordel'"),
    ],
)
def test_an_environment_the_deployment_does_not_serve_is_refused(
    tmp_path: Path, environment: str, args: list[str], message: str
) -> None:
    result = _render(tmp_path, {"environment": environment}, *CONFIGURED, *args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_the_deployments_custom_environment_renders(tmp_path: Path) -> None:
    custom = ["-c", "use_custom_env=true", "-c", "custom_env_id=template"]
    result = _render(tmp_path, {"environment": "template"}, *CONFIGURED, *custom, "--json")
    assert result.exit_code == 0, result.output


def test_a_misspelt_key_gets_a_did_you_mean_and_a_quoted_value_is_quoted_once(tmp_path: Path) -> None:
    # Issue 38 item 16: "key 'enviroment': unknown setting" without a hint, and "(got 'x.csv') (got 'x.csv')".
    result = _render(tmp_path, {"enviroment": "wordle", "eval_dataset": "eval-data/x.csv"}, *CONFIGURED)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "key 'enviroment': unknown setting (did you mean 'environment'?)" in text
    assert text.count("(got 'eval-data/x.csv')") == 1


def test_a_missing_manifest_is_named(tmp_path: Path) -> None:
    result = runner.invoke(cli, ["render", "--manifest", str(tmp_path / "nope.run.json"), *CONFIGURED])
    assert result.exit_code == 2
    assert "nope.run.json" in result.output


def test_the_installed_command_renders_in_its_own_process(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, {"environment": "wordle"})
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    args = [sys.executable, "-m", "mtrl", "render", "--manifest", str(manifest), *CONFIGURED, "--json"]
    done = subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert [o["kind"] for o in json.loads(done.stdout)] == ["ConfigMap", "RayJob"]


_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


@given(st.lists(_json, min_size=1, max_size=3))
@example([{"A\n": None}])  # a key ending in a newline: `$` matched before it, so the key went out unquoted
def test_the_yaml_text_reads_back_to_the_same_objects(documents: list[Any]) -> None:
    assert list(yaml.safe_load_all(dump_documents(documents))) == documents
