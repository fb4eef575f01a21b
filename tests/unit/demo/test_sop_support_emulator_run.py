"""A full pipeline run of sop_support in the emulator, as `make demo` runs wordle: the real CDK synth, the
templates deployed into the embedded emulator, `mtrl submit --watch` of the sample with the `local` backend
(upload → EventBridge → trigger → Step Functions → Validate → GRPO training → held-out evaluation → teardown →
report), then the run's summary read back from the emulator's S3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from mtrl.demo import PREFIX, _data_bucket, _mtrl, _read_json, _run_ids, synthesize
from mtrl.emulator import Emulator, deploy_app, find_emulator
from mtrl.emulator.deploy import session_for
from mtrl.envs.registry import load_spec

pytestmark = pytest.mark.skipif(find_emulator() is None, reason="the emulator is not installed (make emulator)")

SAMPLE = load_spec("sop_support").path / "sample"
EVAL_KEY = "eval-data/sop-support-eval.jsonl"
MANIFEST = {"backend": "local", "environment": "sop_support", "hyperparameters": {"seed": 7}, "eval_dataset": EVAL_KEY}


def test_sop_support_trains_through_the_whole_pipeline_in_the_emulator(tmp_path: Path) -> None:
    synthesize(tmp_path / "cdk.out", Console(file=None, quiet=True))
    with Emulator(environ={"SFN_WAIT_SCALE": "1"}, log_path=tmp_path / "emulator.log") as emulator:
        session = session_for(emulator.client_kwargs)
        for stack in deploy_app(session, tmp_path / "cdk.out", stacks=[f"{PREFIX}-pipeline"]):
            assert stack.ok, (stack.stack_name, stack.status, stack.failures)
        manifest = tmp_path / "sop-support.run.json"
        manifest.write_text(json.dumps(MANIFEST), encoding="utf-8")
        submitted = _mtrl(
            [
                "submit",
                str(SAMPLE / "train.jsonl"),
                "--manifest",
                str(manifest),
                "--eval-file",
                str(SAMPLE / "eval.jsonl"),
                "--watch",
            ],
            emulator,
            capture=True,
        )
        assert submitted.returncode == 0, (submitted.stdout + submitted.stderr)[-4000:]
        [run_id] = _run_ids(emulator)
        s3 = session.client("s3")
        bucket = _data_bucket(session)
        summary = _read_json(s3, bucket, f"runs/{run_id}/summary.json")
        training = _read_json(s3, bucket, f"runs/{run_id}/local/summary.json")
    assert summary["status"] == "SUCCEEDED"
    assert summary["settings"]["environment"] == "sop_support"
    assert summary["settings"]["backend"] == "local"
    assert summary["resources_remaining"] == []
    heldout = training["heldout"]
    assert heldout["tasks"] == 18  # the sample's own eval.jsonl, every ticket
    assert heldout["success_before"] <= 0.2
    assert heldout["success_after"] >= 0.8
