"""The in-account builders (stacks/constructs/image_builder.py) as synthesized: the buildspecs parsed back from the
template (they build the right Dockerfile, push, export the digest; the model job runs the tested module and writes
under models/), the projects' least-privilege roles, the repository, the log group; and the synth's warning about
what the default backend still lacks."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from aws_cdk.assertions import Annotations, Match, Template
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtrl.backends.verl.supply import IMAGE_DOCKERFILE
from mtrl.client.builders import IMAGE_URI_VARIABLE, MODEL_COMMIT_VARIABLE
from mtrl.contracts.hub import check_model_id
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
    copy, sums = [c for c in commands if c.startswith("aws s3 cp")]
    assert re.search(r'"s3://\$DATA_BUCKET/models/\$MODEL_ID/\$\{?MODEL_COMMIT\}?/"', copy)
    assert "--exclude SHA256SUMS" in copy
    assert sums.endswith('/SHA256SUMS"')
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


_STUB_PYTHON = """#!/bin/bash
# the import module: writes $STUB_COMMIT as the resolved commit and one file of the copy
while [[ $# -gt 0 ]]; do case "$1" in --out) out="$2"; shift;; --commit-file) commit="$2"; shift;; esac; shift; done
mkdir -p "$out" && echo '{}' > "$out/config.json" && printf '%s' "$STUB_COMMIT" > "$commit"
"""
_STUB_AWS = """#!/bin/bash
# one file per call, numbered in call order, its arguments NUL-separated
calls=("$AWS_CALLS"/*)
[[ -e "${calls[0]}" ]] || calls=()
printf '%s\\0' "$@" > "$AWS_CALLS/$(printf '%04d' "${#calls[@]}")"
"""


def _run_model_job(spec: dict[str, Any], tmp: Path, model_id: str, commit: str) -> list[list[str]]:
    """The build phase's commands in bash as CodeBuild runs them (one shell, the phase stops at the first command that
    fails), with python3 and aws stubbed: the aws calls it made."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("python3", _STUB_PYTHON), ("aws", _STUB_AWS)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    calls = tmp / "aws-calls"
    calls.mkdir(exist_ok=True)
    script = "\n".join(f"{command} || exit 1" for command in spec["phases"]["build"]["commands"])
    environment = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "LANG": "C.UTF-8",  # the look-alikes below are letters there: the check must not read them as [A-Za-z]
        "CODEBUILD_SRC_DIR": str(tmp / "src"),
        "DATA_BUCKET": "data-bucket",
        "MODEL_ID": model_id,
        "MODEL_REVISION": "main",
        "STUB_COMMIT": commit,
        "AWS_CALLS": str(calls),
    }
    (tmp / "src").mkdir(exist_ok=True)
    subprocess.run(["/bin/bash", "-c", script], env=environment, capture_output=True, check=False, timeout=30)
    made = [call.read_bytes().decode().split("\0")[:-1] for call in sorted(calls.iterdir())]
    for call in calls.iterdir():
        call.unlink()
    return made


HOSTILE_IDS = [
    "Qwen/x\n",
    "Qwen/x\nother",
    "../x/y",
    "Qwen/../../runs",
    "Qwen/x/../../runs",
    "a/b; id",
    "a/$(id)",
    "a/`id`",
    "-a/b",
    "a/b c",
    "Qwen/\u0445",  # Cyrillic look-alike of x
    "Qwen\uff0fx",  # fullwidth solidus
    "a/" + "b" * 97,
    "",
]
HOSTILE_COMMITS = ["", "main", "A" * 40, "a" * 39, "a" * 41, "a" * 40 + "\nx", "../../runs/x", "a" * 40 + "/.."]


@pytest.mark.parametrize(
    ("model_id", "commit"),
    [(model_id, "a" * 40) for model_id in HOSTILE_IDS] + [("Qwen/x", commit) for commit in HOSTILE_COMMITS],
)
def test_the_model_job_writes_no_key_from_a_hostile_id_or_commit(
    backends: Template, tmp_path: Path, model_id: str, commit: str
) -> None:
    """Whoever may start the build may set MODEL_ID to anything, and the commit is what the module wrote: the shell
    itself refuses either before it becomes an S3 key (before, only the Python module stood in the way)."""
    assert _run_model_job(_buildspec(backends, "mtrl-model-import"), tmp_path, model_id, commit) == []


def test_the_model_job_copies_a_valid_import_to_its_key_sha256sums_last(backends: Template, tmp_path: Path) -> None:
    """Before, one recursive copy sent SHA256SUMS in any order: a job stopped midway could leave a list whose files
    were not all there."""
    spec = _buildspec(backends, "mtrl-model-import")
    files, sums = _run_model_job(spec, tmp_path, "Qwen/Qwen2.5-0.5B-Instruct", "a" * 40)
    prefix = f"s3://data-bucket/models/Qwen/Qwen2.5-0.5B-Instruct/{'a' * 40}/"
    assert files[:3] == ["s3", "cp", "--recursive"]
    assert files[files.index("--exclude") + 1] == "SHA256SUMS"
    assert files[-1] == prefix
    assert sums[-2:] == [str(tmp_path / "src" / "model-copy" / "SHA256SUMS"), prefix + "SHA256SUMS"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=24))
def test_every_id_the_job_copies_is_a_hub_id(backends: Template, tmp_path: Path, model_id: str) -> None:
    for call in _run_model_job(_buildspec(backends, "mtrl-model-import"), tmp_path, model_id, "a" * 40):
        assert call[-1].startswith(f"s3://data-bucket/models/{check_model_id(model_id)}/{'a' * 40}/")
