"""Deploy a synthesized CDK app (``cdk.out``) into the emulator the way ``cdk deploy`` would.

``cdk deploy`` itself needs a bootstrapped account and talks to the real endpoints, so this does its three
jobs directly with boto3: fake the bootstrap (SSM version parameter + assets bucket), publish the file
assets (directories zipped, files as they are) to the bucket and key the templates expect, and create each
stack in dependency order with CloudFormation. Container image assets cannot be published offline.
"""

from __future__ import annotations

import io
import json
import os
import time
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from mtrl.emulator.process import ACCOUNT_ID, REGION

BOOTSTRAP_QUALIFIER = "hnb659fds"
BOOTSTRAP_VERSION = "30"  # newer than any version CDK's CheckBootstrapVersion rule requires
CAPABILITIES = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]
_TEMPLATE_BODY_LIMIT = 51_200  # CloudFormation's limit for an inline TemplateBody


class DeployError(RuntimeError):
    """A stack or asset could not be deployed (the message lists the failed resources and reasons)."""


@dataclass
class StackDeployment:
    stack_name: str
    status: str
    seconds: float
    outputs: dict[str, str] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)  # "LogicalId (Type): reason" of failed resources
    assets_published: int = 0

    @property
    def ok(self) -> bool:
        return self.status in {"CREATE_COMPLETE", "UPDATE_COMPLETE"}


def assets_bucket_name(account: str = ACCOUNT_ID, region: str = REGION) -> str:
    return f"cdk-{BOOTSTRAP_QUALIFIER}-assets-{account}-{region}"


def fake_bootstrap(session: Any, *, account: str = ACCOUNT_ID, region: str = REGION) -> str:
    """What ``cdk bootstrap`` leaves behind that a synthesized template relies on; returns the assets bucket."""
    ssm = session.client("ssm")
    ssm.put_parameter(
        Name=f"/cdk-bootstrap/{BOOTSTRAP_QUALIFIER}/version", Value=BOOTSTRAP_VERSION, Type="String", Overwrite=True
    )
    bucket = assets_bucket_name(account, region)
    s3 = session.client("s3")
    existing = {entry["Name"] for entry in s3.list_buckets().get("Buckets", [])}
    if bucket not in existing:
        s3.create_bucket(Bucket=bucket)
    return bucket


def _substitute(text: str, *, account: str, region: str) -> str:
    return (
        text.replace("${AWS::AccountId}", account).replace("${AWS::Region}", region).replace("${AWS::Partition}", "aws")
    )


def zip_directory(directory: Path) -> bytes:
    """A deterministic zip of ``directory`` (sorted entries, fixed timestamps, modes kept), as CDK packages it."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(directory.rglob("*")):
            if path.is_dir():
                continue
            info = zipfile.ZipInfo(path.relative_to(directory).as_posix(), date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (path.stat().st_mode & 0o777) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def publish_assets(
    session: Any, cdk_out: Path, stack_artifact: str, *, account: str = ACCOUNT_ID, region: str = REGION
) -> int:
    """Upload every file asset of one stack; returns how many were published. Image assets are an error."""
    manifest_path = cdk_out / f"{stack_artifact}.assets.json"
    if not manifest_path.is_file():
        return 0
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    images = manifest.get("dockerImages") or {}
    if images:
        names = ", ".join(sorted(entry.get("displayName", key) for key, entry in images.items()))
        raise DeployError(
            f"stack artifact '{stack_artifact}' has container image assets ({names}); the emulator has no "
            "registry to publish them to — synthesize the emulator variant (-c emulator=true) instead"
        )
    s3 = session.client("s3")
    published = 0
    for asset_hash, entry in (manifest.get("files") or {}).items():
        source = entry["source"]
        if "executable" in source:
            raise DeployError(f"asset {asset_hash} is built by a command; only path assets can be published offline")
        path = cdk_out / source["path"]
        if source.get("packaging") == "zip" or path.is_dir():
            body = zip_directory(path) if path.is_dir() else path.read_bytes()
        else:
            body = path.read_bytes()
        for destination in entry["destinations"].values():
            bucket = _substitute(destination["bucketName"], account=account, region=region)
            key = _substitute(destination["objectKey"], account=account, region=region)
            s3.put_object(Bucket=bucket, Key=key, Body=body)
            published += 1
    return published


def stack_order(cdk_out: Path, only: Iterable[str] | None = None) -> list[tuple[str, str]]:
    """``(artifact id, stack name)`` of the app's stacks, dependencies first (``only`` adds its dependencies)."""
    manifest = json.loads((cdk_out / "manifest.json").read_text(encoding="utf-8"))
    artifacts: Mapping[str, Any] = manifest["artifacts"]
    stacks = {key: value for key, value in artifacts.items() if value.get("type") == "aws:cloudformation:stack"}
    wanted = set(stacks) if only is None else set(only)
    unknown = wanted - set(stacks)
    if unknown:
        raise DeployError(f"no stack artifact named {sorted(unknown)} in {cdk_out} (found: {sorted(stacks)})")
    ordered: list[tuple[str, str]] = []
    visiting: set[str] = set()

    def visit(artifact: str) -> None:
        if any(artifact == done for done, _ in ordered):
            return
        if artifact in visiting:
            raise DeployError(f"stack dependency cycle through '{artifact}'")
        visiting.add(artifact)
        for dependency in stacks[artifact].get("dependencies", []):
            if dependency in stacks:
                visit(dependency)
        visiting.discard(artifact)
        ordered.append((artifact, stacks[artifact].get("properties", {}).get("stackName", artifact)))

    for artifact in sorted(wanted):
        visit(artifact)
    return ordered


