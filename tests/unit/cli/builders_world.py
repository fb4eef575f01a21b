"""A deployed mtrl's in-account builders in moto, doing what their buildspecs do.

moto holds the CodeBuild projects and answers StartBuild/BatchGetBuilds (every build SUCCEEDED), but runs nothing. The
``FakeBuilder`` does the buildspec's work when a build starts, from what the CLI really uploaded and passed:

- the trainer image: it opens the uploaded source archive (the build's ``sourceLocationOverride`` at its
  ``sourceVersion``), checks it holds the Dockerfile and everything it copies, "pushes" an image manifest to the
  deployment's ECR repository and exports ``IMAGE_URI`` as ``docker inspect`` gives it (``<repository>@<digest>``);
- the model import: it runs ``mtrl.backends.verl.hub_copy`` (the job's module) against a fake Hub, then copies the
  directory to ``models/<id>/<commit>/`` as the buildspec's two ``aws s3 cp`` do (SHA256SUMS last), and exports
  ``MODEL_COMMIT``.
"""

from __future__ import annotations

import io
import json
import urllib.error
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import IO, Any

import boto3
import pytest
from moto.codebuild.models import CodeBuildBackend
from moto.codebuild.responses import CodeBuildResponse

from mtrl.backends.verl import hub_copy
from mtrl.backends.verl.supply import image_project_name, image_repository_name, model_project_name
from mtrl.client.builders import dockerfile_sources
from tests.aws_fixtures import REGION

REPO = Path(__file__).resolve().parents[3]
PREFIX = "mtrl"
COMMIT = "a" * 40
HUB_FILES = {
    "config.json": b'{"model_type": "qwen2"}',
    "model.safetensors": b"\x00weights",
    "sub/tokenizer.json": b"{}",
}
_ROLE = "arn:aws:iam::123456789012:role/mtrl-builder"
Effect = Callable[[dict[str, Any]], dict[str, str]]


class FakeHub:
    """The Hub's revision API and file downloads for one model (``hub_copy``'s opener)."""

    def __init__(self, model_id: str, files: dict[str, bytes], commit: str = COMMIT) -> None:
        self.model_id, self.files, self.commit = model_id, files, commit
        self.urls: list[str] = []

    def __call__(self, url: str) -> IO[bytes]:
        self.urls.append(url)
        base = f"{hub_copy.HUB}/"
        if url.startswith(f"{base}api/models/{self.model_id}/revision/"):
            siblings = [{"rfilename": name} for name in self.files]
            return io.BytesIO(json.dumps({"sha": self.commit, "siblings": siblings}).encode())
        prefix = f"{base}{self.model_id}/resolve/{self.commit}/"
        if url.startswith(prefix) and url.removeprefix(prefix) in self.files:
            return io.BytesIO(self.files[url.removeprefix(prefix)])
        raise urllib.error.HTTPError(url, 404, "not found", Message(), None)


@dataclass
class FakeBuilder:
    session: boto3.Session
    hub: FakeHub
    tmp: Path
    requests: list[dict[str, Any]] = field(default_factory=list)
    failing: set[str] = field(default_factory=set)  # projects whose builds end FAILED
    effects: dict[str, Effect] = field(default_factory=dict)

    def archive(self, request: dict[str, Any]) -> zipfile.ZipFile:
        bucket, _, key = request["sourceLocationOverride"].partition("/")
        body = self.session.client("s3").get_object(Bucket=bucket, Key=key, VersionId=request["sourceVersion"])
        return zipfile.ZipFile(io.BytesIO(body["Body"].read()))

    def build_image(self, request: dict[str, Any]) -> dict[str, str]:
        names = set(self.archive(request).namelist())
        for source in dockerfile_sources(REPO):
            assert source in names or any(name.startswith(source) for name in names), source
        ecr = self.session.client("ecr")
        repository = image_repository_name(PREFIX)
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "layers": []}
        pushed = ecr.put_image(
            repositoryName=repository, imageManifest=json.dumps(manifest), imageTag=f"build-{len(self.requests)}"
        )["image"]
        uri = ecr.describe_repositories(repositoryNames=[repository])["repositories"][0]["repositoryUri"]
        return {"IMAGE_URI": f"{uri}@{pushed['imageId']['imageDigest']}"}

    def import_model(self, request: dict[str, Any]) -> dict[str, str]:
        assert "mtrl/backends/verl/hub_copy.py" in self.archive(request).namelist()
        variables = {item["name"]: item["value"] for item in request["environmentVariablesOverride"]}
        out = self.tmp / f"model-copy-{len(self.requests)}"
        commit, _ = hub_copy.copy_revision(variables["MODEL_ID"], variables["MODEL_REVISION"], out, opener=self.hub)
        s3 = self.session.client("s3")
        bucket = request["sourceLocationOverride"].partition("/")[0]
        # as the buildspec copies: every file, then SHA256SUMS alone
        for path in sorted((p for p in out.rglob("*") if p.is_file()), key=lambda p: p == out / "SHA256SUMS"):
            key = f"models/{variables['MODEL_ID']}/{commit}/{path.relative_to(out).as_posix()}"
            s3.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
        return {"MODEL_COMMIT": commit}


def install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, hub: FakeHub) -> FakeBuilder:
    """Deploy the builders into moto (the ECR repository and the two projects) and make their builds do their work."""
    session = boto3.Session(region_name=REGION)
    session.client("ecr").create_repository(repositoryName=image_repository_name(PREFIX))
    codebuild = session.client("codebuild")
    for name in (image_project_name(PREFIX), model_project_name(PREFIX)):
        codebuild.create_project(
            name=name,
            # The stack's projects have NO_SOURCE; moto requires a location whatever the type.
            source={"type": "S3", "location": "bucket/none.zip", "buildspec": "version: 0.2"},
            artifacts={"type": "NO_ARTIFACTS"},
            environment={
                "type": "LINUX_CONTAINER",
                "image": "aws/codebuild/standard:7.0",
                "computeType": "BUILD_GENERAL1_LARGE",
            },
            serviceRole=_ROLE,
        )
    builder = FakeBuilder(session, hub, tmp_path)
    builder.effects = {
        image_project_name(PREFIX): builder.build_image,
        model_project_name(PREFIX): builder.import_model,
    }
    original_start = CodeBuildResponse.start_build
    original_batch = CodeBuildBackend.batch_get_builds

    def start_build(response: CodeBuildResponse) -> Any:
        answer = original_start(response)
        names = ("projectName", "sourceTypeOverride", "sourceLocationOverride", "sourceVersion")
        request = {name: response._get_param(name) for name in names}
        request["environmentVariablesOverride"] = response._get_param("environmentVariablesOverride") or []
        builder.requests.append(request)
        build = response.codebuild_backend.build_metadata[request["projectName"]].build_metadata
        if request["projectName"] not in builder.failing:
            exported = builder.effects[request["projectName"]](request)
            build["exportedEnvironmentVariables"] = [{"name": k, "value": v} for k, v in exported.items()]
        return answer

    def batch_get_builds(backend: CodeBuildBackend, ids: list[str]) -> list[dict[str, Any]]:
        builds = original_batch(backend, ids)
        for build in builds:
            if build["projectName"] in builder.failing:
                build["buildStatus"], build["currentPhase"] = "FAILED", "BUILD"
        return builds

    monkeypatch.setattr(CodeBuildResponse, "start_build", start_build)
    monkeypatch.setattr(CodeBuildBackend, "batch_get_builds", batch_get_builds)
    return builder
