"""The reward-worker container cannot be turned against the account by the generated code it runs.

Requirements from the ECS task definition reference (docs.aws.amazon.com/AmazonECS/latest/developerguide/
task_definition_parameters.html): ``readonlyRootFilesystem``, ``privileged`` (not valid on Fargate when
true), ``linuxParameters.capabilities.drop`` (Fargate accepts drop of any capability), ``initProcessEnabled``,
and bind-mount volumes without a host path (task ephemeral storage on Fargate).
"""

from __future__ import annotations

from typing import Any

from aws_cdk.assertions import Match, Template

from stacks.constructs.fargate_task import DROPPED_CAPABILITIES, SCRATCH_VOLUME


def _container(workers_json: dict[str, Any]) -> dict[str, Any]:
    (task,) = [r for r in workers_json["Resources"].values() if r["Type"] == "AWS::ECS::TaskDefinition"]
    (container,) = task["Properties"]["ContainerDefinitions"]
    return dict(container)


def test_root_file_system_is_read_only_with_an_explicit_writable_tmp(workers_template: Template) -> None:
    workers_template.has_resource_properties(
        "AWS::ECS::TaskDefinition",
        {
            "ContainerDefinitions": [
                Match.object_like(
                    {
                        "ReadonlyRootFilesystem": True,
                        "MountPoints": [{"ContainerPath": "/tmp", "SourceVolume": SCRATCH_VOLUME, "ReadOnly": False}],
                    }
                )
            ],
            "Volumes": [{"Name": SCRATCH_VOLUME}],  # no host path: the task's own ephemeral storage
        },
    )


def test_never_privileged_and_capabilities_dropped(workers_json: dict[str, Any]) -> None:
    container = _container(workers_json)
    assert container["Privileged"] is False
    linux = container["LinuxParameters"]
    assert linux["InitProcessEnabled"] is True  # an init reaps whatever the sandboxes leave behind
    dropped = set(linux["Capabilities"]["Drop"])
    assert dropped == {capability.value for capability in DROPPED_CAPABILITIES}
    assert {"NET_RAW", "MKNOD", "SETFCAP"} <= dropped
    # Kept: without it the sandbox cannot empty its code's bounding set (mtrl/sandbox/_harness.py, issue 23 §7).
    assert "SETPCAP" not in dropped
    assert "Add" not in linux["Capabilities"]  # nothing beyond Docker's defaults (never SYS_ADMIN/SYS_PTRACE)


def test_no_credentials_in_the_container_definition(workers_json: dict[str, Any]) -> None:
    """The task role's credentials reach the worker only through the ECS agent (the credentials URI), which
    the sandbox strips with the rest of the environment; nothing secret is set here."""
    container = _container(workers_json)
    names = {entry["Name"] for entry in container.get("Environment", [])}
    assert not {name for name in names if name.startswith("AWS_")}
    assert "Secrets" not in container
