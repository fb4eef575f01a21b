"""Cluster stack (default settings): EKS, the Helm dependencies release, HyperPod, IAM and outputs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match, Template

from mtrl.settings.aws_facts import DEFAULT_KUBERNETES_VERSION, HYPERPOD_EKS_KUBERNETES_VERSIONS
from mtrl.settings.cluster import (
    HELM_CHART_COMMIT,
    HELM_CHART_SHA256,
    HELM_COMPONENT_VALUE_KEYS,
    REQUIRED_HELM_COMPONENTS,
)
from stacks.app_builder import Deployment
from stacks.constructs.eks_cluster import MANAGED_ADDONS
from stacks.constructs.hyperpod_cluster import LIFECYCLE_DIR, MANAGED_INSTANCE_POLICY
from stacks.constructs.hyperpod_helm import KUBECTL_LAYER_VERSION, check_kubectl_skew
from stacks.constructs.kubernetes_access import NETWORK_INTERFACE_ACTIONS
from tests.conftest import make_app
from tests.unit.stacks.template_tools import as_list, cfn_lint, least_privilege_violations, of_type, only

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


def test_eks_endpoint_is_private_only_by_default(deployment: Deployment, cluster_json: dict[str, Any]) -> None:
    # Issue 36 item 5: the public endpoint was open to 0.0.0.0/0 because the Helm installer and the backend function
    # ran outside the VPC. They now run in it (tests/unit/stacks/test_eks_endpoint_access.py), so nothing is public:
    # AWS::EKS::Cluster ResourcesVpcConfig with EndpointPublicAccess false and no PublicAccessCidrs.
    _, eks = only(cluster_json, "AWS::EKS::Cluster")
    vpc = eks["Properties"]["ResourcesVpcConfig"]
    assert deployment.settings.eks_endpoint_access == "private"
    assert vpc["EndpointPublicAccess"] is False
    assert vpc["EndpointPrivateAccess"] is True
    assert "PublicAccessCidrs" not in vpc
    assert eks["Properties"]["Version"] == deployment.settings.kubernetes_version


def test_tasks_reach_the_private_endpoint_through_the_cluster_group(network_template: Any) -> None:
    """The runner task (reward-worker group) reaches the private endpoint's interfaces (cluster group) on 443 only."""
    groups = network_template.find_resources("AWS::EC2::SecurityGroup")
    by_description = {r["Properties"]["GroupDescription"].split(":")[0]: lid for lid, r in groups.items()}
    cluster, tasks = by_description["HyperPod nodes"], by_description["Reward workers"]
    rules = [
        r["Properties"]
        for r in network_template.find_resources("AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"].get("SourceSecurityGroupId") == {"Fn::GetAtt": [tasks, "GroupId"]}
    ]
    assert rules == [
        {
            "Description": "Kubernetes API (private EKS endpoint) from tasks",
            "FromPort": 443,
            "GroupId": {"Fn::GetAtt": [cluster, "GroupId"]},
            "IpProtocol": "tcp",
            "SourceSecurityGroupId": {"Fn::GetAtt": [tasks, "GroupId"]},
            "ToPort": 443,
        }
    ]


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
    helm_role = stack.helm.function.role
    assert helm_role is not None
    installer = entries[json.dumps({"Fn::GetAtt": [_lid(stack, helm_role), "Arn"]})]
    assert installer["AccessPolicies"] == [
        {
            "AccessScope": {"Type": "cluster"},
            "PolicyArn": _policy_arn("AmazonEKSClusterAdminPolicy", "eks::aws:cluster-access-policy"),
        }
    ]
    assert len(entries) == 1  # no node entry by default (below), no operator entries unless configured