def _failures(cloudformation: Any, stack_name: str) -> list[str]:
    events = cloudformation.describe_stack_events(StackName=stack_name).get("StackEvents", [])
    found = []
    for event in events:
        if str(event.get("ResourceStatus", "")).endswith("FAILED") and event.get("LogicalResourceId") != stack_name:
            found.append(
                f"{event.get('LogicalResourceId')} ({event.get('ResourceType')}): "
                f"{event.get('ResourceStatusReason', 'no reason given')}"
            )
    return list(dict.fromkeys(reversed(found)))


def deploy_stack(
    session: Any,
    cdk_out: Path,
    stack_artifact: str,
    *,
    stack_name: str | None = None,
    timeout_s: float = 300.0,
    account: str = ACCOUNT_ID,
    region: str = REGION,
) -> StackDeployment:
    """Publish one stack's assets, then CreateStack (or UpdateStack) and wait for a terminal status."""
    name = stack_name or stack_artifact
    started = time.monotonic()
    published = publish_assets(session, cdk_out, stack_artifact, account=account, region=region)
    template_path = cdk_out / f"{stack_artifact}.template.json"
    body = template_path.read_text(encoding="utf-8")
    cloudformation = session.client("cloudformation")
    request: dict[str, Any] = {"StackName": name, "Capabilities": CAPABILITIES}
    if len(body.encode("utf-8")) <= _TEMPLATE_BODY_LIMIT:
        request["TemplateBody"] = body
    else:
        key = f"templates/{name}.template.json"
        session.client("s3").put_object(Bucket=assets_bucket_name(account, region), Key=key, Body=body.encode())
        endpoint = session.client("s3").meta.endpoint_url
        request["TemplateURL"] = f"{endpoint}/{assets_bucket_name(account, region)}/{key}"
    existing = _stack_status(cloudformation, name)
    try:
        if existing is None or existing == "ROLLBACK_COMPLETE":
            if existing == "ROLLBACK_COMPLETE":
                cloudformation.delete_stack(StackName=name)
                _wait(cloudformation, name, timeout_s=timeout_s)
            cloudformation.create_stack(**request)
        else:
            cloudformation.update_stack(**request)
    except Exception as error:  # a template the emulator rejects up front (e.g. unsupported resource types)
        if "ValidationError" not in str(error):
            raise
        if "No updates are to be performed" in str(error):
            return StackDeployment(
                stack_name=name,
                status=existing or "UPDATE_COMPLETE",
                seconds=time.monotonic() - started,
                outputs=_outputs(cloudformation, name),
                assets_published=published,
            )
        return StackDeployment(
            stack_name=name,
            status="REJECTED",
            seconds=time.monotonic() - started,
            failures=[str(error).split(": ", 1)[-1]],
            assets_published=published,
        )
    status = _wait(cloudformation, name, timeout_s=timeout_s)
    deployment = StackDeployment(
        stack_name=name, status=status, seconds=time.monotonic() - started, assets_published=published
    )
    if deployment.ok:
        deployment.outputs = _outputs(cloudformation, name)
    else:
        deployment.failures = _failures(cloudformation, name)
    return deployment


def _outputs(cloudformation: Any, name: str) -> dict[str, str]:
    described = cloudformation.describe_stacks(StackName=name)["Stacks"][0]
    return {out["OutputKey"]: out["OutputValue"] for out in described.get("Outputs", [])}


def _stack_status(cloudformation: Any, name: str) -> str | None:
    try:
        stacks = cloudformation.describe_stacks(StackName=name).get("Stacks", [])
    except Exception as error:  # botocore ClientError "does not exist": botocore is not a typed dependency
        if "does not exist" in str(error):
            return None
        raise
    return str(stacks[0]["StackStatus"]) if stacks else None


def _wait(cloudformation: Any, name: str, *, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        status = _stack_status(cloudformation, name) or "DELETE_COMPLETE"
        if not status.endswith("_IN_PROGRESS"):
            return status
        if time.monotonic() > deadline:
            raise DeployError(f"stack '{name}' still {status} after {timeout_s:.0f} s")
        time.sleep(0.2)


def deploy_app(
    session: Any, cdk_out: Path, *, stacks: Iterable[str] | None = None, stop_on_failure: bool = True
) -> list[StackDeployment]:
    """Fake the bootstrap, then deploy the app's stacks (or ``stacks`` and their dependencies) in order."""
    fake_bootstrap(session)
    results: list[StackDeployment] = []
    for artifact, name in stack_order(cdk_out, stacks):
        result = deploy_stack(session, cdk_out, artifact, stack_name=name)
        results.append(result)
        if not result.ok and stop_on_failure:
            break
    return results


def session_for(endpoint_kwargs: Mapping[str, Any]) -> Any:
    """A boto3 session whose clients default to the emulator (``endpoint_url`` is applied per client)."""

    class _EmulatorSession:
        def __init__(self) -> None:
            self._session = boto3.session.Session(
                aws_access_key_id=endpoint_kwargs["aws_access_key_id"],
                aws_secret_access_key=endpoint_kwargs["aws_secret_access_key"],
                region_name=endpoint_kwargs["region_name"],
            )

        def client(self, service: str, **kwargs: Any) -> Any:
            return self._session.client(service, endpoint_url=endpoint_kwargs["endpoint_url"], **kwargs)

    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    return _EmulatorSession()
