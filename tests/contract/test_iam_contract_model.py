"""The app model on the real synthesized app: names, intrinsics across stacks, role policies, and decisions that
name the action and resource of a denied call."""

from __future__ import annotations

import json

import pytest

from tests.contract.iam_contract import (
    AppModel,
    AwsCall,
    ModelError,
    Outcome,
    assert_calls_allowed,
    explain_calls,
    markdown_table,
)

BACKEND_ROLE = "mtrl-pipeline/Functions/Backend/Role"


def test_explicit_names_pseudo_parameters_and_cross_stack_imports_resolve(
    app_model: AppModel, nova_app_model: AppModel
) -> None:
    assert app_model.account == "111122223333"
    # The RFT role exists only where the hyperpod backend is deployed (Nova Forge configured).
    assert nova_app_model.physical_name("mtrl-backends/Roles/RftRole") == "mtrl-rft"
    assert nova_app_model.arn_of("mtrl-backends/Roles/RftRole") == "arn:aws:iam::111122223333:role/mtrl-rft"
    with pytest.raises(ModelError):
        app_model.arn_of("mtrl-backends/Roles/RftRole")
    assert app_model.arn_of("mtrl-reward-workers/RewardWorkers/Cluster") == (
        "arn:aws:ecs:us-east-1:111122223333:cluster/mtrl-reward-workers"
    )
    # The backend function's settings join values imported from three other stacks.
    environment = nova_app_model.function_environment("mtrl-pipeline/Functions/Backend/Fn/Function")
    hyperpod = json.loads(environment["MTRL_BACKEND_SETTINGS"])["hyperpod"]
    assert hyperpod["ecs_cluster_arn"] == nova_app_model.arn_of("mtrl-reward-workers/RewardWorkers/Cluster")
    environment = app_model.function_environment("mtrl-pipeline/Functions/Backend/Fn/Function")
    serverless = json.loads(environment["MTRL_BACKEND_SETTINGS"])["serverless"]
    bucket = environment["MTRL_DATA_BUCKET"]
    assert bucket == app_model.physical_name("mtrl-data/DataStore/DataBucket", type_="AWS::S3::Bucket")
    assert serverless["kms_key_arn"] == app_model.arn_of("mtrl-data/DataStore/DataKey", type_="AWS::KMS::Key")
    assert serverless["serverless_job_role_arn"] == "arn:aws:iam::111122223333:role/mtrl-serverless-job"
    # Generated names are stable and valid for their type (bucket names lower-case, ≤ 63 chars).
    assert bucket == bucket.lower()
    assert len(bucket) <= 63
    assert AppModel.synth() is app_model  # one synth per process


def test_intrinsics_in_hand_written_templates() -> None:
    templates = {
        "producer": {
            "Resources": {"Q": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "jobs"}}},
            "Outputs": {"QArn": {"Value": {"Fn::GetAtt": ["Q", "Arn"]}, "Export": {"Name": "producer-QArn"}}},
        },
        "consumer": {
            "Conditions": {"Prod": {"Fn::Equals": [{"Ref": "AWS::Region"}, "us-east-1"]}},
            "Resources": {"R": {"Type": "AWS::IAM::Role", "Properties": {"RoleName": "worker"}}},
        },
    }
    model = AppModel.from_templates(templates)
    resolve = model.resolve
    assert resolve("consumer", {"Fn::ImportValue": "producer-QArn"}) == "arn:aws:sqs:us-east-1:111122223333:jobs"
    assert (
        resolve("consumer", {"Fn::Sub": ["arn:${AWS::Partition}:s3:::${B}/*", {"B": "data"}]}) == "arn:aws:s3:::data/*"
    )
    assert resolve("consumer", {"Fn::Sub": "${R.Arn}|${AWS::StackName}|${!Literal}"}) == (
        "arn:aws:iam::111122223333:role/worker|consumer|${Literal}"
    )
    assert resolve("consumer", {"Fn::Select": [1, {"Fn::Split": [",", "a,b,c"]}]}) == "b"
    assert resolve("consumer", {"Fn::If": ["Prod", "big", "small"]}) == "big"
    assert resolve("consumer", ["x", {"Ref": "AWS::NoValue"}]) == ["x"]
    with pytest.raises(ModelError, match="no stack exports it"):
        resolve("consumer", {"Fn::ImportValue": "missing"})
    with pytest.raises(ModelError, match="not modelled"):
        resolve("consumer", {"Fn::GetAtt": ["R", "Nope"]})