def test_no_node_access_entry_by_default_so_hyperpod_cannot_collide(
    deployment: Deployment, cluster_json: dict[str, Any]
) -> None:
    # Defect 8. HyperPod's CreateCluster creates the access entries of its roles itself: "EksRoleAccessEntries:
    # A list of Amazon EKS IAM role ARNs associated with the cluster. This is created by HyperPod on your behalf"
    # (SageMaker API reference, ClusterMetadata), and the official template grants its cluster-creating role
    # eks:CreateAccessEntry / AssociateAccessPolicy for that (aws/sagemaker-hyperpod-cluster-setup,
    # eks/cloudformation/hyperpod-cluster-template.yaml) without declaring an AWS::EKS::AccessEntry for the
    # execution role. A second entry for the same principal (AWS::EKS::AccessEntry) would collide.
    assert deployment.settings.hyperpod_node_access_entry is False
    types = [v["Properties"].get("Type") for v in of_type(cluster_json, "AWS::EKS::AccessEntry").values()]
    assert "HYPERPOD_LINUX" not in types


def test_node_access_entry_stays_available_as_an_opt_in() -> None:
    _app, deployment = make_app({"hyperpod_node_access_entry": True})
    template = Template.from_stack(deployment.cluster).to_json()
    stack = deployment.cluster
    assert stack.hyperpod is not None
    (nodes,) = [
        v["Properties"] for v in of_type(template, "AWS::EKS::AccessEntry").values() if v["Properties"].get("Type")
    ]
    assert nodes["Type"] == "HYPERPOD_LINUX"
    assert nodes["AccessPolicies"] == []
    assert nodes["PrincipalArn"] == {"Fn::GetAtt": [_lid(stack, stack.hyperpod.execution_role), "Arn"]}


def test_no_job_submission_role(cluster_json: dict[str, Any]) -> None:
    # Nothing assumed it: the hyperpod backend has its own role (stacks/backends/hyperpod/permissions.py).
    assert "JobSubmissionRoleArn" not in cluster_json["Outputs"]
    roles = [v["Properties"].get("Description", "") for v in of_type(cluster_json, "AWS::IAM::Role").values()]
    assert not [d for d in roles if "submit" in d.lower()]


# --- Kubernetes version ---------------------------------------------------------------------------------


def test_default_cluster_runs_kubernetes_1_35_with_an_explicit_standard_upgrade_policy(
    deployment: Deployment, cluster_json: dict[str, Any]
) -> None:
    # Issue 20 item 1. SageMaker HyperPod supports Kubernetes 1.30-1.35 on EKS ("Getting started with Amazon EKS
    # support in SageMaker HyperPod"); 1.35 is in EKS standard support until 2027-03-27 (endoflife.date "Amazon EKS"),
    # 1.34 only until 2026-12-02 and 1.33 not since 2026-07-29. CloudFormation's UpgradePolicy.SupportType defaults
    # to EXTENDED (AWS::EKS::Cluster UpgradePolicy: "The default value is EXTENDED"), which bills extended support
    # at the end of standard support: the template must always state the policy, STANDARD by default.
    assert DEFAULT_KUBERNETES_VERSION == "1.35" == deployment.settings.kubernetes_version
    assert max(HYPERPOD_EKS_KUBERNETES_VERSIONS, key=lambda v: int(v.split(".")[1])) == "1.35"
    assert sorted(HYPERPOD_EKS_KUBERNETES_VERSIONS) == ["1.34", "1.35"]  # 1.33 dropped (in extended support)
    assert all(end >= "2026-12-01" for end in HYPERPOD_EKS_KUBERNETES_VERSIONS.values())
    _, eks = only(cluster_json, "AWS::EKS::Cluster")
    assert eks["Properties"]["Version"] == "1.35"
    assert eks["Properties"]["UpgradePolicy"] == {"SupportType": "STANDARD"}


