"""The GPU safety net (issue 11, defect 13) executed against moto (run table, SNS → SQS) and the model-validated
HyperPod fake of the backend tests (moto has no SageMaker ``UpdateCluster``), and as deployed: its schedule, its
environment and its grants, read from the synthesized template."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from aws_cdk.assertions import Template

from mtrl.contracts.backend import CreatedResource
from mtrl.contracts.errors import InternalError
from mtrl.runs.capacity_guard import (
    ENV_GUARDED_CLUSTER,
    ENV_GUARDED_GROUPS,
    GuardedCluster,
    check_capacity,
)
from mtrl.runs.registry import RunStatus
from mtrl.runs.runtime import Runtime
from mtrl.settings.pipeline import PipelineSettings
from stacks.app_builder import Deployment
from stacks.constructs.data_store import RUN_TABLE_LISTING_INDEX
from tests.run_table import create_run_table
from tests.unit.backends.aws_fakes import FakeAws, FakeCluster, new_session

TABLE = "mtrl-runs"


@dataclass
class World:
    aws: FakeAws
    cluster: FakeCluster
    runtime: Runtime
    queue_url: str
    calls: list[str]

    def run(self, status: RunStatus, *, group: str = "gpu", removed: bool = False) -> str:
        run_id = f"wordle-{uuid.uuid4().hex[:8]}"
        registry = self.runtime.registry
        registry.create(run_id, {})
        resource = CreatedResource(
            "hyperpod-capacity",
            f"{self.cluster.name}/{group}",
            {"cluster": self.cluster.name, "group": group, "idle_count": 0, "target_count": 2},
        )
        registry.record_resource(run_id, resource)
        if removed:
            registry.mark_removed(run_id, [resource])
        if status is not RunStatus.REGISTERED:
            if status.terminal:
                registry.finish(run_id, status)
            else:
                registry.set_status(run_id, status)
        return run_id

    def alerts(self) -> list[dict[str, Any]]:
        sqs = self.aws.session.client("sqs")
        messages = sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10).get("Messages", [])
        return [json.loads(message["Body"]) for message in messages]

    def check(self, groups: dict[str, int] | None = None) -> dict[str, Any]:
        guarded = GuardedCluster(name=self.cluster.name, idle_counts=groups or {"gpu": 0})
        return check_capacity(self.runtime, self.aws.session.client("sagemaker"), guarded).as_dict()


@pytest.fixture
def world(mocked_aws: None) -> World:
    aws = FakeAws(new_session())
    calls: list[str] = []
    aws.session.events.register(
        "before-call.*.*",
        lambda model, **_: calls.append(f"{model.service_model.signing_name}:{model.name}"),
    )
    cluster = FakeCluster(aws)
    dynamodb = aws.session.client("dynamodb")
    # The run table's keys and listing index as stacks/constructs/data_store.py declares them.
    create_run_table(dynamodb, TABLE, listed=True)
    sns, sqs = aws.session.client("sns"), aws.session.client("sqs")
    topic = sns.create_topic(Name="mtrl-runs")["TopicArn"]
    queue_url = sqs.create_queue(QueueName="alerts")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
    runtime = Runtime(
        dynamodb=dynamodb,
        s3=aws.session.client("s3"),
        table=TABLE,
        bucket="data",
        settings=PipelineSettings.model_validate({}),
        sns=sns,
        topic_arn=topic,
    )
    calls.clear()
    return World(aws=aws, cluster=cluster, runtime=runtime, queue_url=queue_url, calls=calls)


def _leak(world: World, count: int = 2) -> None:
    """The group is up without anyone having released it (what a teardown bug would leave)."""
    world.cluster.target = world.cluster.current = count


@pytest.mark.parametrize("status", [RunStatus.REGISTERED, RunStatus.PROVISIONING, RunStatus.TRAINING])
def test_a_group_held_by_a_live_run_is_left_alone(world: World, status: RunStatus) -> None:
    _leak(world)
    run_id = world.run(status)
    result = world.check()
    assert result["held"] == [
        {"group": "gpu", "instance_type": "ml.p5.48xlarge", "target": 2, "idle": 0, "runs": [run_id]}
    ]
    assert world.cluster.updates == []
    assert world.alerts() == []


@pytest.mark.parametrize("holder", ["none", "finished-without-release", "released-but-alive"])
def test_a_group_above_idle_with_no_live_holder_is_scaled_back_and_alerted(world: World, holder: str) -> None:
    _leak(world)
    if holder == "finished-without-release":  # teardown failed, the run is final: nobody will release it
        world.run(RunStatus.FAILED)
    elif holder == "released-but-alive":  # the run says it released the group, yet the group is still up
        world.run(RunStatus.TEARING_DOWN, removed=True)
    result = world.check()
    assert result["scaled_back"] == [{"group": "gpu", "instance_type": "ml.p5.48xlarge", "target": 2, "idle": 0}]
    (update,) = world.cluster.updates
    (spec,) = update["InstanceGroups"]
    assert (spec["InstanceGroupName"], spec["InstanceCount"]) == ("gpu", 0)
    # Only the count changes: the rest of the group's configuration is re-stated as DescribeCluster reports it.
    assert spec["ExecutionRole"] == "arn:aws:iam::123456789012:role/mtrl-hyperpod-nodes"
    assert spec["LifeCycleConfig"] == {"SourceS3Uri": "s3://sagemaker-lifecycle/scripts/", "OnCreate": "on_create.sh"}
    (alert,) = world.alerts()
    assert "GPU safety net scaled back gpu" in alert["Subject"]
    assert "from 2 to its idle count 0" in alert["Message"]


def test_the_restricted_group_is_scaled_back_through_its_own_specification(mocked_aws: None) -> None:
    aws = FakeAws(new_session())
    cluster = FakeCluster(aws, group="nova-rig", restricted=True)
    cluster.target = cluster.current = 4
    sns = aws.session.client("sns")
    topic = sns.create_topic(Name="t")["TopicArn"]
    dynamodb = aws.session.client("dynamodb")
    create_run_table(dynamodb, TABLE, listed=True)
    runtime = Runtime(
        dynamodb=dynamodb,
        s3=None,
        table=TABLE,
        bucket="data",
        settings=PipelineSettings.model_validate({}),
        sns=sns,
        topic_arn=topic,
    )
    guarded = GuardedCluster(name=cluster.name, idle_counts={"nova-rig": 1})
    result = check_capacity(runtime, aws.session.client("sagemaker"), guarded)
    assert [entry["group"] for entry in result.scaled_back] == ["nova-rig"]
    (spec,) = cluster.updates[0]["RestrictedInstanceGroups"]
    assert spec["InstanceCount"] == 1
    assert spec["EnvironmentConfig"]["FSxLustreConfig"] == {"SizeInGiB": 1200, "PerUnitStorageThroughput": 250}


def test_groups_at_idle_cost_nothing_and_send_nothing(world: World) -> None:
    result = world.check()
    assert result == {"scaled_back": [], "held": [], "busy": [], "problems": []}
    assert world.calls == ["sagemaker:DescribeCluster", "dynamodb:Query"]  # the cluster first, then the run table
    assert world.cluster.updates == []
    assert world.alerts() == []


def test_a_busy_cluster_is_left_for_the_next_check(world: World) -> None:
    _leak(world)
    world.cluster.status = "Updating"
    result = world.check()
    assert [entry["group"] for entry in result["busy"]] == ["gpu"]
    assert world.cluster.updates == []
    assert world.alerts() == []


def test_a_group_the_cluster_lacks_is_alerted_not_ignored(world: World) -> None:
    result = world.check({"gpu": 0, "no-such-group": 0})
    (problem,) = result["problems"]
    assert "no instance group 'no-such-group'" in problem
    (alert,) = world.alerts()
    assert "could not check" in alert["Subject"]


def _stale_listing(world: World) -> None:
    """From now on the listing index answers with what it held at this moment (a GSI lagging its table)."""
    original = world.runtime.dynamodb.query
    snapshot = [original(**request) for request in [_listing_request()]]

    def lagging(**request: Any) -> Any:
        assert request.get("IndexName") == RUN_TABLE_LISTING_INDEX  # only the index lags; the table is consistent
        return snapshot[0]

    world.runtime.dynamodb.query = lagging


def _listing_request() -> dict[str, Any]:
    return {
        "TableName": TABLE,
        "IndexName": RUN_TABLE_LISTING_INDEX,
        "KeyConditionExpression": "kind = :kind",
        "ExpressionAttributeValues": {":kind": {"S": "run"}},
    }


def test_a_capacity_the_listing_index_does_not_show_yet_is_not_scaled_back(world: World) -> None:
    # Issue 20 item 2. "Global secondary indexes support eventually consistent reads only" (DynamoDB developer guide,
    # "Read consistency"), and the cluster stays InService while it scales (NodeProvisioningMode Continuous): between
    # a run's record_resource and the index catching up, the guard saw a group above idle that "no run holds",
    # scaled it back and alerted falsely. The index here still shows the run as it was before record_resource.
    registry = world.runtime.registry
    run_id = f"wordle-{uuid.uuid4().hex[:8]}"
    registry.create(run_id, {})
    registry.set_status(run_id, RunStatus.PROVISIONING)
    _stale_listing(world)
    registry.record_resource(
        run_id,
        CreatedResource(
            "hyperpod-capacity",
            f"{world.cluster.name}/gpu",
            {"cluster": world.cluster.name, "group": "gpu", "idle_count": 0, "target_count": 2},
        ),
    )
    _leak(world)  # the run's scale-up has started
    result = world.check()
    assert result["held"] == [
        {"group": "gpu", "instance_type": "ml.p5.48xlarge", "target": 2, "idle": 0, "runs": [run_id]}
    ]
    assert world.cluster.updates == []
    assert world.alerts() == []
    # The unheld-looking group was confirmed from the table itself, with a strongly consistent read.
    assert "dynamodb:GetItem" in world.calls


def test_a_holder_the_index_still_shows_is_left_for_the_next_check(world: World) -> None:
    # The other way round: the index still shows a holder that the table says is final. A positive sighting is never
    # re-read (scaling back is the only harmful mistake), so the group waits one more interval.
    run_id = world.run(RunStatus.TRAINING)
    _stale_listing(world)
    world.runtime.registry.finish(run_id, RunStatus.FAILED)  # final without release: a teardown bug
    _leak(world)
    result = world.check()
    # The (stale) index names a holder, so the group counts as held this time; the next check sees it final.
    assert [entry["runs"] for entry in result["held"]] == [[run_id]]


def test_groups_at_idle_need_no_consistent_reads(world: World) -> None:
    world.run(RunStatus.TRAINING)
    world.calls.clear()
    world.check()
    assert "dynamodb:GetItem" not in world.calls


def test_many_runs_are_read_across_pages(world: World) -> None:
    _leak(world)
    for _ in range(30):
        world.run(RunStatus.SUCCEEDED, removed=True)
    holder = world.run(RunStatus.TRAINING)
    for _ in range(30):
        world.run(RunStatus.FAILED, removed=True)
    original = world.runtime.dynamodb.query

    def small_pages(**request: Any) -> Any:
        return original(**{**request, "Limit": 7})

    world.runtime.dynamodb.query = small_pages
    assert world.check()["held"][0]["runs"] == [holder]


# -- as deployed ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pipeline(deployment: Deployment) -> dict[str, Any]:
    return dict(Template.from_stack(deployment.pipeline).to_json()["Resources"])


def _guard_function(resources: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    (found,) = [
        (lid, r["Properties"])
        for lid, r in resources.items()
        if r["Type"] == "AWS::Lambda::Function" and r["Properties"].get("Description", "").startswith("GPU safety net")
    ]
    return found


def test_a_schedule_runs_the_guard(pipeline: dict[str, Any]) -> None:
    function_id, _ = _guard_function(pipeline)
    (rule,) = [
        r["Properties"]
        for r in pipeline.values()
        if r["Type"] == "AWS::Events::Rule" and "ScheduleExpression" in r["Properties"]
    ]
    assert rule["ScheduleExpression"] == "rate(15 minutes)"
    assert rule["State"] == "ENABLED"
    (target,) = rule["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [function_id, "Arn"]}
    assert any(
        r["Type"] == "AWS::Lambda::Permission"
        and r["Properties"]["Principal"] == "events.amazonaws.com"
        and r["Properties"]["FunctionName"] == {"Fn::GetAtt": [function_id, "Arn"]}
        for r in pipeline.values()
    )
    alarms = [r["Properties"] for r in pipeline.values() if r["Type"] == "AWS::CloudWatch::Alarm"]
    assert any(
        a["AlarmName"] == "mtrl-pipeline-capacity-guard-errors" and a["Dimensions"][0]["Value"] == {"Ref": function_id}
        for a in alarms
    )


def test_the_deployed_environment_names_the_cluster_and_the_groups_runs_scale(
    pipeline: dict[str, Any], deployment: Deployment
) -> None:
    _, function = _guard_function(pipeline)
    variables = function["Environment"]["Variables"]
    assert deployment.cluster is not None
    guarded = GuardedCluster.from_env(
        {ENV_GUARDED_CLUSTER: "mtrl-hyperpod", ENV_GUARDED_GROUPS: variables[ENV_GUARDED_GROUPS]}
    )
    training = deployment.settings.training_instance_group
    assert guarded.idle_counts == {training.name: training.idle_count}
    assert {"MTRL_TOPIC_ARN", "MTRL_RUN_TABLE", ENV_GUARDED_CLUSTER} <= set(variables)
    with pytest.raises(InternalError, match="deployment is broken"):
        GuardedCluster.from_env({ENV_GUARDED_CLUSTER: "c", ENV_GUARDED_GROUPS: "{}"})


def _statements(resources: dict[str, Any], role_id: str) -> list[dict[str, Any]]:
    return [
        statement
        for r in resources.values()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in r["Properties"]["Roles"]
        for statement in r["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_every_call_the_guard_makes_is_granted_and_resource_scoped(
    world: World, pipeline: dict[str, Any], deployment: Deployment
) -> None:
    _leak(world)
    world.run(RunStatus.TRAINING, group="another-group")  # a live run: the unheld group is confirmed by GetItem
    world.calls.clear()  # the set-up's own writes are not the guard's calls
    world.check()
    _, function = _guard_function(pipeline)
    statements = _statements(pipeline, function["Role"]["Fn::GetAtt"][0])
    granted: dict[str, list[Any]] = {}
    for statement in statements:
        assert statement["Effect"] == "Allow"
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        for action in actions:
            granted.setdefault(action, []).append(statement["Resource"])
    made = set(world.calls)
    # UpdateCluster re-states the group's ExecutionRole: SageMaker checks iam:PassRole on it.
    assert made >= {
        "sagemaker:DescribeCluster",
        "sagemaker:UpdateCluster",
        "dynamodb:Query",
        "dynamodb:GetItem",
        "sns:Publish",
    }
    for call in made | {"iam:PassRole"}:
        assert call in granted, f"{call} is made but not granted"
        assert "*" not in granted[call], f"{call} is granted on every resource"
    assert set(granted) - made - {"iam:PassRole"} <= {
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
        "kms:Decrypt",
        "kms:Encrypt",
        "kms:GenerateDataKey",
        "kms:DescribeKey",
    }, "granted beyond what the guard calls"
    (query,) = granted["dynamodb:Query"]
    assert query["Fn::Join"][1][-1] == f"/index/{RUN_TABLE_LISTING_INDEX}"  # the listing index only, no writes
    (pass_role,) = [s for s in statements if s["Action"] == "iam:PassRole"]
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}
