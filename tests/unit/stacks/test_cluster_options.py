"""Cluster stack with every option set (one extra synth), existing-cluster mode, and placement errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Annotations, Match, Template

from stacks.app_builder import Deployment
from tests.conftest import make_app
from tests.unit.stacks.custom_cluster import ADMIN_ROLE, VIEWER_ROLE
from tests.unit.stacks.template_tools import cfn_lint, least_privilege_violations, of_type, only


def _groups(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    _, hyperpod = only(template, "AWS::SageMaker::Cluster")
    return {g["InstanceGroupName"]: g for g in hyperpod["Properties"]["InstanceGroups"]}


def _subnet_in(deployment: Deployment, zone: str) -> str:
    network = deployment.network
    (subnet,) = [s for s in network.network.vpc.private_subnets if s.availability_zone == zone]
    return network.get_logical_id(subnet.node.default_child)  # type: ignore[arg-type]


def test_training_group_options_reach_the_template(custom_deployment: Deployment, custom_json: dict[str, Any]) -> None:
    gpu = _groups(custom_json)["gpu"]
    assert gpu["InstanceCount"] == 2  # its idle count, not its run count (4)
    assert gpu["ThreadsPerCore"] == 2
    assert gpu["InstanceStorageConfigs"][1]["EbsVolumeConfig"]["VolumeSizeInGB"] == 1000
    assert sorted(gpu["OnStartDeepHealthChecks"]) == ["InstanceConnectivity", "InstanceStress"]
    assert gpu["TrainingPlanArn"] == "arn:aws:sagemaker:us-east-1:123456789012:training-plan/plan-1"
    assert gpu["CapacityRequirements"] == {"Spot": {}}
    assert "CapacityRequirements" not in _groups(custom_json)["system"]  # on-demand is the default
    assert gpu["KubernetesConfig"] == {
        "Labels": {"mtrl/role": "trainer"},
        "Taints": [{"Effect": "NoSchedule", "Key": "nvidia.com/gpu"}],
    }


def test_availability_zone_id_maps_to_the_private_subnet_of_that_zone(
    custom_deployment: Deployment, custom_json: dict[str, Any]
) -> None:
    override = _groups(custom_json)["gpu"]["OverrideVpcConfig"]
    (subnet,) = override["Subnets"]
    assert _subnet_in(custom_deployment, "us-east-1b") in json.dumps(subnet)
    assert _subnet_in(custom_deployment, "us-east-1a") not in json.dumps(subnet)
    # A group without availability_zone_id still sits in one AZ: the first private subnet.
    (system_subnet,) = _groups(custom_json)["system"]["OverrideVpcConfig"]["Subnets"]
    assert _subnet_in(custom_deployment, "us-east-1a") in json.dumps(system_subnet)


def test_restricted_group_and_its_fsx_share_the_training_groups_az(
    custom_deployment: Deployment, custom_json: dict[str, Any]
) -> None:
    # Defect 6. HyperPod creates a restricted group's FSx for Lustre file system in the group's subnet
    # (EnvironmentConfig.FSxLustreConfig, AWS::SageMaker::Cluster), and a file system serves one AZ: the group
    # is pinned to one subnet, the same one as the training group here.
    _, hyperpod = only(custom_json, "AWS::SageMaker::Cluster")
    (rig,) = hyperpod["Properties"]["RestrictedInstanceGroups"]
    assert rig["OverrideVpcConfig"]["Subnets"] == _groups(custom_json)["gpu"]["OverrideVpcConfig"]["Subnets"]
    assert _subnet_in(custom_deployment, "us-east-1b") in json.dumps(rig["OverrideVpcConfig"]["Subnets"])


def test_restricted_group_gets_exactly_its_data_prefixes_and_key_use(
    custom_deployment: Deployment, custom_json: dict[str, Any]
) -> None:
    # Defect 4. A restricted instance group has no lifecycle script and no other role: its nodes use the execution
    # role only (AWS::SageMaker::Cluster ClusterRestrictedInstanceGroup.ExecutionRole), so that role reads the
    # datasets and writes the run outputs, with the data key used only through S3.
    stack = custom_deployment.cluster
    assert stack.hyperpod is not None
    policy = custom_json["Resources"][stack.get_logical_id(stack.hyperpod.restricted_data_policy.node.default_child)]
    assert policy["Properties"]["Roles"] == [
        {"Ref": stack.get_logical_id(stack.hyperpod.execution_role.node.default_child)}
    ]
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    bucket = {"Fn::ImportValue": "mtrl-data-bucket-arn"}
    assert statements["RigReadTrainingData"]["Action"] == "s3:GetObject"
    assert statements["RigReadTrainingData"]["Resource"] == {"Fn::Join": ["", [bucket, "/training-data/*"]]}
    assert statements["RigListTrainingData"]["Resource"] == bucket
    assert statements["RigListTrainingData"]["Condition"] == {"StringLike": {"s3:prefix": ["training-data/*"]}}
    assert statements["RigWriteRunOutputs"]["Action"] == "s3:PutObject"
    assert statements["RigWriteRunOutputs"]["Resource"] == {"Fn::Join": ["", [bucket, "/runs/*"]]}
    key = statements["RigDataKeyThroughS3"]
    assert sorted(key["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey"]
    assert key["Condition"] == {"StringEquals": {"kms:ViaService": "s3.us-east-1.amazonaws.com"}}
    assert set(statements) == {
        "RigReadTrainingData",
        "RigListTrainingData",
        "RigWriteRunOutputs",
        "RigDataKeyThroughS3",
    }
    _, hyperpod = only(custom_json, "AWS::SageMaker::Cluster")
    assert stack.get_logical_id(stack.hyperpod.restricted_data_policy.node.default_child) in hyperpod["DependsOn"]


def test_no_data_access_without_a_restricted_group(cluster_json: dict[str, Any]) -> None:
    assert "RigReadTrainingData" not in json.dumps(cluster_json)


def test_restricted_group_installs_the_rig_dependencies(custom_json: dict[str, Any]) -> None:
    # Defect 4: the same Helm custom resource installs the RIG dependencies (handler tests hold what that does).
    _, release = only(custom_json, "Custom::HyperPodHelmRelease")
    assert release["Properties"]["RestrictedGroups"] == "true"


def test_system_group_idles_at_its_own_count(custom_json: dict[str, Any]) -> None:
    system = _groups(custom_json)["system"]
    assert system["InstanceCount"] == 1
    assert system["InstanceType"] == "ml.m5.xlarge"
    assert "LifeCycleConfig" in system


def test_restricted_instance_group_for_nova(custom_json: dict[str, Any]) -> None:
    _, hyperpod = only(custom_json, "AWS::SageMaker::Cluster")
    (rig,) = hyperpod["Properties"]["RestrictedInstanceGroups"]
    assert rig["InstanceGroupName"] == "nova-rig"
    assert rig["InstanceCount"] == 0
    assert rig["EnvironmentConfig"] == {"FSxLustreConfig": {"SizeInGiB": 2400, "PerUnitStorageThroughput": 500}}
    assert "LifeCycleConfig" not in rig  # restricted groups take none
    assert "OverrideVpcConfig" in rig


def test_extra_helm_components_are_switched_on(custom_json: dict[str, Any]) -> None:
    _, release = only(custom_json, "Custom::HyperPodHelmRelease")
    values = json.loads(release["Properties"]["Values"])
    assert values["deep-health-check.enabled"] is True
    assert values["job-auto-restart.enabled"] is True
    assert values["mlflow.enabled"] is False


def test_operator_access_entries(custom_json: dict[str, Any]) -> None:
    entries = {
        json.dumps(v["Properties"]["PrincipalArn"]): v["Properties"]
        for v in of_type(custom_json, "AWS::EKS::AccessEntry").values()
    }
    assert [p["PolicyArn"]["Fn::Join"][1][2] for p in entries[json.dumps(ADMIN_ROLE)]["AccessPolicies"]] == [
        ":eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
    ]
    assert [p["PolicyArn"]["Fn::Join"][1][2] for p in entries[json.dumps(VIEWER_ROLE)]["AccessPolicies"]] == [
        ":eks::aws:cluster-access-policy/AmazonEKSViewPolicy"
    ]


def test_the_public_endpoint_lever_renders_the_operator_ranges_without_a_warning(
    custom_deployment: Deployment, custom_json: dict[str, Any]
) -> None:
    # eks_endpoint_access=public_and_private with the operators' ranges (kubectl from outside the VPC): the public
    # endpoint serves those ranges only. No function of the deployment needs it any more, so nothing is cut off and
    # synth no longer warns about narrowed ranges.
    _, eks = only(custom_json, "AWS::EKS::Cluster")
    vpc = eks["Properties"]["ResourcesVpcConfig"]
    assert vpc["EndpointPublicAccess"] is True
    assert vpc["EndpointPrivateAccess"] is True
    assert vpc["PublicAccessCidrs"] == ["203.0.113.0/24", "198.51.100.7/32"]
    assert custom_deployment.cluster is not None
    texts = [
        str(entry.data)
        for construct in custom_deployment.cluster.node.find_all()
        for entry in construct.node.metadata
        if entry.type == "aws:cdk:warning"
    ]
    assert not any("eks_public_access_cidrs" in text for text in texts), texts


def test_customized_template_passes_cfn_lint_and_least_privilege(custom_json: dict[str, Any]) -> None:
    # cfn-lint validates the HyperPod schema: RIG, deep health checks, Kubernetes config, training plan.
    matches = cfn_lint(custom_json)
    assert [f"{m.rule.id} {m.message}" for m in matches] == []
    assert least_privilege_violations(custom_json) == []


# --- existing-cluster mode ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def existing_deployment() -> Deployment:
    app, deployment = make_app(
        {"existing_hyperpod_cluster_name": "team-hyperpod", "existing_eks_cluster_name": "team-eks"}
    )
    app.synth()  # cdk-nag must stay clean in this mode too
    assert deployment.cluster.hyperpod is None
    return deployment


@pytest.fixture(scope="module")
def existing_json(existing_deployment: Deployment) -> dict[str, Any]:
    return Template.from_stack(existing_deployment.cluster).to_json()


def test_existing_cluster_mode_grants_the_pipeline_no_kubernetes_access(existing_deployment: Deployment) -> None:
    # KubeRay, the verl namespace and its RBAC are the operator's to install on a cluster mtrl did not create
    # (docs/cluster.md, KubeRay); an access entry there could collide with one the operator already made.
    assert existing_deployment.cluster.kuberay is None
    Template.from_stack(existing_deployment.pipeline).resource_count_is("AWS::EKS::AccessEntry", 0)


def test_existing_cluster_mode_keeps_the_backend_function_outside_the_vpc(existing_deployment: Deployment) -> None:
    # A decision (docs/cluster.md, "EKS API endpoint"): an existing cluster's endpoint access and its control plane's
    # security groups are the operator's, so the function reaches that cluster as before, from outside the VPC; no
    # rule is added to a group this deployment does not own.
    pipeline = Template.from_stack(existing_deployment.pipeline)
    functions = pipeline.find_resources("AWS::Lambda::Function")
    assert [lid for lid, r in functions.items() if "VpcConfig" in r["Properties"]] == []
    pipeline.resource_count_is("AWS::EC2::SecurityGroupIngress", 0)


def test_existing_cluster_mode_creates_no_cluster_resources(existing_json: dict[str, Any]) -> None:
    types = {resource["Type"] for resource in existing_json["Resources"].values()}
    # CloudFormation needs one resource in a stack: an inert wait-condition handle. No IAM, no cluster.
    assert types == {"AWS::CloudFormation::WaitConditionHandle"}


def test_existing_cluster_mode_targets_the_named_clusters(existing_json: dict[str, Any]) -> None:
    outputs = {name: output["Value"] for name, output in existing_json["Outputs"].items()}
    assert outputs["HyperPodClusterName"] == "team-hyperpod"
    assert outputs["EksClusterName"] == "team-eks"
    assert "HyperPodClusterArn" not in outputs
    assert least_privilege_violations(existing_json) == []


def test_zone_without_a_private_subnet_is_refused() -> None:
    groups = [{"name": "gpu", "instance_type": "ml.g5.8xlarge", "availability_zone_id": "use1-az9"}]
    with pytest.raises(ValueError, match=r"maps to us-east-1c, but the private subnets are in"):
        make_app({"hyperpod_instance_groups": groups, "hyperpod_availability_zone_names": {"use1-az9": "us-east-1c"}})


def test_a_version_near_its_end_of_standard_support_synthesizes_with_a_dated_warning(
    custom_deployment: Deployment, custom_json: dict[str, Any]
) -> None:
    # Issue 20 item 1: kubernetes_version 1.34 leaves EKS standard support on 2026-12-02 (endoflife.date "Amazon EKS",
    # EKS user guide "Understand the Kubernetes version lifecycle on EKS"); synthesized on 2026-12-01 (fixed clock),
    # the synth warns naming the date, and the chosen EXTENDED policy is stated in the template.
    _, eks = only(custom_json, "AWS::EKS::Cluster")
    assert eks["Properties"]["Version"] == "1.34"
    assert eks["Properties"]["UpgradePolicy"] == {"SupportType": "EXTENDED"}
    assert custom_deployment.cluster is not None
    warnings = Annotations.from_stack(custom_deployment.cluster).find_warning("*", Match.any_value())
    texts = [str(w.entry.data) for w in warnings]
    (warning,) = [text for text in texts if "kubernetes_version 1.34" in text]
    assert "leaves EKS standard support on 2026-12-02 (in 1 day)" in warning
    assert "billed extended support ($0.60 instead of $0.10 per cluster-hour) until 2027-12-02" in warning
    assert "endoflife.date" in warning