def test_kubectl_layer_is_within_one_minor_of_every_allowed_version() -> None:
    # Kubernetes "Version Skew Policy": kubectl is supported within one minor version (older or newer) of
    # kube-apiserver. The layer (aws-cdk.lambda-layer-kubectl-v34) must serve every version a deployment may choose.
    for version in HYPERPOD_EKS_KUBERNETES_VERSIONS:
        assert abs(int(version.split(".")[1]) - int(KUBECTL_LAYER_VERSION.split(".")[1])) <= 1, version
        check_kubectl_skew(version)
    with pytest.raises(ValueError, match="more than one minor version away"):
        check_kubectl_skew("1.32")
    with pytest.raises(ValueError, match="more than one minor version away"):
        check_kubectl_skew("1.36")
    infra = (Path(__file__).resolve().parents[3] / "requirements" / "infra.in").read_text()
    assert f"aws-cdk.lambda-layer-kubectl-v{KUBECTL_LAYER_VERSION.split('.')[1]}" in infra


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


def test_helm_chart_is_pinned_to_a_release_tag_not_a_pull_request_ref(cluster_json: dict[str, Any]) -> None:
    # Defect 1. 1504d53b... existed only on refs/pull/276/merge of aws/sagemaker-hyperpod-cli. The default is the
    # commit of release tag v3.9.0, which is on main (checked against a snapshot of the repository's refs).
    _, release = only(cluster_json, "Custom::HyperPodHelmRelease")
    assert release["Properties"]["ChartRevision"] == HELM_CHART_COMMIT == "b01cf90676553a711ab1a8ac51422adbb09aef6b"
    assert "1504d53b28a6de4449c0fcdf9d56b8c87f28283f" not in json.dumps(cluster_json)
    # Issue 38 item 7: pinned by its files' digest too (computed over helm_chart/HyperPodHelmChart at that commit of
    # aws/sagemaker-hyperpod-cli with mtrl.kube.charts.tree_sha256), and its remote sub-charts' repositories come
    # from code, not from the downloaded Chart.yaml.
    assert release["Properties"]["ChartSha256"] == HELM_CHART_SHA256
    assert json.loads(release["Properties"]["DependencyRepositories"]) == {
        "aws-efa-k8s-device-plugin": "https://aws.github.io/eks-charts",
        "cert-manager": "oci://quay.io/jetstack/charts",
        "nvidia-device-plugin": "https://nvidia.github.io/k8s-device-plugin",
    }


def test_helm_installs_only_the_dependencies_it_needs(cluster_json: dict[str, Any]) -> None:
    # Defect 1: the installer keeps only these Chart.yaml dependencies, so `helm dependency update` fetches nothing
    # for a disabled component (at v3.9.0 the chart lists 17, from quay.io, nvidia.github.io, aws.github.io).
    _, release = only(cluster_json, "Custom::HyperPodHelmRelease")
    assert json.loads(release["Properties"]["Dependencies"]) == sorted(REQUIRED_HELM_COMPONENTS)
    assert release["Properties"]["RestrictedGroups"] == "false"


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
    assert "SubnetIds" in function["VpcConfig"]  # reaches the private EKS endpoint (test_eks_endpoint_access.py)
    role_id = _lid(stack, stack.helm.function.role)
    actions = {
        action for _, statement in _statements_of_role(cluster_json, role_id) for action in as_list(statement["Action"])
    }
    assert actions == {
        "eks:DescribeCluster",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "dynamodb:Query",  # the deploy-during-a-run guard: slot items only
        "kms:Decrypt",  # the run table's key, through DynamoDB only
        *NETWORK_INTERFACE_ACTIONS,  # Lambda places the function in the VPC with its role
    }
    statements = {as_list(s["Action"])[0]: s for _, s in _statements_of_role(cluster_json, role_id)}
    assert statements["dynamodb:Query"]["Condition"] == {
        "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["SLOT"]}
    }
    assert statements["kms:Decrypt"]["Condition"] == {
        "StringEquals": {"kms:ViaService": "dynamodb.us-east-1.amazonaws.com"}
    }


# --- a deploy during a run -------------------------------------------------------------------------------


