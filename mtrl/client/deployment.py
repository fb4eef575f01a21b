"""Find a deployed mtrl from its CloudFormation stack outputs (``<prefix>-data`` and ``<prefix>-pipeline``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import (
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ProfileNotFound,
)

DATA_OUTPUTS = {"bucket": "DataBucketName", "run_table": "RunTableName"}
PIPELINE_OUTPUTS = {"state_machine_arn": "StateMachineArn", "topic_arn": "NotificationTopicArn"}
LOG_GROUPS_OUTPUT = "LogGroupNames"  # optional: older deployments lack it, `mtrl logs` then says so
_CREDENTIAL_CODES = frozenset(
    {
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AuthFailure",
    }
)


class DeploymentError(Exception):
    """A problem the user fixes in their configuration (credentials, region, prefix, endpoint)."""


class CredentialsMissing(DeploymentError):
    pass


class StackNotFound(DeploymentError):
    pass


class OutputMissing(DeploymentError):
    pass


@dataclass(frozen=True)
class Target:
    """Where to look: every client uses the same region, profile and (for the emulator) endpoint URL."""

    region: str | None = None
    profile: str | None = None
    endpoint_url: str | None = None


class Aws:
    """boto3 clients for one target, created once each."""

    def __init__(self, target: Target) -> None:
        # boto3 is imported here, not at start-up: about 0.15 CPU-s, which `--help` and local commands skip.
        import boto3  # noqa: PLC0415
        from botocore.config import Config  # noqa: PLC0415

        self.target = target
        try:
            # AWS_REGION first, as the AWS CLI and every SDK but boto3 read it (boto3 reads only AWS_DEFAULT_REGION).
            region_name = target.region or os.environ.get("AWS_REGION") or None
            self.session = boto3.Session(profile_name=target.profile, region_name=region_name)
        except ProfileNotFound:
            raise DeploymentError(
                f"AWS profile '{target.profile}' is not configured (check ~/.aws/config or drop --profile)"
            ) from None
        region = self.session.region_name
        if not region:
            raise DeploymentError(
                "no AWS region: pass --region, or set AWS_REGION (or AWS_DEFAULT_REGION) or a region in your profile"
            )
        self.region: str = region
        self._clients: dict[str, Any] = {}
        # Fail fast on an unreachable endpoint; the standard retry mode still rides out throttling.
        self._config = Config(retries={"mode": "standard", "max_attempts": 4}, connect_timeout=5, read_timeout=65)

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self.session.client(
                service, region_name=self.region, endpoint_url=self.target.endpoint_url, config=self._config
            )
        return self._clients[service]


@dataclass(frozen=True)
class Deployment:
    prefix: str
    region: str
    bucket: str
    run_table: str
    state_machine_arn: str
    topic_arn: str
    log_groups: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "prefix": self.prefix,
            "region": self.region,
            "bucket": self.bucket,
            "run_table": self.run_table,
            "state_machine_arn": self.state_machine_arn,
            "topic_arn": self.topic_arn,
            "log_groups": list(self.log_groups),
        }


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


@contextmanager
def translated_errors(aws: Aws) -> Iterator[None]:
    """Turn credential, region and connection failures into DeploymentErrors that say what to do."""
    where = f"region {aws.region}" + (f", endpoint {aws.target.endpoint_url}" if aws.target.endpoint_url else "")
    try:
        yield
    except (NoCredentialsError, PartialCredentialsError):
        raise CredentialsMissing(
            "no AWS credentials found: configure them (aws configure / aws sso login, AWS_PROFILE or "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY), or pass --profile"
        ) from None
    except NoRegionError:
        raise DeploymentError("no AWS region: pass --region, or set AWS_REGION (or AWS_DEFAULT_REGION)") from None
    except EndpointConnectionError as error:
        raise DeploymentError(
            f"cannot reach {error.kwargs.get('endpoint_url', where)}: is the endpoint right?"
        ) from None
    except ClientError as error:
        if error_code(error) in _CREDENTIAL_CODES:
            raise CredentialsMissing(
                f"AWS rejected the credentials ({error_code(error)}) in {where}: refresh them (aws sso login) "
                "or pick another --profile"
            ) from None
        raise


def stack_outputs(aws: Aws, stack_name: str, *, prefix: str) -> dict[str, str]:
    cloudformation = aws.client("cloudformation")
    with translated_errors(aws):
        try:
            stacks = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
        except ClientError as error:
            if error_code(error) == "ValidationError":  # CloudFormation's "Stack with id … does not exist"
                raise StackNotFound(
                    f"stack '{stack_name}' not found in region {aws.region}"
                    + (f" at {aws.target.endpoint_url}" if aws.target.endpoint_url else "")
                    + f" (prefix '{prefix}'): deploy mtrl there, or pass the --prefix/--region it was deployed with"
                ) from None
            raise
    if not stacks:
        raise StackNotFound(f"stack '{stack_name}' not found in region {aws.region} (prefix '{prefix}')")
    return {item["OutputKey"]: item["OutputValue"] for item in stacks[0].get("Outputs") or []}


def _required(outputs: dict[str, str], names: dict[str, str], stack_name: str) -> dict[str, str]:
    missing = [output for output in names.values() if not outputs.get(output)]
    if missing:
        raise OutputMissing(
            f"stack '{stack_name}' has no output {', '.join(missing)}: redeploy it with this version of mtrl"
        )
    return {attribute: outputs[output] for attribute, output in names.items()}


def discover(aws: Aws, prefix: str = "mtrl") -> Deployment:
    """The deployment named by ``prefix`` in the target's region (two DescribeStacks calls)."""
    data_stack, pipeline_stack = f"{prefix}-data", f"{prefix}-pipeline"
    data = _required(stack_outputs(aws, data_stack, prefix=prefix), DATA_OUTPUTS, data_stack)
    pipeline_outputs = stack_outputs(aws, pipeline_stack, prefix=prefix)
    pipeline = _required(pipeline_outputs, PIPELINE_OUTPUTS, pipeline_stack)
    log_groups = tuple(name for name in pipeline_outputs.get(LOG_GROUPS_OUTPUT, "").split(",") if name)
    return Deployment(prefix=prefix, region=aws.region, log_groups=log_groups, **data, **pipeline)


def execution_arn(state_machine_arn: str, run_id: str) -> str:
    """The execution ARN of a run (the trigger names executions by run id)."""
    parts = state_machine_arn.split(":")
    if len(parts) < 7 or parts[5] != "stateMachine":
        raise ValueError(f"not a state machine ARN: {state_machine_arn}")
    return ":".join([*parts[:5], "execution", parts[6], run_id])
