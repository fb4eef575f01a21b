"""The in-account builders (stacks/constructs/image_builder.py) as synthesized: the buildspecs parsed back from the
template (they build the right Dockerfile, push, export the digest; the model job runs the tested module and writes
under models/), the projects' least-privilege roles, the repository, the log group; and the synth's warning about
what the default backend still lacks."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from aws_cdk.assertions import Annotations, Match, Template

from mtrl.backends.verl.supply import IMAGE_DOCKERFILE
from mtrl.client.builders import IMAGE_URI_VARIABLE, MODEL_COMMIT_VARIABLE
from stacks.app_builder import Deployment


@pytest.fixture(scope="module")
def backends(deployment: Deployment) -> Template:
    assert deployment.backends is not None
    return Template.from_stack(deployment.backends)


def _project(template: Template, name: str) -> dict[str, Any]:
    (project,) = template.find_resources("AWS::CodeBuild::Project", {"Properties": {"Name": name}}).values()
    return dict(project["Properties"])


def _buildspec(template: Template, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(_project(template, name)["Source"]["BuildSpec"])
    return spec


def _commands(spec: dict[str, Any]) -> list[str]:
    return [command for phase in spec["phases"].values() for command in phase.get("commands", [])]


def test_the_image_buildspec_builds_the_trainer_dockerfile_pushes_and_exports_the_digest(backends: Template) -> None:
    spec = _buildspec(backends, "mtrl-verl-trainer-image")
    commands = _commands(spec)
    (build,) = [c for c in commands if c.startswith("docker build")]
    assert f"--file {IMAGE_DOCKERFILE} " in build
    assert build.endswith(" .")
    assert any(c.startswith('docker push "$REPOSITORY_URI:$IMAGE_TAG"') for c in commands)
    assert spec["env"]["exported-variables"] == [IMAGE_URI_VARIABLE]
    (digest,) = [c for c in commands if c.startswith(f"{IMAGE_URI_VARIABLE}=")]
    assert "RepoDigests" in digest  # the registry's digest of what was pushed, not a local image id
    checks = [c for c in commands if c.startswith("[[")]
    assert checks
    assert "sha256:[0-9a-f]{64}" in checks[0]
    # the push happens in the build phase: a failed build never reaches it (post_build runs after failures)
    assert "post_build" not in spec["phases"]
    assert any("set -o pipefail" in c for c in spec["phases"]["pre_build"]["commands"])


def test_the_image_project_is_privileged_encrypted_and_logs_to_its_group(backends: Template) -> None:
    project = _project(backends, "mtrl-verl-trainer-image")
    assert project["Environment"]["PrivilegedMode"] is True
    assert project["Environment"]["Image"] == "aws/codebuild/standard:7.0"
    assert project["EncryptionKey"]  # the data key (cdk-nag CB4)
    assert project["Source"]["Type"] == "NO_SOURCE"  # each build names its own archive
    assert project["LogsConfig"]["CloudWatchLogs"]["Status"] == "ENABLED"
    backends.has_resource_properties(
        "AWS::Logs::LogGroup", {"LogGroupName": "/mtrl/builds", "RetentionInDays": Match.any_value()}
    )
    backends.has_resource_properties(
        "AWS::ECR::Repository",
        {
            "RepositoryName": "mtrl-verl-trainer",
            "ImageScanningConfiguration": {"ScanOnPush": True},
            "ImageTagMutability": "IMMUTABLE",
            "EmptyOnDelete": True,  # deleted with the stack: a retained one would collide with the next deploy's
        },
    )


def test_the_model_buildspec_runs_the_hub_copy_module_and_writes_under_models(backends: Template) -> None:
    spec = _buildspec(backends, "mtrl-model-import")
    commands = _commands(spec)
    assert any(c.startswith("python3 -m mtrl.backends.verl.hub_copy ") for c in commands)
    (copy,) = [c for c in commands if c.startswith("aws s3 cp")]
    assert re.search(r'"s3://\$DATA_BUCKET/models/\$MODEL_ID/\$\{?MODEL_COMMIT\}?/"', copy)
    # every variable the operator's input reaches is quoted: one shell word whatever it holds
    for command in commands:
        unquoted = re.sub(r'"[^"]*"', "", command)
        assert "$MODEL_ID" not in unquoted, command
        assert "$MODEL_REVISION" not in unquoted, command
    assert spec["env"]["exported-variables"] == [MODEL_COMMIT_VARIABLE]
    assert _project(backends, "mtrl-model-import")["Environment"]["PrivilegedMode"] is False


def _statements(template: Template, path_part: str) -> list[dict[str, Any]]:
    policies = template.find_resources("AWS::IAM::Policy")
    return [
        statement
        for logical_id, policy in policies.items()
        if path_part in logical_id
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def _actions(statement: dict[str, Any]) -> list[str]:
    actions = statement["Action"]
    return actions if isinstance(actions, list) else [actions]


def test_the_builders_roles_touch_only_their_own_prefixes_and_repository(backends: Template) -> None:
    image = _statements(backends, "ImageBuilderImageProject")
    model = _statements(backends, "ImageBuilderModelProject")
    for statements in (image, model):
        s3 = [s for s in statements if any(a.startswith("s3:") for a in _actions(s))]
        assert s3, statements
        for statement in s3:
            assert "s3:List*" not in _actions(statement)
            assert "s3:ListBucket" not in _actions(statement)
    writes = [s for s in model if "s3:PutObject" in _actions(s)]
    assert [s["Resource"]["Fn::Join"][1][-1] for s in writes] == ["/models/*"]
    assert not any("s3:PutObject" in _actions(s) for s in image)
    pushes = [s for s in image if "ecr:PutImage" in _actions(s)]
    assert pushes
    assert all("ImageBuilderRepository" in s["Resource"]["Fn::GetAtt"][0] for s in pushes)
    assert not any(a.startswith("ecr:") for s in model for a in _actions(s))


def test_the_synth_warns_what_the_default_backend_lacks(deployment: Deployment) -> None:
    assert deployment.backends is not None
    warnings = Annotations.from_stack(deployment.backends).find_warning("*", Match.string_like_regexp("cannot run yet"))
    (warning,) = warnings
    text = str(warning.entry.data)
    assert "`mtrl image build verl`" in text
    assert "`mtrl model import <hub-id>[@revision]`" in text