def test_a_cluster_change_updates_the_guarding_release_first(cluster_json: dict[str, Any]) -> None:
    # Defect 7. AWS::SageMaker::Cluster InstanceGroups[].InstanceCount is required (CloudFormation resource
    # reference): an update of the resource re-states every group at the template's count, the idle count, so a
    # deploy during a run scales the run's group back. The Helm release is updated before the
    # cluster (DependsOn) whenever the cluster's properties change (ClusterFingerprint), and its handler refuses
    # while a run holds a slot in the run table (tests/unit/lambda/hyperpod_helm/test_hyperpod_helm_handler.py).
    release_id, release = only(cluster_json, "Custom::HyperPodHelmRelease")
    _, hyperpod = only(cluster_json, "AWS::SageMaker::Cluster")
    assert release_id in hyperpod["DependsOn"]
    props = release["Properties"]
    assert re.fullmatch(r"[0-9a-f]{32}", props["ClusterFingerprint"])
    assert "RunTable" in json.dumps(props["RunTable"])
    assert props["InterruptibleRuns"] == "[]"

    groups = [{"name": "gpu", "instance_type": "ml.g5.12xlarge"}]
    _app, changed = make_app({"hyperpod_instance_groups": groups})
    _, changed_release = only(Template.from_stack(changed.cluster).to_json(), "Custom::HyperPodHelmRelease")
    assert changed_release["Properties"]["ClusterFingerprint"] != props["ClusterFingerprint"]
    _app, same = make_app()
    _, same_release = only(Template.from_stack(same.cluster).to_json(), "Custom::HyperPodHelmRelease")
    assert same_release["Properties"]["ClusterFingerprint"] == props["ClusterFingerprint"]  # no needless updates


# --- HyperPod -------------------------------------------------------------------------------------------


def test_gpu_group_is_created_at_its_idle_count(deployment: Deployment, cluster_json: dict[str, Any]) -> None:
    _, hyperpod = only(cluster_json, "AWS::SageMaker::Cluster")
    (group,) = hyperpod["Properties"]["InstanceGroups"]
    training = deployment.settings.training_instance_group
    assert group["InstanceGroupName"] == training.name == "gpu"
    assert group["InstanceCount"] == training.idle_count == 0
    assert group["InstanceType"] == training.instance_type
    assert group["ThreadsPerCore"] == 1
    (root, secondary) = (config["EbsVolumeConfig"] for config in group["InstanceStorageConfigs"])
    assert secondary["VolumeSizeInGB"] == training.ebs_volume_size_gb
    assert root["RootVolume"] is True
    assert "RestrictedInstanceGroups" not in hyperpod["Properties"]


def test_hyperpod_volumes_use_the_data_key_and_its_policy_lets_ebs_use_it(
    deployment: Deployment, cluster_json: dict[str, Any]
) -> None:
    """Issue 36: HyperPod's instance volumes used an AWS owned key. The SageMaker API's ClusterEbsVolumeConfig
    (botocore sagemaker service model: VolumeKmsKeyId, "The ID of a KMS key to encrypt the Amazon EBS volume";
    RootVolume true: "You must specify a KMS key ID for VolumeKmsKeyId") takes the deployment's data key for both the
    root and the /opt/sagemaker volume; the key policy lets EBS use it in this account (as aws/ebs's does)."""
    _, hyperpod = only(cluster_json, "AWS::SageMaker::Cluster")
    data_key = _lid(deployment.data, deployment.data.store.key)
    for group in hyperpod["Properties"]["InstanceGroups"]:
        configs = [config["EbsVolumeConfig"] for config in group["InstanceStorageConfigs"]]
        assert [config.get("RootVolume", False) for config in configs] == [True, False]
        for config in configs:
            assert data_key in json.dumps(config["VolumeKmsKeyId"])
    key = Template.from_stack(deployment.data).find_resources("AWS::KMS::Key")
    (statements,) = [k["Properties"]["KeyPolicy"]["Statement"] for k in key.values()]
    ebs = {s["Sid"]: s for s in statements if s.get("Sid", "").startswith("EbsVolume")}
    assert set(ebs) == {"EbsVolumesOfThisAccount", "EbsVolumeGrantsOfThisAccount"}
    for statement in ebs.values():
        assert statement["Condition"]["StringEquals"]["kms:ViaService"] == "ec2.us-east-1.amazonaws.com"
        assert statement["Condition"]["StringEquals"]["kms:CallerAccount"] == "123456789012"
    assert ebs["EbsVolumeGrantsOfThisAccount"]["Condition"]["Bool"] == {"kms:GrantIsForAWSResource": "true"}


