"""The scaffolding the recorded-run contract tests share: moto in the modelled account, the backend function's
deployed settings, and a backend run whose phases are called as the backend function calls them, every AWS call
recorded (the tests then check each against the synthesized policies)."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import pytest

from mtrl.contracts.backend import RunContext
from tests.aws_fixtures import fake_aws
from tests.contract.iam_contract import AppModel, AwsCall, CallRecorder
from tests.unit.backends.aws_fakes import FakeAws, FakeCluster, Recorder

BACKEND_FUNCTION = "mtrl-pipeline/Functions/Backend/Fn/Function"
BACKEND_ROLE = "mtrl-pipeline/Functions/Backend/Role"


def model_account_aws(monkeypatch: pytest.MonkeyPatch, model: AppModel) -> AbstractContextManager[None]:
    """moto under the fake identity, answering in the model's account and region (so ARNs match the synthesized
    ones)."""
    return fake_aws(monkeypatch, region=model.region, account=model.account)


def deployed_backend_settings(model: AppModel, backend: str) -> dict[str, Any]:
    """The backend's section of the backend function's ``MTRL_BACKEND_SETTINGS`` as synthesized: the deploy-time
    values its adapter reads at run time."""
    return dict(json.loads(model.function_environment(BACKEND_FUNCTION)["MTRL_BACKEND_SETTINGS"])[backend])


def deployed_data_bucket(model: AppModel) -> str:
    """The data bucket every pipeline function is told (``MTRL_DATA_BUCKET``)."""
    return str(model.function_environment(BACKEND_FUNCTION)["MTRL_DATA_BUCKET"])


class Clock:
    now = 1_795_000_000.0

    def __call__(self) -> float:
        return self.now


class ModelCluster(FakeCluster):
    """The fake HyperPod cluster with the synthesized cluster's ARN and node role."""

    def __init__(self, aws: FakeAws, *, name: str, arn: str, node_role: str, group: str = "gpu") -> None:
        super().__init__(aws, name=name, group=group, restricted=True)  # Nova Forge's (the preflight refuses others)
        self._arn, self._node_role = arn, node_role

    @property
    def arn(self) -> str:
        return self._arn

    def _gpu_group(self) -> dict[str, Any]:
        return {**super()._gpu_group(), "ExecutionRole": self._node_role}


@dataclass
class BackendRun:
    """One run of an adapter: ``backend(adapter.phase, *args)`` runs a phase with the run's context, as the backend
    function does, and keeps the AWS calls it made in ``calls``."""

    run_id: str
    settings: dict[str, Any]
    bucket: str
    recorder: Recorder = field(default_factory=Recorder)
    calls: list[AwsCall] = field(default_factory=list)

    def context(self) -> RunContext:
        return RunContext(
            run_id=self.run_id,
            settings=self.settings,
            dataset_uri=f"s3://{self.bucket}/training-data/wordle.jsonl",
            eval_dataset_uri=None,
            output_uri=f"s3://{self.bucket}/runs/{self.run_id}/",
            resources=tuple(self.recorder.resources),
            record_resource=self.recorder,
        )

    def __call__(self, step: Callable[..., Any], *args: Any) -> Any:
        with CallRecorder() as recording:
            try:
                return step(self.context(), *args)
            finally:
                self.calls.extend(recording.calls)
