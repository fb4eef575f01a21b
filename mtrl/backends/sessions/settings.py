"""The deploy-time values the sessions backend's adapter reads (its section of ``MTRL_BACKEND_SETTINGS``, shipped by
its stack side, ``stacks/backends/sessions.py``), merged with the run's settings and per-run options.

Where the loop runs: with an ECS cluster and task definition, in a Fargate task per run (``mtrl.backends.sessions
.task``; a run lasts longer than a Lambda's 15 minutes); without them (the emulator variant, the tests), inside the
backend function's status polls, a few steps a poll, resumed from the state saved after each step.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SessionsSettings(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    region: str = Field(min_length=1)
    data_bucket: str = Field(min_length=3)
    kms_key_arn: str | None = None
    # The Fargate task that runs the loop (all three, or none: then the loop runs in the status polls).
    sessions_ecs_cluster_arn: str | None = None
    sessions_task_definition: str | None = None
    sessions_container_name: str | None = None
    sessions_subnet_ids: list[str] = []
    sessions_security_group_ids: list[str] = []
    # Public subnets without a NAT gateway (the serverless profile): the task reaches AWS through its public IP.
    sessions_assign_public_ip: bool = False
    # The role a SageMaker training session runs with (CreateTrainingSession's RoleArn), and where it registers weights.
    sessions_role_arn: str | None = None
    sessions_model_package_group_arn: str | None = None

    @property
    def runs_in_a_task(self) -> bool:
        return bool(self.sessions_ecs_cluster_arn and self.sessions_task_definition and self.sessions_container_name)
