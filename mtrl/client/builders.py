"""What ``mtrl image build`` and ``mtrl model import`` do against a deployment: upload a source archive, start the
stack's CodeBuild project, follow the build, check what it made, and record it in the deployment's catalog
(mtrl.backends.verl.catalog) where Preflight reads it. A local model copy (``--from DIR``) is uploaded directly.

The builders are the stack's (stacks/constructs/image_builder.py): no Docker and no model download here.
"""

from __future__ import annotations

import hashlib
import io
import re
import time
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from boto3.exceptions import S3UploadFailedError
from botocore.exceptions import BotoCoreError, ClientError

from mtrl.backends.verl.catalog import (
    RegisteredImage,
    RegisteredModel,
    check_catalog_prefix,
    record_image,
    record_model,
)
from mtrl.backends.verl.model_copy import format_sums, parse_sums, too_long_for_s3, tree_sums
from mtrl.backends.verl.supply import (
    IMAGE_DOCKERFILE,
    MODELS_PREFIX,
    SOURCE_PREFIX,
    image_project_name,
    image_repository_name,
    model_project_name,
)
from mtrl.client.deployment import Deployment, error_code
from mtrl.contracts.hub import MODEL_SUMS_FILE, check_model_id, check_revision, is_commit
from mtrl.settings.verl import ECR_IMAGE, VerlModelSettings

IMAGE_URI_VARIABLE = "IMAGE_URI"  # what the image buildspec exports (stacks/constructs/image_builder.py)
MODEL_COMMIT_VARIABLE = "MODEL_COMMIT"
MODEL_SOURCE = ("mtrl",)  # the import job runs mtrl.backends.verl.hub_copy from the archive
_ZIP_TIME = (2020, 1, 1, 0, 0, 0)  # fixed: the same tree makes the same archive (and key)
_SKIPPED = re.compile(r"(^|/)(__pycache__|\.pytest_cache|\.mypy_cache)(/|$)|\.pyc$")
_COPY = re.compile(r"^COPY\s+(?!--)(?P<args>.+)$", re.MULTILINE)
POLL_SECONDS = 15.0


class BuildError(Exception):
    """A build that could not start, failed, or made something other than expected (message says what to do)."""


@dataclass(frozen=True)
class Build:
    build_id: str
    status: str
    phase: str
    exported: dict[str, str]
    logs_link: str | None


def dockerfile_sources(root: Path, dockerfile: str = IMAGE_DOCKERFILE) -> list[str]:
    """What the Dockerfile copies from its context (every ``COPY`` source), and the Dockerfile itself."""
    text = (root / dockerfile).read_text(encoding="utf-8")
    sources = [dockerfile]
    for match in _COPY.finditer(text):
        sources += match["args"].split()[:-1]  # the last word is the destination
    return sources


