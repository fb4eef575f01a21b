"""The Nova Forge environment packages of a deployment: built at synth, deployed to ``nova-envs/`` of the data bucket.

Each enabled environment is packaged by ``mtrl.envs.nova_package`` (deterministic, content-addressed
``nova-envs/<env_id>/<sha256>.tar.gz``) into a staging directory under ``.build/nova-envs/``, which becomes one CDK
file asset; a ``BucketDeployment`` extracts it under ``nova-envs/``. No Docker and no network at synth: the archives
are plain Python ``tarfile`` output. ``prune=False`` because a run in progress may still point at a package an
earlier deployment uploaded (a changed environment is a new key, never an overwrite).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from constructs import Construct, IConstruct

from mtrl.envs.nova_package import S3_PREFIX, NovaPackage, build_package
from stacks.constructs.python_function import BUILD_DIR
from stacks.nag import acknowledge, asset_bucket_objects, nag_resource

STAGING_DIR = BUILD_DIR / "nova-envs"


def stage_packages(packages: Sequence[NovaPackage], *, staging_dir: Path = STAGING_DIR) -> Path:
    """Write ``<env_id>/<sha256>.tar.gz`` for each package into a directory named by their keys; return it."""
    digest = hashlib.sha256("\n".join(sorted(p.key for p in packages)).encode()).hexdigest()[:16]
    directory = staging_dir / digest
    for package in packages:
        path = directory / package.key.removeprefix(f"{S3_PREFIX}/")
        if not path.is_file() or path.read_bytes() != package.archive:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(package.archive)
    return directory


class NovaEnvironmentPackages(Construct):
    """Attributes: ``packages`` (environment id → NovaPackage), ``deployment`` (the BucketDeployment),
    ``key_prefix`` (``nova-envs/``), ``handler_policy`` (the deployment handler's policy, objects of ``nova-envs/``
    only)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        environments: Sequence[tuple[str, bool]],
        data_bucket: s3.IBucket,
        staging_dir: Path = STAGING_DIR,
    ) -> None:
        """``environments``: (environment id, is custom) for every environment a run may use."""
        super().__init__(scope, id_)
        if not environments:
            raise ValueError("no environments to package for Nova Forge")
        self.packages = {env_id: build_package(env_id, custom=custom) for env_id, custom in environments}
        self.key_prefix = f"{S3_PREFIX}/"
        self.deployment = s3deploy.BucketDeployment(
            self,
            "Deployment",
            sources=[s3deploy.Source.asset(str(stage_packages(list(self.packages.values()), staging_dir=staging_dir)))],
            destination_bucket=data_bucket,
            destination_key_prefix=self.key_prefix,
            prune=False,
            # The objects outlive the stack like the rest of the data bucket (a run's record names its package).
            retain_on_delete=True,
            memory_limit=256,
        )
        role = self.deployment.handler_role  # of CDK's singleton handler function (one per stack and memory size)
        handler = role.node.scope
        policy = role.node.find_child("DefaultPolicy")
        assert handler is not None
        assert isinstance(policy, iam.Policy)
        self.handler_policy = policy
        self._narrow_handler_grant(policy, data_bucket)
        self._acknowledge_handler(handler, policy, data_bucket)

    def _narrow_handler_grant(self, policy: iam.Policy, data_bucket: s3.IBucket) -> None:
        """CDK grants the handler read/write/delete on every object of the destination bucket; the data bucket holds
        the datasets and run outputs, so its object statements are rewritten to ``nova-envs/*`` (what the handler
        writes). Rendered lazily so the rewrite sees the final, minimized document."""
        every_object = data_bucket.arn_for_objects("*")  # token strings: cross-stack references still resolve later
        packages_only = data_bucket.arn_for_objects(f"{self.key_prefix}*")
        document = policy.document

        @jsii.implements(cdk.IStableAnyProducer)
        class Narrowed:
            def produce(self) -> Any:
                rendered = document.to_json()
                for statement in rendered["Statement"]:
                    resources = statement["Resource"]
                    if isinstance(resources, list):
                        statement["Resource"] = [packages_only if r == every_object else r for r in resources]
                    elif resources == every_object:
                        statement["Resource"] = packages_only
                return rendered

        cfn = policy.node.default_child
        assert isinstance(cfn, iam.CfnPolicy)
        # The L1 property itself (not an override), so cdk-nag checks the document that is deployed.
        cfn.policy_document = cdk.Lazy.any(Narrowed())

    def _acknowledge_handler(self, handler: IConstruct, policy: iam.Policy, data_bucket: s3.IBucket) -> None:
        """The BucketDeployment handler is CDK's singleton function; it runs only while the stack deploys."""
        stack = cdk.Stack.of(self)
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
        for statement in stack.resolve(policy.document)["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            for action in actions:
                if "*" in action:
                    acknowledge(
                        policy,
                        f"AwsSolutions-IAM5[Action::{action}]",
                        "CDK's BucketDeployment and data-key grants: copy the staged environment packages into the "
                        "data bucket (deploy time only).",
                    )
        for resource in (asset_bucket_objects(stack), data_bucket.arn_for_objects(f"{self.key_prefix}*")):
            acknowledge(
                policy,
                f"AwsSolutions-IAM5[Resource::{nag_resource(self, resource)}]",
                "BucketDeployment reads the CDK asset bucket and writes the environment packages into the data "
                "bucket; its handler runs only while this stack deploys.",
            )
