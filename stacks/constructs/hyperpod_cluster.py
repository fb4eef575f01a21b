"""The SageMaker HyperPod cluster (EKS orchestrator): instance groups at their idle counts, the node
execution role, and the lifecycle script shipped as a versioned asset in a bucket only the nodes read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct, IDependable

from mtrl.settings.cluster import ClusterSettings, InstanceGroupSettings, RestrictedInstanceGroupSettings
from stacks.nag import acknowledge, asset_bucket_objects, nag_resource

Cfn = sagemaker.CfnCluster

LIFECYCLE_DIR = Path(__file__).resolve().parent / "lifecycle"
LIFECYCLE_ENTRYPOINT = "on_create.sh"
LIFECYCLE_PREFIX = "lifecycle/"
MANAGED_INSTANCE_POLICY = "AmazonSageMakerClusterInstanceRolePolicy"

# What the VPC CNI on a HyperPod node does to give pods VPC addresses. The two *NetworkInterfacePermission
# actions are in both official execution-role templates (aws/sagemaker-hyperpod-cluster-setup
# eks/cloudformation/sagemaker-iam-role-template.yaml, and awsome-distributed-training's HyperPod EKS stack) but
# not in the managed instance policy; both take the network-interface resource with the ec2:Vpc key.
_ENI_ACTIONS = [
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
    "ec2:AttachNetworkInterface",
    "ec2:DetachNetworkInterface",
    "ec2:ModifyNetworkInterfaceAttribute",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
]
# EC2 Describe* actions have no resource-level permissions: "*" is the only valid resource.
_DESCRIBE_ACTIONS = [
    "ec2:DescribeInstances",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeVpcs",
    "ec2:DescribeTags",
    # The CNI reads the VPC's DHCP options (search domain); in the same official role templates.
    "ec2:DescribeDhcpOptions",
]
# What a restricted instance group (Nova Forge) reads and writes in the data bucket with the execution role, the
# only role its nodes have: the datasets, and the run outputs (checkpoints, logs, the trained model).
RIG_READ_PREFIX = "training-data/"
RIG_WRITE_PREFIX = "runs/"
_ECR_PULL_ACTIONS = ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"]


class HyperPodCluster(Construct):
    """Attributes: ``cluster`` (CfnCluster), ``cluster_name``, ``cluster_arn``, ``execution_role``,
    ``lifecycle_bucket``, ``lifecycle_s3_uri``, ``instance_groups`` (the CloudFormation specs)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        settings: ClusterSettings,
        prefix: str,
        vpc: ec2.IVpc,
        subnets: list[ec2.ISubnet],
        security_group: ec2.ISecurityGroup,
        eks_cluster_arn: str,
        access_log_bucket: s3.IBucket,
        data_bucket: s3.IBucket,
        data_key: kms.IKey,
    ) -> None:
        super().__init__(scope, id_)
        stack = cdk.Stack.of(self)
        self.cluster_name = f"{prefix}-hyperpod"
        self._prefix = prefix
        self._subnets = subnets
        self._zone_names = settings.hyperpod_availability_zone_names
        self._security_group = security_group
        self._volume_key = data_key

        # A dedicated bucket: the nodes read their boot script from a place no runtime role can write
        # (never the data bucket). The "sagemaker-" prefix matches the managed instance policy's S3 scope.
        self.lifecycle_bucket = s3.Bucket(
            self,
            "LifecycleBucket",
            bucket_name=f"sagemaker-{prefix}-lcs-{stack.account}-{stack.region}",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=access_log_bucket,
            server_access_logs_prefix="lifecycle-bucket/",
            # Versions are content-addressed prefixes that accumulate (prune=False below keeps the one a
            # running cluster still points at), so the bucket is emptied when the stack is deleted.
            removal_policy=cdk.RemovalPolicy.DESTROY,
            auto_delete_objects=True,
        )
        # Content hash in the prefix: a changed script is a new location, so the cluster update is explicit.
        version = cdk.FileSystem.fingerprint(str(LIFECYCLE_DIR))[:16]
        self.lifecycle_key_prefix = f"{LIFECYCLE_PREFIX}{version}/"
        self.lifecycle_s3_uri = f"s3://{self.lifecycle_bucket.bucket_name}/{self.lifecycle_key_prefix}"
        self.lifecycle_deployment = s3deploy.BucketDeployment(
            self,
            "LifecycleScripts",
            sources=[s3deploy.Source.asset(str(LIFECYCLE_DIR))],
            destination_bucket=self.lifecycle_bucket,
            destination_key_prefix=self.lifecycle_key_prefix,
            prune=False,
            retain_on_delete=False,
            memory_limit=256,
        )
        self._acknowledge_deployment_handler()

        self.execution_role = self._execution_role(vpc, eks_cluster_arn)
        restricted = settings.hyperpod_restricted_instance_group
        if restricted is not None:
            self._grant_restricted_group_data(data_bucket, data_key)

        self.instance_groups = [self._instance_group(group) for group in settings.hyperpod_instance_groups]
        self.restricted_instance_groups = [self._restricted_group(restricted)] if restricted else []
        self.cluster = sagemaker.CfnCluster(
            self,
            "Cluster",
            cluster_name=self.cluster_name,
            orchestrator=Cfn.OrchestratorProperty(
                eks=Cfn.ClusterOrchestratorEksConfigProperty(cluster_arn=eks_cluster_arn)
            ),
            node_recovery="Automatic",
            # Nodes are provisioned in the background: a group can sit at 0 and scale up per run.
            node_provisioning_mode="Continuous",
            vpc_config=Cfn.VpcConfigProperty(
                security_group_ids=[security_group.security_group_id], subnets=[subnet.subnet_id for subnet in subnets]
            ),
            instance_groups=self.instance_groups,
            restricted_instance_groups=self.restricted_instance_groups or None,
            tags=[cdk.CfnTag(key="mtrl:deployment", value=prefix)],
        )
        self.cluster_arn = self.cluster.attr_cluster_arn
        # Nodes boot with the role's inline policy (lifecycle read, ENIs) already attached.
        self.cluster.node.add_dependency(self.lifecycle_deployment, self.execution_role, self.execution_policy)
        if restricted is not None:
            self.cluster.node.add_dependency(self.restricted_data_policy)

    def depend_on(self, *dependencies: IDependable) -> None:
        self.cluster.node.add_dependency(*dependencies)

    def rendered_properties(self) -> object:
        """The cluster's CloudFormation properties as the template will hold them (tokens unresolved)."""
        return cdk.Stack.of(self).resolve(self.cluster._cfn_properties)

    def _execution_role(self, vpc: ec2.IVpc, eks_cluster_arn: str) -> iam.Role:
        stack = cdk.Stack.of(self)
        role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description="HyperPod node execution role (managed instance policy plus scoped extras)",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(MANAGED_INSTANCE_POLICY)],
        )
        arn = f"arn:{stack.partition}:ec2:{stack.region}:{stack.account}"
        vpc_arn = f"{arn}:vpc/{vpc.vpc_id}"
        eni, subnet, security_group = f"{arn}:network-interface/*", f"{arn}:subnet/*", f"{arn}:security-group/*"
        instance = f"{arn}:instance/*"
        # System images (EKS add-ons, HyperPod agents, Nova Forge) live in AWS-owned accounts that differ per region,
        # and the official execution-role template grants the pulls in every region: account and region are
        # wildcards; pull (read) actions only.
        repositories = f"arn:{stack.partition}:ecr:*:*:repository/*"
        alarms = f"arn:{stack.partition}:cloudwatch:{stack.region}:{stack.account}:alarm:*"
        lifecycle_objects = self.lifecycle_bucket.arn_for_objects(f"{LIFECYCLE_PREFIX}*")
        statements = [
            iam.PolicyStatement(
                sid="PodNetworkingInThisVpc",
                actions=_ENI_ACTIONS,
                # ENI IDs are created at run time; the ec2:Vpc condition keeps every one inside our VPC.
                resources=[eni, subnet, security_group],
                conditions={"ArnEquals": {"ec2:Vpc": vpc_arn}},
            ),
            iam.PolicyStatement(
                sid="AttachToOwnInstance",
                # The instance side of the ENI actions that authorize an instance (Service Authorization Reference:
                # attach, detach, modify-attribute); the ENI side is held to this VPC by the statement above.
                actions=[
                    "ec2:AttachNetworkInterface",
                    "ec2:DetachNetworkInterface",
                    "ec2:ModifyNetworkInterfaceAttribute",
                ],
                resources=[instance],
            ),
            iam.PolicyStatement(
                sid="TagInterfacesInThisVpc",
                # The VPC CNI tags ENIs after creating them (cluster name, node), not only at create time.
                actions=["ec2:CreateTags"],
                resources=[eni],
                conditions={"ArnEquals": {"ec2:Vpc": vpc_arn}},
            ),
            iam.PolicyStatement(sid="DescribeNetwork", actions=_DESCRIBE_ACTIONS, resources=["*"]),
            iam.PolicyStatement(
                sid="ReadLifecycleScripts",
                actions=["s3:GetObject"],
                resources=[lifecycle_objects],
            ),
            iam.PolicyStatement(
                sid="ListLifecycleScripts",
                actions=["s3:ListBucket"],
                resources=[self.lifecycle_bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{LIFECYCLE_PREFIX}*"]}},
            ),
            # GetAuthorizationToken has no resource-level permissions.
            iam.PolicyStatement(sid="EcrLogin", actions=["ecr:GetAuthorizationToken"], resources=["*"]),
            iam.PolicyStatement(
                sid="EcrPull",
                actions=_ECR_PULL_ACTIONS,
                resources=[repositories],
            ),
            iam.PolicyStatement(
                # Granted by the official execution-role template (which does not say what on the node calls it);
                # alarms of this account and region only.
                sid="ReadAlarms",
                actions=["cloudwatch:DescribeAlarms"],
                resources=[alarms],
            ),
            iam.PolicyStatement(
                sid="PodIdentityAgent",
                actions=["eks-auth:AssumeRoleForPodIdentity"],
                resources=[eks_cluster_arn],
            ),
        ]
        policy = iam.Policy(self, "ExecutionPolicy", statements=statements)
        role.attach_inline_policy(policy)
        self.execution_policy = policy
        acknowledge(
            role,
            f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{MANAGED_INSTANCE_POLICY}]",
            "HyperPod requires its managed instance policy on the node execution role (AWS documentation).",
        )
        # Every wildcard resource above, with why it cannot be narrower (the nag acknowledgment's reason).
        wildcard_reasons = {
            "*": "EC2 Describe* (ec2:DescribeDhcpOptions included) and ecr:GetAuthorizationToken have no "
            "resource-level permissions, so they cannot be held to the VPC.",
            eni: "The VPC CNI creates ENIs at run time; the ec2:Vpc condition holds them to this VPC.",
            subnet: "ENIs go into the cluster's subnets; the ec2:Vpc condition holds them to this VPC.",
            security_group: "ENIs carry the cluster security group; the ec2:Vpc condition holds them to this VPC.",
            instance: "Node instance IDs exist only at run time; the attached ENI must still be in this VPC.",
            repositories: "System and training images come from AWS-owned registries whose accounts vary by "
            "region (the official template grants every region); pull-only actions.",
            alarms: "cloudwatch:DescribeAlarms lists the account's alarms in this region (read only).",
            lifecycle_objects: "Read of the lifecycle-script prefix only (its subfolders are content-hash versions).",
        }
        for resource, reason in wildcard_reasons.items():
            acknowledge(policy, f"AwsSolutions-IAM5[Resource::{nag_resource(self, resource)}]", reason)
        return role

    def _grant_restricted_group_data(self, data_bucket: s3.IBucket, data_key: kms.IKey) -> None:
        """A restricted group runs Nova Forge with the execution role only: read the datasets, write run outputs,
        and use the data key for exactly that (through S3)."""
        stack = cdk.Stack.of(self)
        # The bucket through its explicitly named export (as the pipeline and backends stacks do): the prefix
        # grants then render to a stable id the acknowledgments can name at construction time.
        export_name = f"{self._prefix}-data-bucket-arn"
        producer = cdk.Stack.of(data_bucket)
        if producer.node.try_find_child(f"Export{export_name}") is None:
            producer.export_value(data_bucket.bucket_arn, name=export_name)
        bucket_arn = cdk.Fn.import_value(export_name)
        read, write = f"{bucket_arn}/{RIG_READ_PREFIX}*", f"{bucket_arn}/{RIG_WRITE_PREFIX}*"
        statements = [
            iam.PolicyStatement(sid="RigReadTrainingData", actions=["s3:GetObject"], resources=[read]),
            iam.PolicyStatement(
                sid="RigListTrainingData",
                actions=["s3:ListBucket"],
                resources=[bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{RIG_READ_PREFIX}*"]}},
            ),
            iam.PolicyStatement(sid="RigWriteRunOutputs", actions=["s3:PutObject"], resources=[write]),
            iam.PolicyStatement(
                sid="RigDataKeyThroughS3",
                # Decrypt to read SSE-KMS objects (and to finish multipart uploads), GenerateDataKey to write them.
                actions=["kms:Decrypt", "kms:GenerateDataKey"],
                resources=[data_key.key_arn],
                conditions={"StringEquals": {"kms:ViaService": f"s3.{stack.region}.amazonaws.com"}},
            ),
        ]
        self.restricted_data_policy = iam.Policy(self, "RestrictedGroupDataPolicy", statements=statements)
        self.execution_role.attach_inline_policy(self.restricted_data_policy)
        for resource, reason in {
            read: f"A restricted group's Nova Forge job reads the datasets under {RIG_READ_PREFIX} (read only).",
            write: f"A restricted group's Nova Forge job writes its run's outputs under {RIG_WRITE_PREFIX} (put only).",
        }.items():
            acknowledge(
                self.restricted_data_policy, f"AwsSolutions-IAM5[Resource::{nag_resource(self, resource)}]", reason
            )

    def _acknowledge_deployment_handler(self) -> None:
        """The BucketDeployment handler is a CDK-provided singleton; it runs only at deploy time."""
        stack = cdk.Stack.of(self)
        handler = next(c for c in stack.node.children if c.node.id.startswith("Custom::CDKBucketDeployment"))
        acknowledge(
            handler,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
            "CDK's BucketDeployment handler logs with the basic execution policy; it runs only during deploys.",
        )
        acknowledge(
            handler,
            "AwsSolutions-L1",
            "The BucketDeployment handler's runtime is chosen and updated by aws-cdk-lib, not by this project.",
        )
        for action in ("s3:GetBucket*", "s3:GetObject*", "s3:List*", "s3:Abort*", "s3:DeleteObject*"):
            acknowledge(
                handler,
                f"AwsSolutions-IAM5[Action::{action}]",
                "CDK's BucketDeployment grant: copy the staged asset into the lifecycle bucket (deploy time only).",
            )
        for resource in (asset_bucket_objects(stack), self.lifecycle_bucket.arn_for_objects("*")):
            acknowledge(
                handler,
                f"AwsSolutions-IAM5[Resource::{nag_resource(self, resource)}]",
                "BucketDeployment reads the CDK asset bucket and writes the dedicated lifecycle bucket only.",
            )

    def _placement(
        self, group: InstanceGroupSettings | RestrictedInstanceGroupSettings
    ) -> sagemaker.CfnCluster.VpcConfigProperty | None:
        """OverrideVpcConfig that keeps a group in one AZ's private subnet (None: spread over all subnets).

        Without an availability_zone_id a group goes into the first private subnet, so every group (and a
        restricted group's HyperPod-managed FSx, created in the group's subnet) shares one AZ: EFA and NCCL
        traffic never crosses AZs.
        """
        if group.spread_across_zones:
            return None
        if group.availability_zone_id is None:
            subnet = self._subnets[0]
        else:
            name = self._zone_names[group.availability_zone_id]
            matching = [subnet for subnet in self._subnets if subnet.availability_zone == name]
            if not matching:
                zones = sorted({subnet.availability_zone for subnet in self._subnets})
                raise ValueError(
                    f"availability_zone_id {group.availability_zone_id} maps to {name}, but the private subnets are "
                    f"in {zones}; add that AZ to availability_zones or fix hyperpod_availability_zone_names"
                )
            subnet = matching[0]
        return Cfn.VpcConfigProperty(
            security_group_ids=[self._security_group.security_group_id], subnets=[subnet.subnet_id]
        )

    def _storage(self, group: InstanceGroupSettings | RestrictedInstanceGroupSettings) -> list[Any]:
        """The instances' root and secondary (/opt/sagemaker) volumes, both encrypted with the deployment's data key
        (SageMaker API ClusterEbsVolumeConfig: VolumeKmsKeyId; RootVolume true takes no size, "you must specify a KMS
        key ID"; without it each volume gets an AWS owned key). The key policy lets EBS use it (data_store.py)."""
        key = self._volume_key.key_arn
        return [
            Cfn.ClusterInstanceStorageConfigProperty(
                ebs_volume_config=Cfn.ClusterEbsVolumeConfigProperty(root_volume=True, volume_kms_key_id=key)
            ),
            Cfn.ClusterInstanceStorageConfigProperty(
                ebs_volume_config=Cfn.ClusterEbsVolumeConfigProperty(
                    volume_size_in_gb=group.ebs_volume_size_gb, volume_kms_key_id=key
                )
            ),
        ]

    def _instance_group(self, group: InstanceGroupSettings) -> sagemaker.CfnCluster.ClusterInstanceGroupProperty:
        kubernetes = None
        if group.labels or group.taints:
            kubernetes = Cfn.ClusterKubernetesConfigProperty(
                labels=dict(group.labels) or None,
                taints=[
                    Cfn.ClusterKubernetesTaintProperty(key=t.key, value=t.value, effect=t.effect) for t in group.taints
                ]
                or None,
            )
        return Cfn.ClusterInstanceGroupProperty(
            instance_group_name=group.name,
            instance_type=group.instance_type,
            # Created at the idle count (0 by default): no GPU instance runs until a run scales the group up.
            instance_count=group.idle_count,
            execution_role=self.execution_role.role_arn,
            threads_per_core=group.threads_per_core,
            instance_storage_configs=self._storage(group),
            life_cycle_config=Cfn.ClusterLifeCycleConfigProperty(
                source_s3_uri=self.lifecycle_s3_uri, on_create=LIFECYCLE_ENTRYPOINT
            ),
            on_start_deep_health_checks=list(group.deep_health_checks) or None,
            training_plan_arn=group.training_plan_arn,
            override_vpc_config=self._placement(group),
            kubernetes_config=kubernetes,
            capacity_requirements=(
                Cfn.ClusterCapacityRequirementsProperty(spot={}) if group.capacity_type == "spot" else None
            ),
        )

    def _restricted_group(
        self, group: RestrictedInstanceGroupSettings
    ) -> sagemaker.CfnCluster.ClusterRestrictedInstanceGroupProperty:
        # Restricted groups take no lifecycle script: HyperPod manages their boot and their FSx file system.
        return Cfn.ClusterRestrictedInstanceGroupProperty(
            instance_group_name=group.name,
            instance_type=group.instance_type,
            instance_count=group.idle_count,
            execution_role=self.execution_role.role_arn,
            threads_per_core=group.threads_per_core,
            instance_storage_configs=self._storage(group),
            on_start_deep_health_checks=list(group.deep_health_checks) or None,
            training_plan_arn=group.training_plan_arn,
            override_vpc_config=self._placement(group),
            environment_config=Cfn.EnvironmentConfigProperty(
                f_sx_lustre_config=Cfn.FSxLustreConfigProperty(
                    size_in_gib=group.fsx_lustre_size_gib,
                    per_unit_storage_throughput=group.fsx_lustre_throughput_per_tib,
                )
            ),
        )