def source_archive(root: Path, paths: Iterable[str]) -> bytes:
    """A zip of ``paths`` under ``root`` (directories whole, caches left out), byte-for-byte the same for the same
    files; FileNotFoundError naming a missing path, BuildError naming a symbolic link that leaves ``root``."""
    files: set[Path] = set()
    inside = root.resolve()
    for relative in paths:
        path = root / relative
        if not path.exists():
            raise FileNotFoundError(f"{relative} is not in {root}: run mtrl from a source checkout of the repository")
        found = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
        for link in (p for p in found if p.is_symlink() and not p.resolve().is_relative_to(inside)):
            # The archive holds what a link points to: a link out of the checkout (a credentials file, a dataset)
            # would be uploaded to the bucket and built into the image.
            raise BuildError(
                f"{link.relative_to(root)} is a symbolic link out of the checkout (to {link.resolve()}): the image "
                "build would upload what it points to; copy the file in, or remove the link"
            )
        files.update(p for p in found if not _SKIPPED.search(p.relative_to(root).as_posix()))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(files):
            info = zipfile.ZipInfo(path.relative_to(root).as_posix(), date_time=_ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def upload_source(s3: Any, deployment: Deployment, archive: bytes) -> tuple[str, str | None]:
    """(key, version id) of the archive under image-builds/, named by its SHA-256."""
    key = f"{SOURCE_PREFIX}{hashlib.sha256(archive).hexdigest()}.zip"
    answer = s3.put_object(Bucket=deployment.bucket, Key=key, Body=archive, ContentType="application/zip")
    return key, answer.get("VersionId")


def start_build(
    codebuild: Any,
    project: str,
    deployment: Deployment,
    source: tuple[str, str | None],
    variables: dict[str, str] | None = None,
) -> str:
    key, version = source
    request: dict[str, Any] = {
        "projectName": project,
        "sourceTypeOverride": "S3",
        "sourceLocationOverride": f"{deployment.bucket}/{key}",
        "environmentVariablesOverride": [
            {"name": name, "value": value, "type": "PLAINTEXT"} for name, value in (variables or {}).items()
        ],
    }
    if version:
        request["sourceVersion"] = version  # the very archive uploaded, even if the key is written again
    try:
        return str(codebuild.start_build(**request)["build"]["id"])
    except ClientError as error:
        if error_code(error) == "ResourceNotFoundException":
            raise BuildError(
                f"the deployment has no build project {project}: deploy this version of mtrl (npx cdk deploy --all); "
                "a deployment without the cluster (deploy_cluster=false) has no verl builders"
            ) from None
        raise


def _build(answer: dict[str, Any]) -> Build:
    return Build(
        build_id=str(answer["id"]),
        status=str(answer.get("buildStatus", "IN_PROGRESS")),
        phase=str(answer.get("currentPhase", "")),
        exported={
            str(item.get("name")): str(item.get("value", ""))
            for item in answer.get("exportedEnvironmentVariables") or []
        },
        logs_link=(answer.get("logs") or {}).get("deepLink"),
    )


def follow_build(
    codebuild: Any,
    build_id: str,
    *,
    on_phase: Callable[[Build], None] = lambda _build: None,
    sleep: Callable[[float], None] = time.sleep,
    poll_seconds: float = POLL_SECONDS,
) -> Build:
    """Poll the build until it ends; ``on_phase`` sees each new phase. BuildError unless it succeeded."""
    seen = ""
    while True:
        builds = codebuild.batch_get_builds(ids=[build_id]).get("builds") or []
        if not builds:
            raise BuildError(f"build {build_id} is not known to CodeBuild")
        build = _build(builds[0])
        if build.phase != seen:
            seen = build.phase
            on_phase(build)
        if build.status != "IN_PROGRESS":
            break
        sleep(poll_seconds)
    if build.status != "SUCCEEDED":
        where = f": its log is at {build.logs_link}" if build.logs_link else ""
        raise BuildError(f"build {build_id} ended {build.status} in phase {build.phase}{where}")
    return build


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _recordable(deployment: Deployment) -> None:
    try:
        check_catalog_prefix(deployment.prefix)
    except ValueError as error:
        raise BuildError(str(error)) from None


# -- the trainer image -------------------------------------------------------------------------------------------------
def built_image(ecr: Any, deployment: Deployment, build: Build) -> str:
    """The image the build pushed, ``<repository>@sha256:<hex>``, checked to be in the deployment's repository."""
    uri = build.exported.get(IMAGE_URI_VARIABLE, "")
    found = ECR_IMAGE.match(uri)
    repository = image_repository_name(deployment.prefix)
    if found is None or not found["digest"] or found["repository"] != repository:
        raise BuildError(
            f"build {build.build_id} exported {IMAGE_URI_VARIABLE}={uri!r}, not an image of {repository} by digest"
        )
    try:
        ecr.describe_images(
            registryId=found["account"], repositoryName=repository, imageIds=[{"imageDigest": found["digest"]}]
        )
    except ClientError as error:
        raise BuildError(f"{uri} is not in ECR ({error_code(error)}): the push did not complete") from None
    return uri


def build_image(
    aws: Any,
    deployment: Deployment,
    root: Path,
    *,
    on_phase: Callable[[Build], None] = lambda _build: None,
    sleep: Callable[[float], None] = time.sleep,
) -> RegisteredImage:
    """Build docker/verl-trainer in the account and record it; the registered image."""
    _recordable(deployment)
    archive = source_archive(root, dockerfile_sources(root))
    source = upload_source(aws.client("s3"), deployment, archive)
    codebuild = aws.client("codebuild")
    build_id = start_build(codebuild, image_project_name(deployment.prefix), deployment, source)
    build = follow_build(codebuild, build_id, on_phase=on_phase, sleep=sleep)
    image = RegisteredImage(
        uri=built_image(aws.client("ecr"), deployment, build), recorded_at=_now(), build_id=build_id
    )
    record_image(aws.client("ssm"), deployment.prefix, image)
    return image


# -- model copies ------------------------------------------------------------------------------------------------------
def model_prefix(model_id: str, revision: str) -> str:
    return f"{MODELS_PREFIX}{model_id}/{revision}/"


def _registered_copy(s3: Any, deployment: Deployment, model_id: str, revision: str) -> VerlModelSettings:
    """The copy at models/<id>/<revision>/ as the trainer will check it: its SHA256SUMS parses, and every file it
    lists is there; the model settings pinning that SHA256SUMS."""
    prefix = model_prefix(model_id, revision)
    try:
        sums = s3.get_object(Bucket=deployment.bucket, Key=prefix + MODEL_SUMS_FILE)["Body"].read()
    except ClientError as error:
        raise BuildError(f"s3://{deployment.bucket}/{prefix}{MODEL_SUMS_FILE}: {error_code(error)}") from None
    try:
        listed = parse_sums(sums.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise BuildError(
            f"s3://{deployment.bucket}/{prefix}{MODEL_SUMS_FILE} is not a checksum list: {error}"
        ) from None
    present: set[str] = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=deployment.bucket, Prefix=prefix):
        present.update(item["Key"].removeprefix(prefix) for item in page.get("Contents", []))
    missing = sorted(set(listed) - present)
    if missing:
        raise BuildError(f"s3://{deployment.bucket}/{prefix} lacks files its {MODEL_SUMS_FILE} lists: {missing[:5]}")
    return VerlModelSettings(
        id=model_id,
        s3_uri=f"s3://{deployment.bucket}/{prefix}",
        sha256=hashlib.sha256(sums).hexdigest(),
        revision=revision if is_commit(revision) else None,
    )


def import_hub_model(
    aws: Any,
    deployment: Deployment,
    root: Path,
    model_id: str,
    revision: str | None,
    *,
    on_phase: Callable[[Build], None] = lambda _build: None,
    sleep: Callable[[float], None] = time.sleep,
) -> RegisteredModel:
    """Copy a Hub revision into the bucket with the stack's import job, then record it."""
    _recordable(deployment)
    check_model_id(model_id)
    asked = check_revision(revision or "main")
    source = upload_source(aws.client("s3"), deployment, source_archive(root, MODEL_SOURCE))
    codebuild = aws.client("codebuild")
    build_id = start_build(
        codebuild,
        model_project_name(deployment.prefix),
        deployment,
        source,
        {"MODEL_ID": model_id, "MODEL_REVISION": asked},
    )
    build = follow_build(codebuild, build_id, on_phase=on_phase, sleep=sleep)
    commit = build.exported.get(MODEL_COMMIT_VARIABLE, "")
    if not is_commit(commit) or (is_commit(asked) and commit != asked):
        raise BuildError(f"build {build_id} exported {MODEL_COMMIT_VARIABLE}={commit!r}, not the commit of {asked}")
    model = _registered_copy(aws.client("s3"), deployment, model_id, commit)
    registered = RegisteredModel(model, recorded_at=_now(), source="hub")
    record_model(aws.client("ssm"), deployment.prefix, registered)
    return registered


def _existing_sums(s3: Any, deployment: Deployment, prefix: str) -> bytes | None:
    """The SHA256SUMS already at ``prefix`` (an earlier import of the same revision), None when there is none."""
    try:
        body: bytes = s3.get_object(Bucket=deployment.bucket, Key=prefix + MODEL_SUMS_FILE)["Body"].read()
    except ClientError as error:
        if error_code(error) in ("NoSuchKey", "404"):
            return None
        raise
    return body


def _remove_partial(s3: Any, deployment: Deployment, keys: list[str]) -> list[str]:
    """Delete what a failed upload wrote to a prefix that held no copy (best effort); the keys that stayed."""
    left = []
    for key in keys:
        try:
            s3.delete_object(Bucket=deployment.bucket, Key=key)
        except (ClientError, BotoCoreError):
            left.append(key)
    return left


def import_local_model(
    aws: Any,
    deployment: Deployment,
    directory: Path,
    model_id: str,
    revision: str | None,
    *,
    on_file: Callable[[str, int], None] = lambda _name, _size: None,
) -> RegisteredModel:
    """Upload a local copy (every file, then its SHA256SUMS) and record it. ``revision``: the Hub commit the copy is
    of, if known (40 hex); the copy is stored under it, else under ``local-<16 hex of its SHA256SUMS>``.

    A failed import changes nothing: a prefix already holding another copy (another SHA256SUMS) is refused before any
    upload (overwriting its files in place would leave the recorded copy half replaced if the upload then failed),
    and what a failed upload wrote to a new prefix is removed again; nothing is recorded."""
    _recordable(deployment)
    check_model_id(model_id)
    if revision is not None and not is_commit(revision):
        raise BuildError(f"--from: revision {revision!r} must be the 40-hex commit the copy is of (or left out)")
    if not directory.is_dir():
        raise BuildError(f"--from {directory}: not a directory")
    try:
        digests = tree_sums(directory)
        sums = format_sums(digests).encode("utf-8")
    except ValueError as error:
        raise BuildError(f"--from {directory}: {error}") from None
    stored = revision or f"local-{hashlib.sha256(sums).hexdigest()[:16]}"
    too_long = too_long_for_s3(model_id, stored, sorted(digests))
    if too_long:
        raise BuildError(f"--from {directory}: {too_long}: shorten it; nothing was uploaded")
    prefix = model_prefix(model_id, stored)
    s3 = aws.client("s3")
    existing = _existing_sums(s3, deployment, prefix)
    if existing is not None and existing != sums:
        raise BuildError(
            f"s3://{deployment.bucket}/{prefix} already holds another copy of {model_id}@{stored} (its "
            f"{MODEL_SUMS_FILE} lists other files or digests): nothing was uploaded. A copy of that commit with "
            "these files is a different copy: import it without @<commit> (stored under local-<16 hex>)"
        )
    uploaded: list[str] = []
    try:
        for name in sorted(digests):
            path = directory / name
            on_file(name, path.stat().st_size)
            s3.upload_file(str(path), deployment.bucket, prefix + name)  # multipart for the large weight files
            uploaded.append(prefix + name)
        s3.put_object(Bucket=deployment.bucket, Key=prefix + MODEL_SUMS_FILE, Body=sums)  # last: the copy is complete
    except (S3UploadFailedError, OSError) as error:  # upload_file's failures (its ClientError inside), a lost file
        left = _remove_partial(s3, deployment, uploaded) if existing is None else []
        kept = f"; {len(left)} uploaded file(s) could not be removed: {left[:3]}" if left else ""
        raise BuildError(
            f"--from {directory}: uploading to s3://{deployment.bucket}/{prefix} failed ({error}): nothing was "
            f"recorded{kept}"
        ) from None
    except (ClientError, BotoCoreError):  # the SHA256SUMS put: the CLI names the call (and expired credentials)
        if existing is None:
            _remove_partial(s3, deployment, uploaded)
        raise
    model = _registered_copy(s3, deployment, model_id, stored)
    registered = RegisteredModel(model, recorded_at=_now(), source="local")
    record_model(aws.client("ssm"), deployment.prefix, registered)
    return registered
