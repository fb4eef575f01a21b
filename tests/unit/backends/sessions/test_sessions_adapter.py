"""The sessions adapter on moto (S3, ECS) and the faked SageMaker control plane: preflight's findings, nothing
provisioned, the loop's Fargate task started (recorded first), restarted after it stops early and given up on after
``MAX_TASK_ATTEMPTS``, the loop in the status polls, held-out figures, cost, cancel and cleanup (tasks stopped, a
left-over SageMaker session stopped and deleted)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from aws_fakes import FakeAws, create_task_network, moto_ecs_tasks
from run_support import BUCKET, RUN_ID, Opener, Recorded, context, world
from session_fakes import PACKAGE_GROUP, FakeSession

from mtrl.backends._aws import AwsClients
from mtrl.backends.pricing import budget_finding
from mtrl.backends.sessions.adapter import MAX_TASK_ATTEMPTS, TASK_KIND, TASK_MODULE, SessionsAdapter
from mtrl.backends.sessions.runner import RunStore
from mtrl.contracts.backend import BackendError, JobState

HUB_MODEL = "arn:aws:sagemaker:us-east-1:aws:hub-content/SageMakerPublicHub/Model/qwen3-4b/1.0.0"
ROLE = "arn:aws:iam::123456789012:role/mtrl-sessions"
SAGEMAKER = {"service": "sagemaker", "base_model": HUB_MODEL, "tokenizer": "Qwen/Qwen3-4B"}


@pytest.fixture
def task_world(aws: FakeAws) -> Iterator[dict[str, Any]]:
    """The deploy-time values of a deployment whose loop runs in a Fargate task."""
    with moto_ecs_tasks():
        subnet, sg, cluster = create_task_network(aws.session, cluster_name="mtrl", worker_container="worker")
        world()
        yield {
            "sessions_ecs_cluster_arn": cluster,
            "sessions_task_definition": "mtrl-nova-runner",
            "sessions_container_name": "runner",
            "sessions_subnet_ids": [subnet],
            "sessions_security_group_ids": [sg],
            "sessions_role_arn": ROLE,
            "sessions_model_package_group_arn": PACKAGE_GROUP,
        }


def _adapter(aws: FakeAws, **options: Any) -> SessionsAdapter:
    return SessionsAdapter(clients=AwsClients(aws.session), **options)


def _tasks(aws: FakeAws, cluster: str, status: str = "RUNNING") -> list[dict[str, Any]]:
    ecs = aws.session.client("ecs")
    arns = ecs.list_tasks(cluster=cluster, desiredStatus=status)["taskArns"]
    return ecs.describe_tasks(cluster=cluster, tasks=arns)["tasks"] if arns else []


def _failed(findings: list[Any]) -> dict[str, str]:
    return {finding.check: finding.message for finding in findings if not finding.ok}


def test_preflight_passes_a_local_run_in_the_polls_and_provision_makes_nothing(aws: FakeAws) -> None:
    world()
    adapter = _adapter(aws)
    findings = adapter.preflight(context())
    assert _failed(findings) == {}
    assert {finding.check for finding in findings} == {"sessions-settings", "environment", "sessions-service"}
    assert adapter.provision(context()) == []


@pytest.mark.parametrize(
    ("overrides", "check", "cause"),
    [
        (SAGEMAKER, "sessions-service", "runs only from the loop's Fargate task"),
        ({"service": "sagemaker"}, "sessions-settings", "needs a SageMaker Hub model ARN"),
        ({"lora_rank": 300}, "sessions-settings", "less than or equal to 256"),
        ({"environment": "no_such_env"}, "environment", "no_such_env"),
    ],
)
def test_preflight_refuses_what_cannot_run(aws: FakeAws, overrides: dict[str, Any], check: str, cause: str) -> None:
    failed = _failed(_adapter(aws).preflight(context(**overrides)))
    assert check in failed
    assert cause in failed[check]


def test_preflight_refuses_a_budget_on_a_sagemaker_run_it_cannot_price(
    aws: FakeAws, task_world: dict[str, Any]
) -> None:
    assert _failed(_adapter(aws).preflight(context(**task_world, **SAGEMAKER))) == {}
    # The budget is Preflight's own check for every backend (mtrl.backends.pricing.budget_finding).
    budgeted = context(**task_world, **SAGEMAKER, max_budget_usd=50.0, backend="sessions")
    finding = budget_finding(budgeted, _adapter(aws))
    assert finding is not None
    assert not finding.ok
    assert "unsourced" in finding.message
    assert budgeted.run_id in finding.message
    local = budget_finding(context(**task_world, max_budget_usd=50.0, backend="sessions"), _adapter(aws))
    assert local is not None
    assert local.ok, local
    without_role = {**task_world, "sessions_role_arn": None}
    assert (
        "sessions_role_arn"
        in _failed(_adapter(aws).preflight(context(**without_role, **SAGEMAKER)))["sessions-service"]
    )


def test_submit_records_the_task_then_starts_it_with_the_run_config(aws: FakeAws, task_world: dict[str, Any]) -> None:
    recorded = Recorded()
    adapter = _adapter(aws)
    job_id = adapter.submit(context(recorded, **task_world))
    assert job_id == f"sessions-{RUN_ID}"
    (resource,) = recorded.resources
    assert resource.kind == TASK_KIND
    (task,) = _tasks(aws, task_world["sessions_ecs_cluster_arn"])
    assert task["startedBy"] == resource.identifier
    override = task["overrides"]["containerOverrides"][0]
    config_uri = f"s3://{BUCKET}/runs/{RUN_ID}/sessions/run-config.json"
    assert override == {"name": "runner", "command": ["python", "-m", TASK_MODULE, "--run-config", config_uri]}
    assert task["launchType"] == "FARGATE"
    status = adapter.status(context(recorded, **task_world), job_id)
    assert status.state is JobState.RUNNING
    assert status.progress["step"] == 0


@pytest.mark.parametrize(("public", "expected"), [(False, "DISABLED"), (True, "ENABLED")])
def test_the_task_gets_a_public_ip_only_where_the_deployment_has_no_nat_gateway(
    aws: FakeAws, task_world: dict[str, Any], public: bool, expected: str
) -> None:
    # The serverless profile (nat_gateways=none) ships public subnets and sessions_assign_public_ip.
    sent: list[dict[str, Any]] = []
    aws.session.events.register("provide-client-params.ecs.RunTask", lambda params, **_: sent.append(params))
    _adapter(aws).submit(context(**task_world, sessions_assign_public_ip=public))
    (params,) = sent
    assert params["networkConfiguration"]["awsvpcConfiguration"]["assignPublicIp"] == expected


def test_a_task_that_stops_early_is_started_again_until_the_attempts_run_out(
    aws: FakeAws, task_world: dict[str, Any]
) -> None:
    recorded = Recorded()
    adapter = _adapter(aws)
    cluster = task_world["sessions_ecs_cluster_arn"]
    job_id = adapter.submit(context(recorded, **task_world))
    ecs = aws.session.client("ecs")
    for attempt in range(2, MAX_TASK_ATTEMPTS + 1):
        for task in _tasks(aws, cluster):
            ecs.stop_task(cluster=cluster, task=task["taskArn"], reason="Essential container exited")
        status = adapter.status(context(recorded, **task_world), job_id)
        assert status.state is JobState.PENDING
        assert "task restarted after step 0" in status.message
        assert len(recorded.resources) == attempt  # each task recorded before it starts
    for task in _tasks(aws, cluster):
        ecs.stop_task(cluster=cluster, task=task["taskArn"], reason="Essential container exited")
    status = adapter.status(context(recorded, **task_world), job_id)
    assert status.state is JobState.FAILED
    assert f"stopped {MAX_TASK_ATTEMPTS} times" in status.message


def test_a_finished_run_reports_success_however_its_task_ended(aws: FakeAws, task_world: dict[str, Any]) -> None:
    recorded = Recorded()
    adapter = _adapter(aws)
    job_id = adapter.submit(context(recorded, **task_world))
    store = RunStore(aws.session.client("s3"), f"s3://{BUCKET}/runs/{RUN_ID}/")
    progress = store.progress()
    assert progress is not None
    store.save_progress(
        progress.model_copy(
            update={
                "step": 2,
                "phase": "done",
                "usage": {"prefill": 10, "sample": 5, "train": 15},
                "last": {"reward_mean": 0.5},
            }
        )
    )
    status = adapter.status(context(recorded, **task_world), job_id)
    assert status.state is JobState.SUCCEEDED
    assert status.metrics == {"reward_mean": 0.5, "cost_usd": 0.0}
    assert status.progress["token_usage"] == {"prefill": 10, "sample": 5, "train": 15}
    assert status.outputs["progress_uri"].endswith("/sessions/progress.json")


def test_cancel_stops_the_task_and_the_run_is_never_restarted(aws: FakeAws, task_world: dict[str, Any]) -> None:
    recorded = Recorded()
    adapter = _adapter(aws)
    cluster = task_world["sessions_ecs_cluster_arn"]
    job_id = adapter.submit(context(recorded, **task_world))
    adapter.cancel(context(recorded, **task_world), job_id)
    assert _tasks(aws, cluster) == []
    status = adapter.status(context(recorded, **task_world), job_id)
    assert status.state is JobState.STOPPED
    assert len(recorded.resources) == 1


def test_cleanup_stops_every_task_of_the_run_and_is_idempotent(aws: FakeAws, task_world: dict[str, Any]) -> None:
    recorded = Recorded()
    adapter = _adapter(aws)
    cluster = task_world["sessions_ecs_cluster_arn"]
    adapter.submit(context(recorded, **task_world))
    assert len(_tasks(aws, cluster)) == 1
    removed = adapter.cleanup(context(recorded, **task_world))
    assert removed == recorded.resources
    assert _tasks(aws, cluster) == []
    assert adapter.cleanup(context(recorded, **task_world)) == recorded.resources


def test_cleanup_stops_and_deletes_a_sagemaker_session_a_killed_task_left(
    aws: FakeAws, task_world: dict[str, Any]
) -> None:
    session = FakeSession()
    session.attach(aws)
    session.name, session.status = f"mtrl-{RUN_ID}-1", "Running"
    recorded = Recorded()
    adapter = _adapter(aws)
    run = context(recorded, **task_world, **SAGEMAKER)
    adapter.submit(run)
    store = RunStore(aws.session.client("s3"), f"s3://{BUCKET}/runs/{RUN_ID}/")
    progress = store.progress()
    assert progress is not None
    store.save_progress(progress.model_copy(update={"sessions": [session.name]}))  # the task named it, then died
    adapter.cleanup(context(recorded, **task_world, **SAGEMAKER))
    assert [name for name, _ in session.requests if name != "DescribeTrainingSession"] == [
        "StopTrainingSession",
        "DeleteTrainingSession",
    ]
    assert session.status == "Deleted"
    adapter.cleanup(context(recorded, **task_world, **SAGEMAKER))  # gone: nothing more to do


def test_the_loop_runs_in_the_polls_a_step_at_a_time(aws: FakeAws) -> None:
    pytest.importorskip("torch", reason="the mtrl[llm] extra (make test installs it)")
    world(eval_rows=2)
    adapter = SessionsAdapter(clients=AwsClients(aws.session), open=Opener())
    run = context(with_eval=True)
    job_id = adapter.submit(run)
    with pytest.raises(BackendError) as waiting:
        adapter.evaluate(run)
    assert waiting.value.transient
    first = adapter.status(run, job_id)
    assert (first.state, first.progress["step"]) == (JobState.RUNNING, 1)
    assert "heldout_reward_before" in first.metrics
    second = adapter.status(run, job_id)
    assert (second.state, second.progress["step"]) == (JobState.SUCCEEDED, 2)
    assert second.metrics["cost_usd"] == 0.0
    assert second.progress["token_usage"]["sample"] > 0
    figures = adapter.evaluate(run)
    assert figures["heldout_tasks"] == 2.0
    assert {"heldout_reward_before", "heldout_reward_after", "heldout_success_before", "heldout_success_after"} <= set(
        figures
    )
    signals = aws.session.client("s3").get_object(Bucket=BUCKET, Key=f"runs/{RUN_ID}/signals.jsonl")["Body"].read()
    assert [json.loads(line).get("step") for line in signals.decode().splitlines()[1:]] == [1, 2]
