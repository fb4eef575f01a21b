"""The AgentRFT job documents the serverless adapter writes (mtrl/backends/serverless/documents.py): valid against the
service's schema, carrying only the user's hyperparameters, and the service's row format."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from aws_fakes import ACCOUNT, REGION

from mtrl.backends._aws import S3Uri
from mtrl.backends.serverless.adapter import (
    build_evaluation_config,
    build_training_config,
    parse_settings,
    to_service_row,
)
from mtrl.contracts.backend import BackendError
from tests.unit.backends.serverless.serverless_support import BUCKET, LAMBDA_ARN, ROWS, RUNTIME_ARN, SCHEMA, settings


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_training_document_matches_schema_and_carries_only_user_hyperparameters() -> None:
    parsed = parse_settings(settings())
    document = build_training_config(
        parsed,
        job_name="mtrl-x",
        train=S3Uri(BUCKET, "runs/x/input/train/"),
        validation=S3Uri(BUCKET, "runs/x/input/validation/"),
        output=S3Uri(BUCKET, "runs/x/model/"),
    )
    jsonschema.validate(document, SCHEMA)
    assert document["AgentConfig"] == {"CustomAgentLambdaConfig": {"LambdaArn": LAMBDA_ARN}}
    assert document["TrainingConfig"]["HyperParameters"] == {"max_epochs": "20", "sampling_max_tokens": "8192"}
    assert document["OutputDataConfig"]["KmsKeyArn"].startswith("arn:aws:kms:")
    assert document["TrainingConfig"]["BaseModelArn"] == (
        f"arn:aws:sagemaker:{REGION}:aws:hub-content/SageMakerPublicHub/Model/openai-reasoning-gpt-oss-20b"
    )
    assert [c["ChannelName"] for c in document["InputDataConfig"]] == ["train", "validation"]


def test_agentcore_document_without_optionals_matches_schema() -> None:
    parsed = parse_settings(
        settings(
            agent_runtime_arn=RUNTIME_ARN,
            hyperparameters={},
            kms_key_arn=None,
            serverless_subnet_ids=["subnet-0abc"],
            serverless_security_group_ids=["sg-0abc"],
        )
    )
    document = build_training_config(
        parsed, job_name="j", train=S3Uri(BUCKET, "t/"), validation=None, output=S3Uri(BUCKET, "o/")
    )
    jsonschema.validate(document, SCHEMA)
    assert document["AgentConfig"]["BedrockAgentCoreConfig"] == {"AgentRuntimeArn": RUNTIME_ARN, "Qualifier": "DEFAULT"}
    assert "HyperParameters" not in document["TrainingConfig"]
    assert document["VpcConfig"] == {"SecurityGroupIds": ["sg-0abc"], "Subnets": ["subnet-0abc"]}


def test_evaluation_document_matches_schema_with_pass_k() -> None:
    parsed = parse_settings(
        settings(eval_group_size=4, eval_pass_k=[1, 4, 2], eval_hyperparameters={"temperature": 1.0})
    )
    document = build_evaluation_config(
        parsed,
        job_name="mtrl-eval-x",
        evaluation=S3Uri(BUCKET, "runs/x/input/evaluation/"),
        output=S3Uri(BUCKET, "runs/x/evaluation/"),
        model_package_arn=f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package/wordle/1",
    )
    jsonschema.validate(document, SCHEMA)
    hyper = document["EvaluationConfig"]["HyperParameters"]
    assert hyper == {"eval_group_size": "4", "pass_k_values": "[1, 2, 4]", "temperature": "1.0"}


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d["TrainingConfig"].pop("MlflowConfig"),  # the service requires MLflow
        lambda d: d["TrainingConfig"].update(HyperParameters={"training": {"lr": 1e-5}}),  # nested form is rejected
        lambda d: d["AgentConfig"].update(BedrockAgentCoreConfig={"AgentRuntimeArn": RUNTIME_ARN, "Qualifier": "D"}),
        lambda d: d["InputDataConfig"].reverse(),  # train must come first
    ],
)
def test_schema_rejects_broken_documents(mutate: Any) -> None:
    document = build_training_config(
        parse_settings(settings()),
        job_name="j",
        train=S3Uri(BUCKET, "t/"),
        validation=S3Uri(BUCKET, "v/"),
        output=S3Uri(BUCKET, "o/"),
    )
    mutate(document)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, SCHEMA)


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"serverless_agent_lambda_arns": ["wordle"]}, "<env_id>=<function ARN>"),
        ({"hyperparameters": {"sampling_max_tokens": 16384}}, r"'sampling_max_tokens' must be in \[512, 8192\]"),
        ({"hyperparameters": {"global_batch_size": 48}}, "'global_batch_size' must be one of 32, 64, 128"),
        ({"hyperparameters": {"rollout_max_concurrency": 8}}, "rollout_max_concurrency"),
        ({"hyperparameters": {"kl_coef": 0.1}}, "'kl_coef' is not a documented serverless MTRL hyperparameter"),
        ({"eval_hyperparameters": {"temperature": 3}}, r"'temperature' must be in \[0, 2\]"),
        ({"eval_pass_k": [2]}, "eval_pass_k"),
        ({"serverless_job_role_arn": "mtrl-role"}, "not an ARN"),
        ({"serverless_mlflow_app_arn": None}, "serverless_mlflow_app_arn"),
    ],
)
def test_bad_settings_are_clear_errors(overrides: dict[str, Any], fragment: str) -> None:
    with pytest.raises(BackendError, match=fragment):
        parse_settings(settings(**overrides))


def test_service_rows() -> None:
    assert to_service_row({"prompt": '{"answer": "x"}'}) == {"prompt": '{"answer": "x"}'}
    nova = to_service_row(ROWS[0])
    assert json.loads(nova["prompt"]) == {
        "id": "wordle_train_0000",
        "prompt": "Guess the 5-letter word",
        "answer": "riser",
    }
    flat = to_service_row({"id": "a", "prompt": "p", "answer": "b"})
    assert json.loads(flat["prompt"]) == {"id": "a", "prompt": "p", "answer": "b"}
