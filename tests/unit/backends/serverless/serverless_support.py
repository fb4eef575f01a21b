"""What the serverless adapter tests share: the deployed names, the backend settings, a run of the adapter and an
agent Lambda that answers the smoke test."""

from __future__ import annotations

import base64
import json
from io import BytesIO
from pathlib import Path
from typing import Any

from aws_fakes import ACCOUNT, REGION, SERVERLESS_JOB_ROLE, FakeAws, Recorder
from botocore.response import StreamingBody

from mtrl.backends._aws import AwsClients
from mtrl.backends.serverless import adapter as serverless
from mtrl.backends.serverless.adapter import ServerlessAdapter
from mtrl.contracts.backend import RunContext

SCHEMA = json.loads((Path(serverless.__file__).parent / "agent_rft_job_config.schema.json").read_text())
BUCKET = "mtrl-data-123456789012"
RUN_ID = "wordle-v3-20261129T103000Z"
LAMBDA_ARN = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:mtrl-agent-wordle"
ASK_ARN = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:mtrl-agent-ask_to_code"
RUNTIME_ARN = f"arn:aws:bedrock-agentcore:{REGION}:{ACCOUNT}:runtime/Wordle_Wordle-abc123"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/{SERVERLESS_JOB_ROLE}"
MLFLOW_STATUS = {"status": "Created"}
ROWS = [
    {"id": "wordle_train_0000", "metadata": {"prompt": "Guess the 5-letter word", "answer": "riser"}},
    {"id": "wordle_train_0001", "metadata": {"prompt": "Guess the 5-letter word", "answer": "swoon"}},
]


def settings(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "region": REGION,
        "serverless_job_role_arn": ROLE_ARN,
        "environment": "wordle",
        "serverless_agent_lambda_arns": [f"wordle={LAMBDA_ARN}", f"ask_to_code={ASK_ARN}"],
        "serverless_accept_eula": True,
        "serverless_mlflow_app_arn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:mlflow-app/app-ABC",
        "serverless_model_package_group_arn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package-group/wordle",
        "kms_key_arn": f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab",
        "hyperparameters": {"sampling_max_tokens": 8192, "max_epochs": 20},
        "environment_id": "wordle",  # other groups' keys are ignored, not errors
    }
    return {**base, **overrides}


def make_run(recorder: Recorder | None = None, *, eval_split: bool = True, **overrides: Any) -> RunContext:
    return RunContext(
        run_id=RUN_ID,
        settings=settings(**overrides),
        dataset_uri=f"s3://{BUCKET}/training-data/wordle.jsonl",
        eval_dataset_uri=f"s3://{BUCKET}/runs/{RUN_ID}/split/eval.jsonl" if eval_split else None,
        output_uri=f"s3://{BUCKET}/runs/{RUN_ID}/",
        resources=tuple(recorder.resources) if recorder else (),
        record_resource=recorder or (lambda _r: None),
    )


def adapter(aws: FakeAws) -> ServerlessAdapter:
    return ServerlessAdapter(AwsClients(aws.session), sleep=lambda _s: None)


def lambda_agent(aws: FakeAws, log_text: str, payload: bytes = b'{"reward": -1.5}') -> None:
    def invoke(_params: dict[str, Any]) -> dict[str, Any]:
        return {
            "StatusCode": 200,
            "Payload": StreamingBody(BytesIO(payload), len(payload)),
            "LogResult": base64.b64encode(log_text.encode()).decode(),
        }

    aws.on("lambda", "Invoke", invoke)