def test_gpu_group_is_pinned_to_one_az_by_default(deployment: Deployment, cluster_json: dict[str, Any]) -> None:
    # Defect 6. EFA traffic does not cross AZs (Amazon EC2 User Guide, "Elastic Fabric Adapter": an EFA's
    # OS-bypass traffic stays in one subnet), and NCCL over TCP across AZs is slow and billed per GB. Without
    # availability_zone_id the group goes into the first private subnet instead of spanning all of them.
    _, hyperpod = only(cluster_json, "AWS::SageMaker::Cluster")
    (group,) = hyperpod["Properties"]["InstanceGroups"]
    network = deployment.network
    assert network is not None
    first = _lid(network, network.network.vpc.private_subnets[0])
    (subnet,) = group["OverrideVpcConfig"]["Subnets"]
    assert first in json.dumps(subnet)
    assert len(hyperpod["Properties"]["VpcConfig"]["Subnets"]) == len(network.network.vpc.private_subnets)


def test_spreading_a_group_across_zones_is_explicit() -> None:
    groups = [{"name": "gpu", "instance_type": "ml.g5.8xlarge", "spread_across_zones": True}]
    _app, deployment = make_app({"hyperpod_instance_groups": groups})
    _, hyperpod = only(Template.from_stack(deployment.cluster).to_json(), "AWS::SageMaker::Cluster")
    (group,) = hyperpod["Properties"]["InstanceGroups"]
    assert "OverrideVpcConfig" not in group


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
    assert set(as_list(statements["EcrPull"]["Action"])) == {
        "ecr:BatchGetImage",
        "ecr:GetDownloadUrlForLayer",
        "ecr:BatchCheckLayerAvailability",
    }
    eks_id, _ = only(cluster_json, "AWS::EKS::Cluster")
    assert statements["PodIdentityAgent"]["Resource"] == {"Fn::GetAtt": [eks_id, "Arn"]}
    # Defect 3. Both official execution-role templates grant these and the managed policy does not
    # (aws/sagemaker-hyperpod-cluster-setup eks/cloudformation/sagemaker-iam-role-template.yaml; the HyperPod EKS
    # stack of awslabs/awsome-distributed-training). The two permission actions take the network-interface
    # resource with the ec2:Vpc condition key (Service Authorization Reference, Amazon EC2), so they sit in the
    # VPC-conditioned statement; DescribeDhcpOptions has no resource-level permissions, so it is on "*".
    assert {"ec2:CreateNetworkInterfacePermission", "ec2:DeleteNetworkInterfacePermission"} <= set(
        as_list(eni["Action"])
    )
    assert "ec2:DescribeDhcpOptions" in as_list(statements["DescribeNetwork"]["Action"])
    assert statements["DescribeNetwork"]["Resource"] == "*"
    _, hyperpod = only(cluster_json, "AWS::SageMaker::Cluster")
    assert _lid(stack, stack.hyperpod.execution_policy) in hyperpod["DependsOn"]


def test_every_policy_is_least_privilege(cluster_json: dict[str, Any]) -> None:
    assert least_privilege_violations(cluster_json) == []


def test_outputs_for_pipeline_and_operators(cluster_json: dict[str, Any]) -> None:
    assert set(cluster_json["Outputs"]) >= {
        "EksClusterName",
        "EksClusterArn",
        "HyperPodClusterName",
        "HyperPodClusterArn",
        "HyperPodExecutionRoleArn",
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
    matches = cfn_lint(cluster_json)
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