def test_role_collects_inline_attached_and_managed_policies() -> None:
    document = {"Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}]}
    templates = {
        "s": {
            "Resources": {
                "Role": {
                    "Type": "AWS::IAM::Role",
                    "Metadata": {"aws:cdk:path": "s/Worker/Role/Resource"},
                    "Properties": {
                        "RoleName": "worker",
                        "Policies": [{"PolicyName": "inline", "PolicyDocument": document}],
                        "ManagedPolicyArns": [
                            {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::aws:policy/ReadOnlyAccess"]]},
                            {"Ref": "Managed"},
                        ],
                    },
                },
                "Policy": {
                    "Type": "AWS::IAM::Policy",
                    "Properties": {
                        "PolicyName": "p",
                        "Roles": [{"Ref": "Role"}],
                        "PolicyDocument": {
                            "Statement": [
                                {
                                    "Effect": "Deny",
                                    "Action": "s3:*",
                                    "Resource": "*",
                                    "Sid": "D",
                                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                                }
                            ]
                        },
                    },
                },
                "Managed": {
                    "Type": "AWS::IAM::ManagedPolicy",
                    "Properties": {
                        "ManagedPolicyName": "mp",
                        "PolicyDocument": {
                            "Statement": [{"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": "*"}]
                        },
                    },
                },
            }
        }
    }
    model = AppModel.from_templates(templates)
    role = model.role("s/Worker/Role")
    assert role.name == "worker"
    assert len(role.statements) == 3
    assert role.aws_managed == ("arn:aws:iam::aws:policy/ReadOnlyAccess",)
    calls = [AwsCall("ec2", "DescribeVpcs", {}, "us-east-1")]
    with pytest.raises(
        AssertionError, match=r"ec2.DescribeVpcs → ec2:DescribeVpcs on \*: .*arn:aws:iam::aws:policy/ReadOnlyAccess"
    ):
        assert_calls_allowed(calls, role, model=model)
    # The AWS-managed policy's grant, as its documentation page states it (here a made-up stand-in for the test).
    grants = {"ReadOnlyAccess": [{"Effect": "Allow", "Action": "ec2:Describe*", "Resource": "*"}]}
    assert_calls_allowed(calls, role, model=model, managed_grants=grants)
    get = [AwsCall("s3", "GetObject", {"Bucket": "b", "Key": "k"}, "us-east-1")]
    with pytest.raises(AssertionError, match="may be denied by s/Policy/D"):
        assert_calls_allowed(get, role, model=model)
    assert_calls_allowed(get, role, model=model, context={"aws:SecureTransport": True})
    with pytest.raises(ModelError, match=r"0 resources of type AWS::IAM::Role match"):
        model.role("s/Nobody")


def test_a_denied_call_on_the_real_template_names_action_and_resource(nova_app_model: AppModel) -> None:
    environment = nova_app_model.function_environment("mtrl-pipeline/Functions/Backend/Fn/Function")
    settings = {
        **json.loads(environment["MTRL_BACKEND_SETTINGS"])["hyperpod"],
        "data_bucket": environment["MTRL_DATA_BUCKET"],
    }
    calls = [
        AwsCall("sagemaker", "DescribeCluster", {"ClusterName": settings["hyperpod_cluster_name"]}, "us-east-1"),
        # The backend function has no business deleting training data.
        AwsCall(
            "s3", "DeleteObject", {"Bucket": settings["data_bucket"], "Key": "training-data/wordle.jsonl"}, "us-east-1"
        ),
        AwsCall("s3", "Foo", {}, "us-east-1"),
    ]
    with pytest.raises(AssertionError) as failure:
        assert_calls_allowed(calls, BACKEND_ROLE, model=nova_app_model)
    message = str(failure.value)
    assert (
        f"s3.DeleteObject → s3:DeleteObject on arn:aws:s3:::{settings['data_bucket']}/training-data/wordle.jsonl: "
        "implicitly denied" in message
    )
    assert "s3.Foo: no IAM mapping for s3.Foo" in message
    assert "DescribeCluster" not in message  # allowed, so not listed
    decisions = explain_calls(calls[:1], BACKEND_ROLE, model=nova_app_model)
    assert decisions[0].decision is not None
    assert decisions[0].decision.outcome is Outcome.ALLOWED
    assert "HyperPodScaleTrainingGroup" in markdown_table(decisions)


def test_assert_calls_allowed_refuses_an_empty_recording(app_model: AppModel) -> None:
    with pytest.raises(AssertionError, match="no AWS calls"):
        assert_calls_allowed([], BACKEND_ROLE, model=app_model)


def test_the_runner_role_allows_what_the_real_sdk_was_seen_to_need(nova_app_model: AppModel) -> None:
    """Two denials tests/contract/test_nova_runner_contract.py found with the real SDK (issue 10, runner role)."""
    from mtrl.backends.hyperpod.naming import SDK_STACK_SUFFIX, run_stack_base

    base = run_stack_base("mtrl", "wordle-20261201-abc")
    calls = [
        # ECSRFTInfrastructure.create_log_group: /ecs/<base>-NovaForgeSDK
        AwsCall("logs", "CreateLogGroup", {"logGroupName": f"/ecs/{base}-{SDK_STACK_SUFFIX}"}, "us-east-1"),
        # util/recipe.py download_templates_from_s3: the recipe templates named by the hub content document
        AwsCall(
            "s3",
            "GetObject",
            {"Bucket": "jumpstart-cache-prod-us-east-1", "Key": "recipes/nova/forge/rft/payload.yaml"},
            "us-east-1",
        ),
    ]
    assert_calls_allowed(calls, "mtrl-backends/Roles/NovaRunnerRole", model=nova_app_model)
    elsewhere = [
        AwsCall("s3", "GetObject", {"Bucket": "jumpstart-cache-prod-us-east-1", "Key": "models/x"}, "us-east-1")
    ]
    with pytest.raises(AssertionError, match="implicitly denied"):
        assert_calls_allowed(elsewhere, "mtrl-backends/Roles/NovaRunnerRole", model=nova_app_model)
