"""Cluster stack (default settings): EKS, the Helm dependencies release, HyperPod, IAM and outputs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Match, Template
from cfnlint.api import ManualArgs, lint

from mtrl.settings.cluster import HELM_COMPONENT_VALUE_KEYS, REQUIRED_HELM_COMPONENTS
from stacks.app_builder import Deployment
from stacks.constructs.eks_cluster import MANAGED_ADDONS
from stacks.constructs.hyperpod_cluster import LIFECYCLE_DIR, MANAGED_INSTANCE_POLICY
from tests.unit.cluster.template_tools import as_list, least_privilege_violations, of_type, only

ALL_LOG_TYPES = {"api", "audit", "authenticator", "controllerManager", "scheduler"}


def _lid(stack: cdk.Stack, construct: Any) -> str:
    default = construct.node.default_child or construct
    return stack.get_logical_id(default)


def _policy_arn(name: str, kind: str = "iam::aws:policy") -> dict[str, Any]:
    return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, f":{kind}/{name}"]]}


# --- EKS ----------------------------------------------------------------------------------------------


def test_eks_uses_access_entries_and_no_creator_admin(cluster_json: dict[str, Any]) -> None:
    _, eks = only(cluster_json, "AWS::EKS::Cluster")
    access = eks["Properties"]["AccessConfig"]
    assert access["AuthenticationMode"] in {"API", "API_AND_CONFIG_MAP"}  # both support access entries
    assert access["BootstrapClusterCreatorAdminPermissions"] is False


def test_eks_logs_every_control_plane_type(cluster_json: dict[str, Any]) -> None:
    _, eks = only(cluster_json, "AWS::EKS::Cluster")
    enabled = {entry["Type"] for entry in eks["Properties"]["Logging"]["ClusterLogging"]["EnabledTypes"]}
    assert enabled == ALL_LOG_TYPES


def test_eks_secrets_are_encrypted_with_the_data_key(deployment: Deployment, cluster_json: dict[str, Any]) -> None:
    _, eks = only(cluster_json, "AWS::EKS::Cluster")
    (config,) = eks["Properties"]["EncryptionConfig"]
    assert config["Resources"] == ["secrets"]
    data_key = _lid(deployment.data, deployment.data.store.key)
    assert data_key in json.dumps(config["Provider"]["KeyArn"])


def test_eks_endpoint_is_public_by_default_as_hyperpod_requires(
    deployment: Deployment, cluster_json: dict[str, Any]
) -> None:
    _, eks = only(cluster_json, "AWS::EKS::Cluster")
    vpc = eks["Properties"]["ResourcesVpcConfig"]
    assert deployment.settings.eks_endpoint_access == "public"
    assert vpc["EndpointPublicAccess"] is True
    assert vpc["EndpointPrivateAccess"] is False
    assert eks["Properties"]["Version"] == deployment.settings.kubernetes_version


def test_eks_control_plane_log_group_is_ours_encrypted_and_bounded(
    deployment: Deployment, cluster_template: Template, cluster_json: dict[str, Any]
) -> None:
    name = f"/aws/eks/{deployment.settings.prefix}-eks/cluster"
    cluster_template.has_resource_properties(
        "AWS::Logs::LogGroup",
        {
            "LogGroupName": name,
            "KmsKeyId": Match.any_value(),
            "RetentionInDays": deployment.settings.log_retention_days,
        },
    )
    log_group = next(
        k for k, v in of_type(cluster_json, "AWS::Logs::LogGroup").items() if v["Properties"]["LogGroupName"] == name
    )
    eks_id, eks = only(cluster_json, "AWS::EKS::Cluster")
    assert log_group in eks["DependsOn"], f"{eks_id} must be created after its log group"


def test_managed_addons(cluster_json: dict[str, Any]) -> None:
    addons = {v["Properties"]["AddonName"]: v["Properties"] for v in of_type(cluster_json, "AWS::EKS::Addon").values()}
    assert set(addons) == set(MANAGED_ADDONS) == {"vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent"}
    assert all(props["ResolveConflicts"] == "OVERWRITE" for props in addons.values())


def test_no_principal_is_mapped_to_system_masters(cluster_json: dict[str, Any]) -> None:
    text = json.dumps(cluster_json)
    assert "system:masters" not in text
    assert not any(
        "KubernetesGroups" in v["Properties"] for v in of_type(cluster_json, "AWS::EKS::AccessEntry").values()
    )


def test_access_entries_and_policies(deployment: Deployment, cluster_json: dict[str, Any]) -> None:
    stack = deployment.cluster
    entries = {
        json.dumps(v["Properties"]["PrincipalArn"]): v["Properties"]
        for v in of_type(cluster_json, "AWS::EKS::AccessEntry").values()
    }
    assert deployment.cluster.hyperpod is not None
    assert deployment.cluster.helm is not None

    job = entries[json.dumps({"Fn::GetAtt": [_lid(stack, stack.job_submission_role), "Arn"]})]
    assert job["AccessPolicies"] == [
        {
            "AccessScope": {"Namespaces": ["kubeflow", "mtrl-runs"], "Type": "namespace"},
            "PolicyArn": _policy_arn("AmazonEKSEditPolicy", "eks::aws:cluster-access-policy"),
        },
        {
            "AccessScope": {"Type": "cluster"},
            "PolicyArn": _policy_arn("AmazonEKSViewPolicy", "eks::aws:cluster-access-policy"),
        },
    ]

    nodes = entries[json.dumps({"Fn::GetAtt": [_lid(stack, stack.hyperpod.execution_role), "Arn"]})]
    assert nodes["Type"] == "HYPERPOD_LINUX"
    assert nodes["AccessPolicies"] == []

    helm_role = stack.helm.function.role
    assert helm_role is not None
    installer = entries[json.dumps({"Fn::GetAtt": [_lid(stack, helm_role), "Arn"]})]
    assert installer["AccessPolicies"] == [
        {
            "AccessScope": {"Type": "cluster"},
            "PolicyArn": _policy_arn("AmazonEKSClusterAdminPolicy", "eks::aws:cluster-access-policy"),
        }
    ]
    assert len(entries) == 3  # no operator entries unless configured


# --- Helm dependencies ----------------------------------------------------------------------------------


def test_helm_release_is_pinned_and_minimal(deployment: Deployment, cluster_json: dict[str, Any]) -> None:
    _, release = only(cluster_json, "Custom::HyperPodHelmRelease")
    props = release["Properties"]
    assert re.fullmatch(r"[0-9a-f]{40}", props["ChartRevision"])
    assert props["ChartRevision"] == deployment.settings.hyperpod_helm_chart_revision
    assert props["ChartRepository"] == "aws/sagemaker-hyperpod-cli"
    values = json.loads(props["Values"])
    required = {HELM_COMPONENT_VALUE_KEYS[name] for name in REQUIRED_HELM_COMPONENTS}
    assert {key for key, on in values.items() if on is True} == required
    # Every other component is switched off explicitly (the chart turns several on by default).
    assert {key for key, on in values.items() if on is False} == set(HELM_COMPONENT_VALUE_KEYS.values()) - required
    assert values["health-monitoring-agent.region"] == "us-east-1"


def test_helm_release_runs_after_its_access_and_before_hyperpod(
    deployment: Deployment, cluster_json: dict[str, Any]
) -> None:
    stack = deployment.cluster
    assert stack.helm is not None
    assert stack.hyperpod is not None
    release_id, release = only(cluster_json, "Custom::HyperPodHelmRelease")
    assert _lid(stack, stack.helm.access_entry) in release["DependsOn"]
    assert all(_lid(stack, addon) in release["DependsOn"] for addon in stack.eks.addons.values())  # type: ignore[union-attr]
    _, hyperpod = only(cluster_json, "AWS::SageMaker::Cluster")
    assert release_id in hyperpod["DependsOn"]


def test_helm_function_has_helm_layer_and_narrow_role(deployment: Deployment, cluster_json: dict[str, Any]) -> None:
    stack = deployment.cluster
    assert stack.helm is not None
    function = cluster_json["Resources"][_lid(stack, stack.helm.function)]["Properties"]
    assert len(function["Layers"]) == 1
    assert function["Architectures"] == ["x86_64"]  # the layer's helm binary is amd64
    assert function["Timeout"] == 900
    assert "VpcConfig" not in function  # reaches the public EKS endpoint
    role_id = _lid(stack, stack.helm.function.role)
    actions = {
        action for _, statement in _statements_of_role(cluster_json, role_id) for action in as_list(statement["Action"])
    }
    assert actions == {"eks:DescribeCluster", "logs:CreateLogStream", "logs:PutLogEvents"}


# --- HyperPod -------------------------------------------------------------------------------------------


def test_gpu_group_is_created_at_its_idle_count(deployment: Deployment, cluster_json: dict[str, Any]) -> None:
    _, hyperpod = only(cluster_json, "AWS::SageMaker::Cluster")
    (group,) = hyperpod["Properties"]["InstanceGroups"]
    training = deployment.settings.training_instance_group
    assert group["InstanceGroupName"] == training.name == "gpu"
    assert group["InstanceCount"] == training.idle_count == 0
    assert group["InstanceType"] == training.instance_type
    assert group["ThreadsPerCore"] == 1
    assert group["InstanceStorageConfigs"] == [{"EbsVolumeConfig": {"VolumeSizeInGB": training.ebs_volume_size_gb}}]
    assert "OverrideVpcConfig" not in group
    assert "RestrictedInstanceGroups" not in hyperpod["Properties"]


def test_hyperpod_cluster_settings(deployment: Deployment, cluster_json: dict[str, Any]) -> None:
    eks_id, _ = only(cluster_json, "AWS::EKS::Cluster")
    _, hyperpod = only(cluster_json, "AWS::SageMaker::Cluster")
    props = hyperpod["Properties"]
    assert props["ClusterName"] == f"{deployment.settings.prefix}-hyperpod"
    assert props["NodeRecovery"] == "Automatic"
    assert props["NodeProvisioningMode"] == "Continuous"
    assert props["Orchestrator"] == {"Eks": {"ClusterArn": {"Fn::GetAtt": [eks_id, "Arn"]}}}
    network = deployment.network
    sg = _lid(network, network.network.hyperpod_security_group)
    assert sg in json.dumps(props["VpcConfig"]["SecurityGroupIds"])
    subnets = json.dumps(props["VpcConfig"]["Subnets"])
    assert all(_lid(network, s) in subnets for s in network.network.vpc.private_subnets)


def test_lifecycle_script_location_is_the_versioned_asset(
    deployment: Deployment, synthesized: tuple[Deployment, Any], cluster_json: dict[str, Any]
) -> None:
    bucket_id, bucket = only(cluster_json, "AWS::S3::Bucket")
    assert bucket["Properties"]["BucketName"].startswith("sagemaker-")  # covered by the managed instance policy
    prefix = f"lifecycle/{cdk.FileSystem.fingerprint(str(LIFECYCLE_DIR))[:16]}/"
    _, hyperpod = only(cluster_json, "AWS::SageMaker::Cluster")
    (group,) = hyperpod["Properties"]["InstanceGroups"]
    assert group["LifeCycleConfig"] == {
        "OnCreate": "on_create.sh",
        "SourceS3Uri": {"Fn::Join": ["", ["s3://", {"Ref": bucket_id}, f"/{prefix}"]]},
    }
    _, copy = only(cluster_json, "Custom::CDKBucketDeployment")
    assert copy["Properties"]["DestinationBucketName"] == {"Ref": bucket_id}
    assert copy["Properties"]["DestinationBucketKeyPrefix"] == prefix
    (key,) = copy["Properties"]["SourceObjectKeys"]
    staged = Path(synthesized[1].directory) / f"asset.{key.removesuffix('.zip')}"
    assert (staged / "on_create.sh").read_bytes() == (LIFECYCLE_DIR / "on_create.sh").read_bytes()


def test_execution_role_is_managed_policy_plus_scoped_extras(
    deployment: Deployment, cluster_json: dict[str, Any]
) -> None:
    stack = deployment.cluster
    assert stack.hyperpod is not None
    role = cluster_json["Resources"][_lid(stack, stack.hyperpod.execution_role)]["Properties"]
    assert role["ManagedPolicyArns"] == [_policy_arn(MANAGED_INSTANCE_POLICY)]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    statements = {
        s["Sid"]: s
        for s in cluster_json["Resources"][_lid(stack, stack.hyperpod.execution_policy)]["Properties"][
            "PolicyDocument"
        ]["Statement"]
    }
    network = deployment.network
    vpc_id = _lid(network, network.network.vpc)
    eni = statements["PodNetworkingInThisVpc"]
    assert vpc_id in json.dumps(eni["Condition"]["ArnEquals"]["ec2:Vpc"])
    assert vpc_id in json.dumps(statements["TagInterfacesInThisVpc"]["Condition"]["ArnEquals"]["ec2:Vpc"])
    assert set(as_list(statements["EcrPullInRegion"]["Action"])) == {
        "ecr:BatchGetImage",
        "ecr:GetDownloadUrlForLayer",
        "ecr:BatchCheckLayerAvailability",
    }
    eks_id, _ = only(cluster_json, "AWS::EKS::Cluster")
    assert statements["PodIdentityAgent"]["Resource"] == {"Fn::GetAtt": [eks_id, "Arn"]}
    _, hyperpod = only(cluster_json, "AWS::SageMaker::Cluster")
    assert _lid(stack, stack.hyperpod.execution_policy) in hyperpod["DependsOn"]


def test_every_policy_is_least_privilege(cluster_json: dict[str, Any]) -> None:
    assert least_privilege_violations(cluster_json) == []


def test_job_submission_role_scales_only_this_cluster(deployment: Deployment, cluster_json: dict[str, Any]) -> None:
    stack = deployment.cluster
    assert stack.hyperpod is not None
    role = cluster_json["Resources"][_lid(stack, stack.job_submission_role)]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "lambda.amazonaws.com"}
    statements = {s["Sid"]: s for s in _policy_of(cluster_json, _lid(stack, stack.job_submission_role))}
    hyperpod_id, _ = only(cluster_json, "AWS::SageMaker::Cluster")
    assert statements["ScaleAndWatchHyperPod"]["Resource"] == {"Fn::GetAtt": [hyperpod_id, "ClusterArn"]}
    assert "sagemaker:UpdateCluster" in statements["ScaleAndWatchHyperPod"]["Action"]
    assert statements["PassNodeRoleToSageMaker"]["Resource"] == {
        "Fn::GetAtt": [_lid(stack, stack.hyperpod.execution_role), "Arn"]
    }
    assert isinstance(stack.job_submission_role, iam.Role)


def test_outputs_for_pipeline_and_operators(cluster_json: dict[str, Any]) -> None:
    assert set(cluster_json["Outputs"]) >= {
        "EksClusterName",
        "EksClusterArn",
        "HyperPodClusterName",
        "HyperPodClusterArn",
        "HyperPodExecutionRoleArn",
        "JobSubmissionRoleArn",
        "TrainingInstanceGroup",
        "InstanceGroups",
        "LifecycleScriptsS3Uri",
        "KubeconfigCommand",
    }
    groups = json.loads(cluster_json["Outputs"]["InstanceGroups"]["Value"])
    assert groups == [
        {"name": "gpu", "instance_type": "ml.g5.8xlarge", "purpose": "training", "idle_count": 0, "run_count": 1}
    ]


def test_cfn_lint_finds_nothing(cluster_json: dict[str, Any]) -> None:
    matches = lint(json.dumps(cluster_json), config=ManualArgs(regions=["us-east-1"], ignore_checks=["W3005"]))
    assert [f"{m.rule.id} {m.message}" for m in matches] == []


# --- helpers --------------------------------------------------------------------------------------------


def _policy_of(template: dict[str, Any], role_id: str) -> list[dict[str, Any]]:
    return [statement for _, statement in _statements_of_role(template, role_id)]


def _statements_of_role(template: dict[str, Any], role_id: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for logical_id, resource in of_type(template, "AWS::IAM::Policy").items():
        if {"Ref": role_id} in resource["Properties"]["Roles"]:
            found += [(logical_id, s) for s in resource["Properties"]["PolicyDocument"]["Statement"]]
    return found
