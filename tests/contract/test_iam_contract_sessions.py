"""The sessions backend's AWS calls, recorded at botocore, against the synthesized policies of the roles that make them:

- the backend function's role, through a run whose loop runs in its Fargate task (preflight → submit: RunTask with
  the task's roles passed → status: DescribeTasks → cancel: ListTasks, StopTask → cleanup: the training session a
  killed task left, described, stopped and deleted), with the sessions section of ``MTRL_BACKEND_SETTINGS`` as
  deployed;
- the loop task's role, through the loop itself on SageMaker training sessions (create with the session role and the
  data key, wait, sample, forward-backward, optimizer step, save for the sampler and the state, stop and delete; the
  run's inputs read and its progress, state and signal rows written) — the control plane answered by the fake session
  through botocore, the runtime served over HTTP, both validated against the botocore service models.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mtrl.backends._aws import AwsClients
from mtrl.backends.sessions.adapter import SessionsAdapter
from mtrl.backends.sessions.options import SessionsRunOptions
from mtrl.backends.sessions.runner import RunConfig, RunStore, SessionsRunner
from mtrl.backends.sessions.settings import SessionsSettings
from mtrl.contracts.backend import JobState
from tests.contract.iam_contract import AppModel, AwsCall, CallRecorder, assert_calls_allowed
from tests.contract.recorded_runs import (
    BACKEND_ROLE,
    BackendRun,
    deployed_backend_settings,
    deployed_data_bucket,
    model_account_aws,
)

# The fake session's modules import their neighbours by bare name (as the unit tests beside them run them).
sys.path[:0] = [str(Path(__file__).parents[1] / "unit" / "backends" / name) for name in ("", "sessions")]
from aws_fakes import FakeAws, create_task_network, moto_ecs_tasks, new_session  # noqa: E402
from session_fakes import FakeSession, runtime_server, session_opener  # noqa: E402

TASK_ROLE = "mtrl-pipeline/SessionsLoop/TaskRole"
RUN_ID = "wordle-20261207T230000Z-5e551045"
HUB_MODEL = "arn:aws:sagemaker:us-east-1:aws:hub-content/SageMakerPublicHub/Model/qwen3-4b/1.0.0"
OPTIONS = {"service": "sagemaker", "base_model": HUB_MODEL, "tokenizer": "Qwen/Qwen3-4B", "steps": 1, "max_tokens": 4}
ROWS = [{"id": f"w-{i}", "metadata": {"prompt": "guess", "answer": word}} for i, word in enumerate(["crane", "slate"])]


def _world(aws: FakeAws, bucket: str) -> None:
    s3 = aws.session.client("s3")
    s3.create_bucket(Bucket=bucket)
    body = "".join(json.dumps(row) + "\n" for row in ROWS)
    s3.put_object(Bucket=bucket, Key="training-data/wordle.jsonl", Body=body.encode())


def test_every_call_the_backend_function_makes_for_a_sessions_run_is_allowed(
    app_model: AppModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployed = deployed_backend_settings(app_model, "sessions")
    with moto_ecs_tasks(), model_account_aws(monkeypatch, app_model):
        aws = FakeAws(new_session())
        bucket = deployed_data_bucket(app_model)
        _world(aws, bucket)
        cluster_name = deployed["sessions_ecs_cluster_arn"].rsplit("/", 1)[-1]
        subnet, sg, cluster = create_task_network(aws.session, cluster_name=cluster_name, worker_container="worker")
        assert cluster == deployed["sessions_ecs_cluster_arn"]  # moto in the model's account: the same ARN
        aws.session.client("ecs").register_task_definition(
            family=deployed["sessions_task_definition"],
            networkMode="awsvpc",
            requiresCompatibilities=["FARGATE"],
            cpu="2048",
            memory="8192",
            containerDefinitions=[{"name": deployed["sessions_container_name"], "image": "x", "memory": 8192}],
        )
        session = FakeSession()
        session.attach(aws)
        settings = {
            **deployed,
            **OPTIONS,
            "sessions_subnet_ids": [subnet],
            "sessions_security_group_ids": [sg],
            "run_id": RUN_ID,
            "environment": "wordle",
        }
        adapter = SessionsAdapter(clients=AwsClients(aws.session))
        backend = BackendRun(run_id=RUN_ID, settings=settings, bucket=bucket)

        findings = backend(adapter.preflight)
        assert all(finding.ok for finding in findings), findings
        assert backend(adapter.provision) == []
        job_id = backend(adapter.submit)
        assert backend(adapter.status, job_id).state in {JobState.PENDING, JobState.RUNNING}
        # The task named its session, created it and was killed: teardown releases it from the function.
        store = RunStore(aws.session.client("s3"), f"s3://{bucket}/runs/{RUN_ID}/")
        progress = store.progress()
        assert progress is not None
        session.name, session.status = f"mtrl-{RUN_ID}-1", "Running"
        store.save_progress(progress.model_copy(update={"sessions": [session.name]}))
        backend(adapter.cancel, job_id)
        backend(adapter.cleanup)
        assert session.status == "Deleted"

    operations = {f"{call.service}.{call.operation}" for call in backend.calls}
    assert {
        "ecs.RunTask",
        "ecs.DescribeTasks",
        "ecs.ListTasks",
        "ecs.StopTask",
        "sagemaker.DescribeTrainingSession",
        "sagemaker.StopTrainingSession",
        "sagemaker.DeleteTrainingSession",
        "s3.PutObject",
    } <= operations
    assert_calls_allowed(backend.calls, BACKEND_ROLE, model=app_model)


def test_every_call_the_loop_task_makes_on_sagemaker_training_sessions_is_allowed(
    app_model: AppModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployed = deployed_backend_settings(app_model, "sessions")
    with model_account_aws(monkeypatch, app_model):
        aws = FakeAws(new_session())
        bucket = deployed_data_bucket(app_model)
        _world(aws, bucket)
        fake = FakeSession(coming_up=["Created"])
        fake.attach(aws)
        config = RunConfig(
            run_id=RUN_ID,
            output_uri=f"s3://{bucket}/runs/{RUN_ID}/",
            dataset_uri=f"s3://{bucket}/training-data/wordle.jsonl",
            environment="wordle",
            options=SessionsRunOptions.model_validate({**OPTIONS, "group_size": 2, "tasks_per_step": 1}),
            deploy=SessionsSettings.model_validate(deployed),
        )
        with runtime_server(fake, aws.session) as server:
            s3 = aws.session.client("s3")
            RunStore(s3, config.output_uri).write(
                config.folder.join("run-config.json"), config.model_dump_json().encode()
            )
            with CallRecorder() as recording:
                done = SessionsRunner(config, s3, open=session_opener(aws.session, fake, server.url)).advance()
        assert (done.phase, done.step) == ("done", 1), done.message
        assert fake.status == "Deleted"

    calls: list[AwsCall] = recording.calls
    operations = {f"{call.service}.{call.operation}" for call in calls}
    assert {
        "sagemaker.CreateTrainingSession",
        "sagemaker.DescribeTrainingSession",
        "sagemaker.StopTrainingSession",
        "sagemaker.DeleteTrainingSession",
        "sagemakertrainingsessionruntime.ExecuteSamplingOperation",
        "sagemakertrainingsessionruntime.GetSamplingOperationResult",
        "sagemakertrainingsessionruntime.ExecuteTrainingOperation",
        "sagemakertrainingsessionruntime.GetTrainingOperationResult",
        "s3.GetObject",
        "s3.PutObject",
    } <= operations
    created = next(call for call in calls if call.operation == "CreateTrainingSession")
    assert created.params["RoleArn"] == deployed["sessions_role_arn"]
    assert created.params["OutputConfig"]["S3Location"]["KmsKeyArn"] == deployed["kms_key_arn"]
    assert_calls_allowed(calls, TASK_ROLE, model=app_model)
