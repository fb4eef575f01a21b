"""The pipeline stack's template: wiring, encryption, observability, least privilege; the ASL and the
upload pattern as deployed (resolved from the template)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match, Template
from moto.events.models import EventPattern

from stacks.app_builder import Deployment
from stacks.constructs import python_function
from stacks.constructs.pipeline_events import upload_event_pattern
from stacks.constructs.pipeline_state_machine import ASL_PATH

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def template(deployment: Deployment) -> Template:
    return Template.from_stack(deployment.pipeline)


@pytest.fixture(scope="module")
def resources(template: Template) -> dict[str, Any]:
    return dict(template.to_json()["Resources"])


def _of_type(resources: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r["Properties"] for r in resources.values() if r["Type"] == kind]


def _resolve(value: Any, substitute: str) -> Any:
    """Replace intrinsic functions by a placeholder (enough to evaluate patterns and the ASL)."""
    if isinstance(value, dict):
        if len(value) == 1 and next(iter(value)).startswith(("Fn::", "Ref")):
            function, argument = next(iter(value.items()))
            if function == "Fn::Join":
                return argument[0].join(str(_resolve(part, substitute)) for part in argument[1])
            return substitute
        return {key: _resolve(item, substitute) for key, item in value.items()}
    if isinstance(value, list):
        return [_resolve(item, substitute) for item in value]
    return value


def test_state_machine_logs_everything_encrypted_with_xray(template: Template) -> None:
    template.has_resource_properties(
        "AWS::StepFunctions::StateMachine",
        {
            "StateMachineName": "mtrl-training-run",
            "StateMachineType": "STANDARD",
            "TracingConfiguration": {"Enabled": True},
            "LoggingConfiguration": {"Level": "ALL", "IncludeExecutionData": True, "Destinations": Match.any_value()},
        },
    )
    template.has_resource_properties(
        "AWS::Logs::LogGroup",
        {"LogGroupName": "/mtrl/pipeline/state-machine", "KmsKeyId": Match.any_value(), "RetentionInDays": 365},
    )


def test_every_log_group_is_encrypted(resources: dict[str, Any]) -> None:
    groups = _of_type(resources, "AWS::Logs::LogGroup")
    assert len(groups) == 10  # 7 phase functions + the capacity guard + the state machine + the sessions loop task
    assert all("KmsKeyId" in group for group in groups)


def test_deployed_definition_is_the_asl_file_and_valid(resources: dict[str, Any], tmp_path: Path) -> None:
    (machine,) = _of_type(resources, "AWS::StepFunctions::StateMachine")
    text = _resolve(machine["DefinitionString"], "unexpected")
    # CloudFormation fills ${Name} from DefinitionSubstitutions at deploy time: every placeholder has a value.
    placeholders = set(re.findall(r"\$\{(\w+)\}", text))
    assert placeholders == set(machine["DefinitionSubstitutions"])
    for name in placeholders:
        text = text.replace("${" + name + "}", f"arn:aws:lambda:us-east-1:123456789012:function:{name}")
    definition = json.loads(text)
    source = json.loads(ASL_PATH.read_text())
    assert definition["States"].keys() == source["States"].keys()
    assert definition["TimeoutSeconds"] > 7 * 24 * 3600  # backstop beyond the longest run timeout
    assert "${" not in json.dumps(definition)
    path = tmp_path / "definition.json"
    path.write_text(json.dumps(definition))
    result = subprocess.run(
        [str(REPO / "node_modules/.bin/asl-validator"), "--json-path", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_asl_retries_only_transient_errors_and_routes_failures_through_teardown() -> None:
    states = json.loads(ASL_PATH.read_text())["States"]
    for name, state in states.items():
        for retrier in state.get("Retry", []):
            assert "States.ALL" not in retrier["ErrorEquals"], name
            assert set(retrier["ErrorEquals"]) <= {
                "TransientError",
                "TeardownIncomplete",
                "Lambda.ServiceException",
                "Lambda.AWSLambdaException",
                "Lambda.SdkClientException",
                "Lambda.TooManyRequestsException",
            }, name
            assert retrier["BackoffRate"] >= 2
        for catcher in state.get("Catch", []):
            assert catcher["ResultPath"] != "$", f"{name} would lose the state"  # the error is kept beside it
            target = states[catcher["Next"]]
            assert catcher["Next"] in {"Teardown", "Report", "ReportFailed"} or target["Next"] == "Teardown", name
    assert states["Teardown"]["Next"] == "Report"
    assert states["Teardown"]["Catch"][0]["Next"] == "Report"


def test_functions_are_python_314_arm64_traced_with_one_shared_layer(resources: dict[str, Any]) -> None:
    functions = [f for f in _of_type(resources, "AWS::Lambda::Function") if f.get("Handler") == "handler.handler"]
    assert len(functions) == 8  # 7 phase functions + the capacity guard
    layers = {json.dumps(f["Layers"]) for f in functions}
    assert len(layers) == 1
    for function in functions:
        assert function["Runtime"] == "python3.14"
        assert function["Architectures"] == ["arm64"]
        assert function["TracingConfig"] == {"Mode": "Active"}
        assert "KmsKeyArn" in function
        variables = function["Environment"]["Variables"]
        assert {"MTRL_RUN_TABLE", "MTRL_DATA_BUCKET", "MTRL_PIPELINE_SETTINGS"} <= set(variables)
        assert json.loads(variables["MTRL_PIPELINE_SETTINGS"])["max_concurrent_runs"] == 1
    by_description = {f["Description"]: f["Environment"]["Variables"] for f in functions}
    assert "MTRL_STATE_MACHINE_ARN" in by_description["Upload → pipeline execution"]
    assert "MTRL_TOPIC_ARN" in by_description["Run summary and notification"]
    reaper = by_description["Teardown + report for aborted/timed-out executions"]
    assert {"MTRL_TOPIC_ARN", "MTRL_BACKEND_FUNCTION"} <= set(reaper)
    assert "MTRL_BACKEND_SETTINGS" in by_description["Backend phases via the run's adapter"]


def test_upload_rule_pattern_matches_only_training_jsonl(resources: dict[str, Any]) -> None:
    rules = {r["Name"]: r for r in _of_type(resources, "AWS::Events::Rule")}
    pattern = _resolve(rules["mtrl-dataset-uploaded"]["EventPattern"], "data-bucket")
    assert pattern == upload_event_pattern("data-bucket")
    matcher = EventPattern.load(json.dumps(pattern))

    def event(key: str, bucket: str = "data-bucket", detail_type: str = "Object Created") -> dict[str, Any]:
        return {
            "source": "aws.s3",
            "detail-type": detail_type,
            "detail": {"bucket": {"name": bucket}, "object": {"key": key, "version-id": "v1"}},
        }

    for key in ("training-data/a.jsonl", "training-data/team/b.jsonl"):
        assert matcher.matches_event(event(key)), key
    for key in (
        "training-data/a.run.json",
        "training-data/a.jsonl.gz",
        "training-data/a.JSONL",
        "eval-data/a.jsonl",
        "runs/r1/training-data/a.jsonl",
        "Training-data/a.jsonl",
    ):
        assert not matcher.matches_event(event(key)), key
    assert not matcher.matches_event(event("training-data/a.jsonl", bucket="other"))
    assert not matcher.matches_event(event("training-data/a.jsonl", detail_type="Object Deleted"))


def test_reaper_rule_watches_abnormal_ends_of_this_state_machine(template: Template) -> None:
    template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "EventPattern": {
                "source": ["aws.states"],
                "detail-type": ["Step Functions Execution Status Change"],
                "detail": {"status": ["ABORTED", "TIMED_OUT", "FAILED"], "stateMachineArn": [Match.any_value()]},
            }
        },
    )


def test_async_targets_have_dlq_and_on_failure_destination(resources: dict[str, Any], template: Template) -> None:
    # Event-driven rules only; the capacity guard's schedule makes up a missed check at its next run.
    for rule in _of_type(resources, "AWS::Events::Rule"):
        if "ScheduleExpression" in rule:
            continue
        (target,) = rule["Targets"]
        assert "Arn" in target["DeadLetterConfig"]
        assert target["RetryPolicy"]["MaximumRetryAttempts"] == 8
    template.resource_count_is("AWS::Lambda::EventInvokeConfig", 2)
    template.has_resource_properties(
        "AWS::Lambda::EventInvokeConfig",
        {"DestinationConfig": {"OnFailure": {"Destination": Match.any_value()}}, "MaximumRetryAttempts": 2},
    )
    queues = _of_type(resources, "AWS::SQS::Queue")
    assert len(queues) == 4
    assert all("KmsMasterKeyId" in queue for queue in queues)


def test_alarms_cover_failed_timed_out_aborted_trigger_errors_and_dlqs(resources: dict[str, Any]) -> None:
    alarms = _of_type(resources, "AWS::CloudWatch::Alarm")
    metrics = sorted(alarm["MetricName"] for alarm in alarms)
    assert metrics == sorted(
        ["ExecutionsFailed", "ExecutionsTimedOut", "ExecutionsAborted", "Errors", "Errors"]  # trigger, guard
        + ["ApproximateNumberOfMessagesVisible"] * 4
        + ["RunHealth"]  # the status poll's training health, one alarm per deployment
    )
    (health,) = [alarm for alarm in alarms if alarm["MetricName"] == "RunHealth"]
    assert health["Namespace"] == "mtrl/RunHealth"
    assert health["Dimensions"] == [{"Name": "Deployment", "Value": "mtrl"}]
    assert (health["Statistic"], health["Threshold"], health["ComparisonOperator"]) == (
        "Maximum",
        1,
        "GreaterThanOrEqualToThreshold",
    )
    assert health["AlarmName"] == "mtrl-pipeline-run-health"
    assert all(alarm["AlarmActions"] for alarm in alarms)
    assert all(alarm["TreatMissingData"] == "notBreaching" for alarm in alarms)


def test_topic_is_encrypted_and_the_dashboard_exists(template: Template) -> None:
    template.has_resource_properties("AWS::SNS::Topic", {"TopicName": "mtrl-runs", "KmsMasterKeyId": Match.any_value()})
    template.has_resource_properties("AWS::CloudWatch::Dashboard", {"DashboardName": "mtrl-pipeline"})


def test_alert_email_subscribes(app_factory: Any) -> None:
    _app, deployment = app_factory({"alert_email": "ml-team@example.com"})
    Template.from_stack(deployment.pipeline).has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "ml-team@example.com"}
    )


def test_least_privilege(resources: dict[str, Any]) -> None:
    # X-Ray: no resource-level permissions.
    allowed_wildcards = {
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
        "xray:GetSamplingRules",
        "xray:GetSamplingTargets",
    }
    for policy in _of_type(resources, "AWS::IAM::Policy"):
        for statement in policy["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            assert "*" not in actions
            assert not any(action.endswith(":*") for action in actions), actions
            if statement["Resource"] == "*":
                assert set(actions) <= allowed_wildcards | {
                    # Step Functions log delivery: no resource-level permissions.
                    "logs:CreateLogDelivery",
                    "logs:GetLogDelivery",
                    "logs:UpdateLogDelivery",
                    "logs:DeleteLogDelivery",
                    "logs:ListLogDeliveries",
                    "logs:PutResourcePolicy",
                    "logs:DescribeResourcePolicies",
                    "logs:DescribeLogGroups",
                    # Backend function (stacks/backends/hyperpod/permissions.py): ListTasks is conditioned on the
                    # reward cluster; the task-definition actions have no resource-level permissions.
                    "ecs:ListTasks",
                    "ecs:DescribeTaskDefinition",
                    "ecs:ListTaskDefinitions",
                    "ecs:DeregisterTaskDefinition",
                    # The status poll's training-health metric: conditioned on its one namespace.
                    "cloudwatch:PutMetricData",
                    # A serverless run's signal rows read the agent's episode metrics (no resource types, no keys).
                    "cloudwatch:GetMetricData",
                    # The sessions session role (stacks/backends/sessions.py): what SageMaker needs to place a session's
                    # network interfaces in the deployment's subnets; EC2's Describe calls have no resource level.
                    "ec2:DescribeNetworkInterfaces",
                    "ec2:DescribeVpcs",
                    "ec2:DescribeDhcpOptions",
                    "ec2:DescribeSubnets",
                    "ec2:DescribeSecurityGroups",
                    # The loop task's execution role pulls its image: ECR's token call has no resource level.
                    "ecr:GetAuthorizationToken",
                }, actions
                if "ecs:ListTasks" in actions:
                    assert "ecs:cluster" in statement["Condition"]["ArnEquals"]
                if "cloudwatch:PutMetricData" in actions:
                    assert statement["Condition"] == {"StringEquals": {"cloudwatch:namespace": "mtrl/RunHealth"}}
    for role in _of_type(resources, "AWS::IAM::Role"):
        assert "ManagedPolicyArns" not in role


def test_functions_can_touch_only_their_prefixes(resources: dict[str, Any]) -> None:
    writes = []
    for policy in _of_type(resources, "AWS::IAM::Policy"):
        for statement in policy["PolicyDocument"]["Statement"]:
            if "s3:PutObject" in json.dumps(statement["Action"]):
                writes.append(json.dumps(statement["Resource"]))
    assert writes
    assert all("/runs/*" in resource for resource in writes)  # never training-data/


def test_function_code_is_staged_without_docker(tmp_path: Path) -> None:
    staged = python_function.stage_function_code("validate")
    assert (staged / "handler.py").is_file()
    assert (staged / "mtrl" / "runs" / "pipeline.py").is_file()
    assert (staged / "environments" / "wordle" / "__init__.py").is_file()
    assert not list(staged.rglob("__pycache__"))
    assert python_function.stage_function_code("validate") == staged  # content-addressed
    with pytest.raises(FileNotFoundError, match="one folder per function"):
        python_function.stage_function_code("no_such_function")


def test_synth_without_the_layer_says_run_make_setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(python_function, "LAYER_DIR", tmp_path / "missing")
    stack = cdk.Stack(cdk.App(), "Scratch")
    with pytest.raises(python_function.MissingBuildError, match="run `make setup`"):
        python_function.dependencies_layer(stack)


def test_cfn_lint_is_clean(synthesized: Any, deployment: Deployment) -> None:
    from tests.unit.stacks.template_tools import cfn_lint

    _deployment, assembly = synthesized
    path = Path(assembly.directory) / f"{deployment.pipeline.stack_name}.template.json"
    matches = cfn_lint(path.read_text())
    assert [str(match) for match in matches] == []
