"""The deployment's in-account builders: the verl trainer image and model copies, made after deploy without Docker or
a model download on the operator's machine (issue 36 item 2).

- ``<prefix>-verl-trainer`` (ECR): where the trainer image is pushed; scanned on push, immutable tags, the newest
  ``KEPT_IMAGES`` kept.
- ``<prefix>-verl-trainer-image`` (CodeBuild, privileged: Docker builds need it): builds
  ``docker/verl-trainer/Dockerfile`` from the source archive ``mtrl image build verl`` uploads under
  ``image-builds/`` of the data bucket, pushes it and exports ``IMAGE_URI`` (``<repository>@sha256:<digest>``), which
  the CLI checks against ECR and records in the deployment's catalog (mtrl.backends.verl.catalog).
- ``<prefix>-model-import`` (CodeBuild): runs ``mtrl.backends.verl.hub_copy`` from the uploaded archive to download a
  Hub revision, writes ``SHA256SUMS`` and copies it to ``models/<id>/<commit>/``; exports ``MODEL_COMMIT``.

Both log to one KMS-encrypted log group with the deployment's retention, encrypt what CodeBuild stores with the data
key, and may read only ``image-builds/`` (and the model job write only ``models/``) of the data bucket.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from mtrl.backends.verl.supply import (
    IMAGE_DOCKERFILE,
    MODELS_PREFIX,
    SOURCE_PREFIX,
    image_project_name,
    image_repository_name,
    model_project_name,
)
from mtrl.contracts.hub import HUB_COMMIT, HUB_MODEL_ID, MODEL_SUMS_FILE
from stacks.constructs.encrypted_log_group import EncryptedLogGroup
from stacks.nag import acknowledge, nag_resource

KEPT_IMAGES = 10
IMAGE_DIGEST_VARIABLE = "IMAGE_URI"
MODEL_COMMIT_VARIABLE = "MODEL_COMMIT"
# CodeBuild's standard image: Docker, the AWS CLI and Python 3.11 (the version mtrl targets).
BUILD_IMAGE = codebuild.LinuxBuildImage.STANDARD_7_0


def image_buildspec() -> dict[str, Any]:
    """Build the trainer image, push it by a build-unique tag (immutable tags), and export its digest reference."""
    return {
        "version": "0.2",
        "env": {"shell": "bash", "exported-variables": [IMAGE_DIGEST_VARIABLE]},
        "phases": {
            "pre_build": {
                "commands": [
                    "set -o pipefail",
                    'IMAGE_TAG="build-${CODEBUILD_BUILD_NUMBER}"',
                    'aws ecr get-login-password --region "$AWS_REGION" '
                    '| docker login --username AWS --password-stdin "${REPOSITORY_URI%%/*}"',
                ]
            },
            "build": {
                "commands": [
                    f'docker build --file {IMAGE_DOCKERFILE} --tag "$REPOSITORY_URI:$IMAGE_TAG" .',
                    'docker push "$REPOSITORY_URI:$IMAGE_TAG"',
                    # The registry's digest of what was pushed: runs pull by it, never by the tag.
                    f"{IMAGE_DIGEST_VARIABLE}=\"$(docker inspect --format '{{{{index .RepoDigests 0}}}}' "
                    '"$REPOSITORY_URI:$IMAGE_TAG")"',
                    f'DIGEST="${{{IMAGE_DIGEST_VARIABLE}##*@}}"',
                    f'[[ "$DIGEST" =~ ^sha256:[0-9a-f]{{64}}$ && "${IMAGE_DIGEST_VARIABLE}" == '
                    '"$REPOSITORY_URI@$DIGEST" ]]',
                    f'echo "pushed ${IMAGE_DIGEST_VARIABLE}"',
                ]
            },
        },
    }


def _shell_pattern(pattern: str) -> str:
    """A ``^…$`` pattern of mtrl.contracts.hub as one single-quoted shell word (they hold no quote)."""
    assert "'" not in pattern
    return f"'{pattern}'"


def model_buildspec() -> dict[str, Any]:
    """Download a Hub revision with mtrl's own module, then copy it (with its SHA256SUMS) under models/.

    The module checks the id and revision and writes the commit; the shell checks both again before they become an
    S3 key (a build can be started with any MODEL_ID by whoever may start it): bash's ``=~`` is POSIX ERE, whose
    ``$`` matches only at the end (no trailing newline passes), in the C locale so ``[A-Za-z]`` is ASCII only
    (bash manual, "Conditional Constructs"; POSIX regcomp without REG_NEWLINE).
    """
    return {
        "version": "0.2",
        "env": {"shell": "bash", "exported-variables": [MODEL_COMMIT_VARIABLE]},
        "phases": {
            "install": {"runtime-versions": {"python": "3.11"}},
            "build": {
                "commands": [
                    'OUT="$CODEBUILD_SRC_DIR/model-copy"',
                    'python3 -m mtrl.backends.verl.hub_copy --model "$MODEL_ID" --revision "$MODEL_REVISION" '
                    '--out "$OUT" --commit-file "$CODEBUILD_SRC_DIR/model-commit"',
                    f'{MODEL_COMMIT_VARIABLE}="$(cat "$CODEBUILD_SRC_DIR/model-commit")"',
                    f"(LC_ALL=C; ID_PATTERN={_shell_pattern(HUB_MODEL_ID)}; "
                    f"COMMIT_PATTERN={_shell_pattern(HUB_COMMIT)}; "
                    f'[[ "$MODEL_ID" =~ $ID_PATTERN && "$MODEL_ID" != *..* '
                    f'&& "${MODEL_COMMIT_VARIABLE}" =~ $COMMIT_PATTERN ]])',
                    # SHA256SUMS last, alone: a copy that stopped midway has none (what the CLI and the trainer
                    # read first), as a --from upload
                    f'aws s3 cp --recursive --only-show-errors --exclude {MODEL_SUMS_FILE} "$OUT" '
                    f'"s3://$DATA_BUCKET/{MODELS_PREFIX}$MODEL_ID/${MODEL_COMMIT_VARIABLE}/"',
                    f'aws s3 cp --only-show-errors "$OUT/{MODEL_SUMS_FILE}" '
                    f'"s3://$DATA_BUCKET/{MODELS_PREFIX}$MODEL_ID/${MODEL_COMMIT_VARIABLE}/{MODEL_SUMS_FILE}"',
                ]
            },
        },
    }


class ImageBuilder(Construct):
    """Attributes: ``repository``, ``image_project``, ``model_project``, ``log_group``."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        prefix: str,
        data_bucket: s3.IBucket,
        data_key: kms.IKey,
        log_retention_days: int,
    ) -> None:
        super().__init__(scope, id_)
        self.repository = ecr.Repository(
            self,
            "Repository",
            repository_name=image_repository_name(prefix),
            image_scan_on_push=True,
            image_tag_mutability=ecr.TagMutability.IMMUTABLE,
            lifecycle_rules=[ecr.LifecycleRule(max_image_count=KEPT_IMAGES, description="keep the newest builds")],
            # Build output, rebuilt from source by `mtrl image build verl`: deleted with the stack (a retained
            # repository would collide with the next deploy's, which names it the same).
            removal_policy=cdk.RemovalPolicy.DESTROY,
            empty_on_delete=True,
        )
        self.log_group = EncryptedLogGroup(
            self,
            "Logs",
            log_group_name=f"/{prefix}/builds",
            encryption_key=data_key,
            retention_days=log_retention_days,
        ).log_group
        sources = data_bucket.arn_for_objects(f"{SOURCE_PREFIX}*")
        models = data_bucket.arn_for_objects(f"{MODELS_PREFIX}*")
        self.image_project = self._project(
            "ImageProject",
            name=image_project_name(prefix),
            description=f"{prefix}: builds {IMAGE_DOCKERFILE} and pushes it to {image_repository_name(prefix)}",
            buildspec=image_buildspec(),
            privileged=True,
            compute=codebuild.ComputeType.LARGE,  # a CUDA image of several GB: disk and memory for the layers
            timeout=cdk.Duration.hours(2),
            variables={"REPOSITORY_URI": self.repository.repository_uri},
            sources=sources,
            data_key=data_key,
            log_prefix="verl-trainer-image",
        )
        self.repository.grant_pull_push(self.image_project)
        self.model_project = self._project(
            "ModelProject",
            name=model_project_name(prefix),
            description=f"{prefix}: copies a Hugging Face Hub model revision to {MODELS_PREFIX} of the data bucket",
            buildspec=model_buildspec(),
            privileged=False,
            compute=codebuild.ComputeType.MEDIUM,
            timeout=cdk.Duration.hours(4),
            variables={"DATA_BUCKET": data_bucket.bucket_name},
            sources=sources,
            data_key=data_key,
            log_prefix="model-import",
        )
        self.model_project.add_to_role_policy(
            iam.PolicyStatement(
                sid="WriteModelCopies", actions=["s3:PutObject", "s3:AbortMultipartUpload"], resources=[models]
            )
        )
        for project in (self.image_project, self.model_project):
            self._acknowledge(project, sources=sources, models=models)

    def _project(
        self,
        id_: str,
        *,
        name: str,
        description: str,
        buildspec: dict[str, Any],
        privileged: bool,
        compute: codebuild.ComputeType,
        timeout: cdk.Duration,
        variables: dict[str, str],
        sources: str,
        data_key: kms.IKey,
        log_prefix: str,
    ) -> codebuild.Project:
        project = codebuild.Project(
            self,
            id_,
            project_name=name,
            description=description,
            # No default source: each build names its own archive (sourceTypeOverride S3, sourceLocationOverride, at
            # its S3 version), so the role reads image-builds/ objects only, never lists the bucket.
            build_spec=codebuild.BuildSpec.from_object_to_yaml(buildspec),
            environment=codebuild.BuildEnvironment(
                build_image=BUILD_IMAGE, compute_type=compute, privileged=privileged
            ),
            environment_variables={
                key: codebuild.BuildEnvironmentVariable(value=value) for key, value in variables.items()
            },
            encryption_key=data_key,
            timeout=timeout,
            queued_timeout=cdk.Duration.hours(1),
            logging=codebuild.LoggingOptions(
                cloud_watch=codebuild.CloudWatchLoggingOptions(log_group=self.log_group, prefix=log_prefix)
            ),
        )
        project.add_to_role_policy(
            iam.PolicyStatement(
                sid="ReadSourceArchives",
                actions=["s3:GetObject", "s3:GetObjectVersion"],
                resources=[sources],
            )
        )
        return project

    def _acknowledge(self, project: codebuild.Project, *, sources: str, models: str) -> None:
        role = project.role
        assert role is not None
        policy = role.node.find_child("DefaultPolicy")
        stack = cdk.Stack.of(self)
        # CDK grants every project its default log group and its own report groups, named after the project.
        default_logs = stack.format_arn(
            service="logs",
            resource="log-group",
            resource_name=f"/aws/codebuild/{project.project_name}:*",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        reports = stack.format_arn(
            service="codebuild", resource="report-group", resource_name=f"{project.project_name}-*"
        )
        wildcard_resources = {
            sources: f"Each build reads its own source archive, a content-addressed key under {SOURCE_PREFIX} of the "
            "data bucket that the CLI uploads.",
            default_logs: "CDK's grant of the project's default log group (its builds log to the builders' group).",
            reports: "CDK's grant of the project's own test-report groups (named after the project).",
        }
        if project is self.model_project:
            wildcard_resources[models] = (
                f"The model import writes the copy under {MODELS_PREFIX}<id>/<commit>/, keys the Hub revision decides."
            )
        else:
            wildcard_resources["*"] = (
                "ecr:GetAuthorizationToken (the registry login) has no resource-level permissions."
            )
        for resource, reason in wildcard_resources.items():
            spelled = resource if resource == "*" else nag_resource(self, resource)
            acknowledge(policy, f"AwsSolutions-IAM5[Resource::{spelled}]", reason)
        for action in ("kms:GenerateDataKey*", "kms:ReEncrypt*"):
            acknowledge(
                policy,
                f"AwsSolutions-IAM5[Action::{action}]",
                "CDK's grant of the project's encryption key (the data key) to its role, for what CodeBuild stores.",
            )
        if project is self.image_project:
            acknowledge(
                project,
                "AwsSolutions-CB3",
                "Docker builds need privileged mode; the project builds only docker/verl-trainer from the archive the "
                "operator uploads, and its role may push only to the trainer repository.",
            )
