"""The toy backend's adapter: its world and its job are JSON objects under the run's output folder (real S3 calls)."""

from __future__ import annotations

import json
from typing import Any

import boto3
from botocore.exceptions import ClientError

from mtrl.backends._aws import S3Uri
from mtrl.backends.pricing import cost_for_run
from mtrl.contracts.backend import CreatedResource, Finding, JobState, JobStatus, RunContext

WORLD_KIND = "toy-world"


class ToyAdapter:
    name = "toy"

    def __init__(self) -> None:
        self.s3 = boto3.client("s3")

    def _object(self, run: RunContext, name: str) -> S3Uri:
        return S3Uri.parse(f"{run.output_uri}toy/{name}")

    def _read(self, uri: S3Uri) -> dict[str, Any]:
        body = self.s3.get_object(Bucket=uri.bucket, Key=uri.key)["Body"].read()
        loaded: dict[str, Any] = json.loads(body)
        return loaded

    def _write(self, uri: S3Uri, value: dict[str, Any]) -> None:
        self.s3.put_object(Bucket=uri.bucket, Key=uri.key, Body=json.dumps(value).encode())

    def preflight(self, run: RunContext) -> list[Finding]:
        dataset = S3Uri.parse(run.dataset_uri)
        try:
            self.s3.head_object(Bucket=dataset.bucket, Key=dataset.key)
        except ClientError:
            return [Finding("dataset", False, f"toy cannot read {run.dataset_uri}")]
        return [Finding("dataset", True, "toy can read the training split")]

    def provision(self, run: RunContext) -> list[CreatedResource]:
        world = self._object(run, "world.json")
        resource = CreatedResource(WORLD_KIND, str(world))
        run.record_resource(resource)  # recorded before it exists
        self._write(world, {"flavour": run.settings.get("flavour", "plain")})
        return [resource]

    def submit(self, run: RunContext) -> str:
        steps = int(run.settings.get("steps", 2))
        self._write(self._object(run, "job.json"), {"step": 0, "steps": steps, "region": run.settings["region"]})
        return f"toy-{run.run_id}"

    def status(self, run: RunContext, job_id: str) -> JobStatus:
        uri = self._object(run, "job.json")
        job = self._read(uri)
        job["step"] += 1
        self._write(uri, job)
        progress = {"step": job["step"], "total_steps": job["steps"]}
        if job["step"] < job["steps"]:
            return JobStatus(JobState.RUNNING, progress=progress)
        cost = cost_for_run({"backend": "toy", "region": job["region"], "toy_steps": job["step"]})
        return JobStatus(
            JobState.SUCCEEDED, progress=progress, metrics={"reward_mean": 1.0, "cost_usd": float(cost.total)}
        )

    def cancel(self, run: RunContext, job_id: str) -> None:
        uri = self._object(run, "job.json")
        self.s3.delete_object(Bucket=uri.bucket, Key=uri.key)

    def cleanup(self, run: RunContext) -> list[CreatedResource]:
        job = self._object(run, "job.json")
        self.s3.delete_object(Bucket=job.bucket, Key=job.key)
        removed = []
        for resource in run.resources:
            if resource.kind == WORLD_KIND:
                world = S3Uri.parse(resource.identifier)
                self.s3.delete_object(Bucket=world.bucket, Key=world.key)
                removed.append(resource)
        return removed
