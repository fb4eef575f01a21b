"""The run's own reward-worker task role: its workers may use only their run's queues and call only their run's proxy.

ECS gives every task of a task role the same credentials and no session tags (aws/containers-roadmap#2426), so a
policy shared by all runs' workers cannot tell one run's proxy from another's; a tag condition has nothing on the
principal side to compare with. So each run gets its own role, ``<base>-worker`` (``naming.worker_role_name``),
created at the start of provisioning (long before the workers start, so IAM has propagated it) and removed at
teardown:

- trust: ``ecs-tasks.amazonaws.com`` of this account only;
- permissions boundary: the deploy-time ``<prefix>-reward-worker-run-boundary`` (the most any worker may do; the
  backend role can create worker roles only under it, so a bug here cannot grant a worker more);
- attached: the deploy-time ``<prefix>-reward-worker-base`` (environment packages, the data key through S3/SQS);
- inline: this run's queues (``<base>*``) and its proxy function ``<base>-NovaForgeSDK-SageMaker-proxy``, both named
  by the run's base, which no other run's names can match (every base has the same length).

The workers are started with this role as their task role (``RunTask`` ``overrides.taskRoleArn``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from mtrl.backends._aws import backend_error, error_code
from mtrl.backends.hyperpod.base import AdapterBase
from mtrl.backends.hyperpod.common import WORKER_ROLE_KIND, HyperPodSettings
from mtrl.backends.hyperpod.naming import SDK_STACK_SUFFIX, WORKER_QUEUE_ACTIONS, run_stack_base, worker_role_name
from mtrl.contracts.backend import CreatedResource, RunContext

RUN_POLICY_NAME = "run-queues-and-proxy"


def _account_and_partition(settings: HyperPodSettings) -> tuple[str, str]:
    """From the reward cluster's ARN (arn:<partition>:ecs:<region>:<account>:cluster/<name>)."""
    parts = settings.ecs_cluster_arn.split(":")
    return parts[4], parts[1]


def run_policy_document(settings: HyperPodSettings, run_id: str) -> dict[str, Any]:
    """What this run's workers may do beyond the base policy: its queues, its proxy through the IAM-auth URL."""
    account, partition = _account_and_partition(settings)
    base = run_stack_base(settings.prefix, run_id)
    where = f"{settings.region}:{account}"
    proxy = f"arn:{partition}:lambda:{where}:function:{base}-{SDK_STACK_SUFFIX}-SageMaker-proxy"
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "UseThisRunsQueues",
                "Effect": "Allow",
                "Action": list(WORKER_QUEUE_ACTIONS),
                "Resource": f"arn:{partition}:sqs:{where}:{base}*",
            },
            {
                "Sid": "CallThisRunsProxyUrl",
                "Effect": "Allow",
                "Action": "lambda:InvokeFunctionUrl",
                "Resource": proxy,
                "Condition": {"StringEquals": {"lambda:FunctionUrlAuthType": "AWS_IAM"}},
            },
            {
                "Sid": "CallThisRunsProxyThroughItsUrl",
                "Effect": "Allow",
                "Action": "lambda:InvokeFunction",
                "Resource": proxy,
                "Condition": {"Bool": {"lambda:InvokedViaFunctionUrl": "true"}},
            },
        ],
    }


def _trust_document(settings: HyperPodSettings) -> dict[str, Any]:
    account, partition = _account_and_partition(settings)
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "ecs-tasks.amazonaws.com"},
                "Action": "sts:AssumeRole",
                "Condition": {
                    "StringEquals": {"aws:SourceAccount": account},
                    "ArnLike": {"aws:SourceArn": f"arn:{partition}:ecs:{settings.region}:{account}:*"},
                },
            }
        ],
    }


class WorkerRole(AdapterBase):
    """Create (idempotently) and delete the run's worker task role."""

    def _iam(self, settings: HyperPodSettings) -> Any:
        return self._clients.client("iam", settings.region)

    def _ensure_worker_role(self, run: RunContext, settings: HyperPodSettings, local: list[CreatedResource]) -> str:
        """The run's worker role ARN; recorded on the run before it is created."""
        name = worker_role_name(settings.prefix, run.run_id)
        self._record(run, local, CreatedResource(WORKER_ROLE_KIND, name, {"purpose": "reward-workers"}))
        iam = self._iam(settings)
        try:
            arn = str(
                iam.create_role(
                    RoleName=name,
                    AssumeRolePolicyDocument=json.dumps(_trust_document(settings)),
                    PermissionsBoundary=settings.reward_worker_run_boundary_arn,
                    Description=f"Reward workers of mtrl run {run.run_id[:200]}: its queues and proxy only",
                    MaxSessionDuration=3600,
                )["Role"]["Arn"]
            )
        except ClientError as error:
            if error_code(error) != "EntityAlreadyExists":
                raise backend_error(f"run {run.run_id}: CreateRole {name}", error) from error
            try:
                arn = str(iam.get_role(RoleName=name)["Role"]["Arn"])
            except ClientError as again:
                raise backend_error(f"run {run.run_id}: GetRole {name}", again) from again
        try:
            iam.put_role_policy(
                RoleName=name,
                PolicyName=RUN_POLICY_NAME,
                PolicyDocument=json.dumps(run_policy_document(settings, run.run_id)),
            )
            iam.attach_role_policy(RoleName=name, PolicyArn=settings.reward_worker_base_policy_arn)
        except ClientError as error:
            raise backend_error(f"run {run.run_id}: granting the worker role {name}", error) from error
        return arn

    def _delete_worker_role(self, settings: HyperPodSettings, resource: CreatedResource) -> bool:
        iam, name = self._iam(settings), resource.identifier
        steps: tuple[tuple[str, Callable[[], Any]], ...] = (
            ("DeleteRolePolicy", lambda: iam.delete_role_policy(RoleName=name, PolicyName=RUN_POLICY_NAME)),
            (
                "DetachRolePolicy",
                lambda: iam.detach_role_policy(RoleName=name, PolicyArn=settings.reward_worker_base_policy_arn),
            ),
            ("DeleteRole", lambda: iam.delete_role(RoleName=name)),
        )
        for operation, step in steps:
            try:
                step()
            except ClientError as error:
                if error_code(error) != "NoSuchEntity":
                    raise backend_error(f"{operation} {name}", error) from error
        return True
