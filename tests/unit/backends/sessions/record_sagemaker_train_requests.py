"""Records the request bodies ``sagemaker-train`` sends for the scenario ``test_sagemaker_service`` replays, into
``sagemaker_train_1_27_0_requests.json`` (the contract test compares mtrl's requests with them).

The library is not a dependency of mtrl (about 117 packages, 700 MB with its extras' pins), so this runs in a
throwaway environment, by hand, when the library's version changes:

    uv venv /tmp/stvenv && uv pip install --python /tmp/stvenv/bin/python sagemaker-train==1.27.0
    /tmp/stvenv/bin/python tests/unit/backends/sessions/record_sagemaker_train_requests.py

It drives the library's own ``TrainingClient`` / ``SamplingClient`` with a stand-in runtime that records each call.
"""
# mypy: ignore-errors

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path
from typing import Any

from sagemaker.train.training_session._utils import build_lora_config
from sagemaker.train.training_session.sampling_client import SamplingClient
from sagemaker.train.training_session.service_client import _build_create_session_args
from sagemaker.train.training_session.training_client import TrainingClient
from sagemaker.train.training_session.types import AdamParams, Datum, ModelInput, SamplingParams

ACCOUNT_PACKAGES = "arn:aws:sagemaker:us-east-1:123456789012:model-package/mtrl-sessions"
WEIGHTS, STATE = f"{ACCOUNT_PACKAGES}/1", f"{ACCOUNT_PACKAGES}/2"
SESSION = "mtrl-s1"
calls: list[tuple[str, dict[str, Any]]] = []


class RecordingRuntime:
    def execute_training_operation(self, **request: Any) -> dict[str, Any]:
        calls.append(("ExecuteTrainingOperation", request))
        return {"operationId": f"op-{len(calls)}"}

    def get_training_operation_result(self, **_: Any) -> dict[str, Any]:
        saved = {"saveState": {"modelPackageArn": STATE}, "saveWeights": {"modelPackageArn": WEIGHTS}}
        return {"status": "Completed", "operationResult": saved}

    def execute_sampling_operation(self, **request: Any) -> dict[str, Any]:
        calls.append(("ExecuteSamplingOperation", request))
        return {"operationId": f"op-{len(calls)}"}

    def get_sampling_operation_result(self, **_: Any) -> dict[str, Any]:
        return {"status": "Completed", "operationResult": {"sample": {"sequences": []}, "loadWeightsForSampling": {}}}


def main() -> None:
    calls.append(
        (
            "CreateTrainingSession",
            _build_create_session_args(
                session_name=SESSION,
                base_model_arn="arn:aws:sagemaker:us-west-2:aws:hub-content/SageMakerPublicHub/Model/qwen3-4b/1.0.0",
                model_package_group_arn="arn:aws:sagemaker:us-west-2:123456789012:model-package-group/mtrl-sessions",
                lora_config=build_lora_config(16, 32),
                role_arn="arn:aws:iam::123456789012:role/mtrl-sessions",
                s3_path="s3://bucket/runs/r1/sessions",
                kms_key_arn=None,
                vpc_config=None,
            ),
        )
    )
    runtime = RecordingRuntime()
    training = TrainingClient(SESSION, runtime)
    tokens = [11, 12, 13, 14, 15]
    datum = Datum(
        model_input=ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": tokens[1:],
            "weights": [0.0, 0.0, 1.0, 1.0],
            "logprobs": [0.0, 0.0, -0.5, -1.25],
            "advantages": [0.0, 0.0, 0.75, 0.75],
        },
    )
    training.forward_backward([datum], loss_fn="importance_sampling").result()
    adam = AdamParams(learning_rate=1e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0, grad_clip_norm=1.0)
    training.optim_step(adam).result()
    training.save_weights_for_sampler(description="step-1").result()
    training._load_weights_for_sampling(WEIGHTS)  # what save_weights_and_get_sampling_client does next
    training.save_state(description="state-1").result()
    training.load_state_with_optimizer(STATE).result()
    sampler = SamplingClient(SESSION, runtime, model_package_arn=WEIGHTS)
    params = SamplingParams(max_tokens=512, temperature=1.0, top_p=1.0, seed=7)
    sampler.sample([1, 2, 3], num_samples=4, sampling_params=params).result()
    for _, request in calls:
        request.pop("clientToken", None)  # a fresh uuid per operation
    lines = [json.dumps({"operation": name, "params": request}, separators=(",", ":")) for name, request in calls]
    header = {"library": "sagemaker-train", "version": version("sagemaker-train")}
    text = json.dumps(header, indent=1)[:-2] + ',\n "requests": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n"
    Path(__file__).with_name("sagemaker_train_1_27_0_requests.json").write_text(text)


if __name__ == "__main__":
    main()
