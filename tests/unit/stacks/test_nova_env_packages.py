"""Issue 10 defect 7: every environment a hyperpod run may use is packaged at synth (mtrl.envs.nova_package) and
deployed to its content-addressed key under nova-envs/ of the data bucket, and the backend settings carry exactly
those URIs (the runner's CustomEnvironment(env_id, s3_uri=…))."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Match, Template

from mtrl.envs.nova_package import build_package
from mtrl.envs.registry import list_environments
from mtrl.settings import load_settings
from stacks.app_builder import Deployment
from stacks.backends_stack import enabled_environments
from stacks.constructs.nova_env_packages import NovaEnvironmentPackages

BUILTINS = [env_id for env_id, source in list_environments() if source == "builtin"]


# Only a deployment that deploys the hyperpod backend (Nova Forge configured) packages the environments for it.
@pytest.fixture(scope="module")
def backends_template(nova_forge_synth: tuple[Deployment, Any]) -> Template:
    backends = nova_forge_synth[0].backends
    assert backends is not None
    return Template.from_stack(backends)


def _deployment_resource(template: Template) -> dict[str, Any]:
    (resource,) = template.find_resources("Custom::CDKBucketDeployment").values()
    return resource["Properties"]  # type: ignore[no-any-return]


def test_the_packages_are_deployed_under_nova_envs_without_pruning(backends_template: Template) -> None:
    backends_template.has_resource_properties(
        "Custom::CDKBucketDeployment",
        {
            "DestinationBucketKeyPrefix": "nova-envs/",
            # prune=False: a run in progress may still point at the package an earlier deployment uploaded.
            "Prune": False,
            "RetainOnDelete": True,
            "DestinationBucketName": Match.object_like(
                {"Fn::Select": [0, Match.object_like({"Fn::Split": ["/", Match.any_value()]})]}
            ),
            "SourceObjectKeys": [Match.string_like_regexp(r"^[0-9a-f]{64}\.zip$")],
        },
    )
    assert "mtrl-data-bucket-arn" in json.dumps(_deployment_resource(backends_template)["DestinationBucketName"])


def test_the_asset_holds_exactly_the_key_and_bytes_each_package_is_addressed_by(
    nova_forge_synth: tuple[Deployment, Any], backends_template: Template
) -> None:
    _, assembly = nova_forge_synth
    (zip_name,) = _deployment_resource(backends_template)["SourceObjectKeys"]
    staged = Path(assembly.directory) / f"asset.{zip_name.removesuffix('.zip')}"
    files = {str(p.relative_to(staged)): p.read_bytes() for p in staged.rglob("*") if p.is_file()}
    expected = {env_id: build_package(env_id) for env_id in BUILTINS}
    assert {f"nova-envs/{name}" for name in files} == {package.key for package in expected.values()}
    for package in expected.values():
        assert files[package.key.removeprefix("nova-envs/")] == package.archive


def test_the_backend_settings_carry_each_environments_package_uri(nova_forge_synth: tuple[Deployment, Any]) -> None:
    (function,) = [
        f
        for f in Template.from_stack(nova_forge_synth[0].pipeline).find_resources("AWS::Lambda::Function").values()
        if "MTRL_BACKEND_SETTINGS" in f["Properties"]["Environment"]["Variables"]
    ]
    rendered = json.dumps(function["Properties"]["Environment"]["Variables"]["MTRL_BACKEND_SETTINGS"])
    for env_id in BUILTINS:
        # "<env_id>=s3://" + the data bucket's name + "/nova-envs/<env_id>/<sha256>.tar.gz", the very key deployed.
        assert f'\\"{env_id}=s3://' in rendered
        assert f"/{build_package(env_id).key}" in rendered


def test_the_deployment_handler_writes_nova_envs_only(backends_template: Template) -> None:
    handler_roles = [
        logical_id
        for logical_id, role in backends_template.find_resources("AWS::IAM::Role").items()
        if logical_id.startswith("CustomCDKBucketDeployment")
    ]
    (role_id,) = handler_roles
    (policy,) = [
        p
        for p in backends_template.find_resources("AWS::IAM::Policy").values()
        if p["Properties"]["Roles"] == [{"Ref": role_id}]
    ]
    data_bucket_objects = []
    for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        for resource in resources:
            if "mtrl-data-bucket-arn" in json.dumps(resource) and "Fn::Join" in resource:
                data_bucket_objects.append(resource["Fn::Join"][1][-1])
    # CDK grants the whole destination bucket; the data bucket holds datasets and run outputs, so only nova-envs/.
    assert data_bucket_objects == ["/nova-envs/*"]


def test_the_environment_list_comes_from_the_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A built-in added later (another branch adds a third) is packaged without touching the stack.
    for env_id in ("alpha", "ask_to_code", "wordle"):
        (tmp_path / "environments" / env_id).mkdir(parents=True)
        (tmp_path / "environments" / env_id / "__init__.py").write_text("")
    monkeypatch.setenv("MTRL_PROJECT_ROOT", str(tmp_path))
    settings = load_settings({}, environ={})
    assert enabled_environments(settings) == [("alpha", False), ("ask_to_code", False), ("wordle", False)]
    custom = load_settings({"use_custom_env": "true", "custom_env_id": "template"}, environ={})
    assert enabled_environments(custom)[-1] == ("template", True)


def test_a_custom_environment_is_packaged_from_custom_environments(tmp_path: Path) -> None:
    app = cdk.App(outdir=str(tmp_path / "out"), builtin_cloud_formation_validation=False)  # as make_app
    stack = cdk.Stack(app, "Packages", env=cdk.Environment(account="123456789012", region="us-east-1"))
    key = kms.Key(stack, "Key")
    bucket = s3.Bucket(stack, "Data", encryption=s3.BucketEncryption.KMS, encryption_key=key)
    packages = NovaEnvironmentPackages(
        stack,
        "Packages",
        environments=[("wordle", False), ("template", True)],
        data_bucket=bucket,
        staging_dir=tmp_path / "staging",
    )
    assert packages.packages["template"] == build_package("template", custom=True)
    staged = {str(p.relative_to(tmp_path / "staging")) for p in (tmp_path / "staging").rglob("*.tar.gz")}
    assert {name.split("/", 1)[1] for name in staged} == {
        packages.packages[env_id].key.removeprefix("nova-envs/") for env_id in ("wordle", "template")
    }
    template = Template.from_stack(stack)
    template.has_resource_properties("Custom::CDKBucketDeployment", {"DestinationBucketKeyPrefix": "nova-envs/"})
    # The handler encrypts with the bucket's key (SSE-KMS default encryption, bucket key enabled).
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Action": Match.array_with(["kms:GenerateDataKey*"]),
                                "Resource": {"Fn::GetAtt": [Match.string_like_regexp("^Key"), "Arn"]},
                            }
                        )
                    ]
                )
            }
        },
    )


def test_no_environment_is_refused() -> None:
    stack = cdk.Stack(cdk.App(), "Empty")
    with pytest.raises(ValueError, match="no environments to package"):
        NovaEnvironmentPackages(stack, "Packages", environments=[], data_bucket=s3.Bucket(stack, "Data"))


def test_only_the_rft_role_reads_the_packages_and_only_with_get_object(backends_template: Template) -> None:
    # The SDK's environment tasks run as the RFT role and `aws s3 cp` the package (the contract test shows the
    # command); the runner's own setup/submit never read it.
    backends_template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        {
                            "Sid": "ReadEnvironmentPackages",
                            "Effect": "Allow",
                            "Action": "s3:GetObject",
                            "Resource": {"Fn::Join": ["", [Match.any_value(), "/nova-envs/*"]]},
                        }
                    ]
                )
            },
            "Roles": [{"Ref": Match.string_like_regexp("^RolesRftRole")}],
        },
    )
    readers = [
        json.dumps(policy["Properties"].get("Roles"))
        for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
        for policy in backends_template.find_resources(kind).values()
        if "nova-envs" in json.dumps(policy["Properties"]["PolicyDocument"])
    ]
    # The RFT role and the deployment handler, nobody else (the runner role, which also holds the managed
    # <rft_role>Policy, never reads the packages).
    assert len(readers) == 2
    assert sum("RolesRftRole" in roles for roles in readers) == 1
    assert sum("CustomCDKBucketDeployment" in roles for roles in readers) == 1
