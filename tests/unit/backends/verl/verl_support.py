"""Settings and run contexts of verl runs as the pipeline builds them (deploy values ∪ run settings ∪ options)."""

from __future__ import annotations

import json
from typing import Any

from mtrl.backends.base import CreatedResource, RunContext
from mtrl.backends.verl.offline import offline_run_settings
from mtrl.runs.manifest import resolve_run_settings
from mtrl.settings import load_settings

RUN_ID = "wordle-20261201T120000Z-0a1b2c3d"
MODEL = {"id": "Qwen/Qwen2.5-0.5B-Instruct", "s3_uri": "s3://models-bucket/qwen/", "sha256": "a" * 64}
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/verl-trainer@sha256:" + "c" * 64
BASE_CONTEXT: dict[str, Any] = {"verl_models": json.dumps([MODEL]), "verl_image_uri": IMAGE}


def run_settings(
    context: dict[str, Any] | None = None, manifest: dict[str, Any] | None = None, *, run_id: str = RUN_ID
) -> dict[str, Any]:
    deploy = load_settings({**BASE_CONTEXT, **(context or {})}, environ={"CDK_DEFAULT_REGION": "us-east-1"})
    return offline_run_settings(deploy, resolve_run_settings(deploy, {"backend": "verl", **(manifest or {})}), run_id)


def run_context(settings: dict[str, Any], resources: tuple[CreatedResource, ...] = ()) -> RunContext:
    run_id = settings["run_id"]
    return RunContext(
        run_id=run_id,
        settings=settings,
        dataset_uri=f"s3://data-bucket/runs/{run_id}/data/train.jsonl",
        eval_dataset_uri=None,
        output_uri=f"s3://data-bucket/runs/{run_id}/",
        resources=resources,
    )
