"""The deployment's catalog of trainer images and model copies: SSM parameters the CLI writes after deploy
(``mtrl image build verl``, ``mtrl model import``) and Preflight reads, so neither needs a redeploy.

- ``/<prefix>/images/verl``: the trainer image, ``{"uri": "<repo>@sha256:<hex>", ...}``;
- ``/<prefix>/models/<owner>/<name>``: one model copy, ``{"id", "s3_uri", "sha256", "revision"?, ...}``.

Explicit settings win: a configured ``verl_image_uri`` is used as it is, and configured ``verl_models`` come first
(the first is a run's default), a registered model with the same id is ignored. Registered models follow, oldest
import first. Plain ``String`` parameters: the values are names and digests, nothing secret.

Whoever may write the parameters decides what runs train on, so a value is trusted only as far as ``mtrl image build``
and ``mtrl model import`` could have written it (checked when recorded, and again when read at Preflight and by
``mtrl image list`` / ``mtrl model list``, which print them): the image is the deployment's own repository in the
catalog's region, pinned by digest; a model copy lies at ``models/<its id>/<40-hex commit or local-<16 hex>>/``
(the key the import wrote; a run's session policy grants reading under it); the timestamp, source and build id are
plain words, never terminal escapes or Rich markup.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError

from mtrl.backends._aws import AwsClients, error_code, is_transient
from mtrl.backends.verl.supply import BUILD_IMAGE_COMMAND, MODELS_PREFIX, image_repository_name
from mtrl.contracts.backend import BackendError
from mtrl.settings.verl import ECR_IMAGE, VerlModelSettings

_RESERVED = re.compile(r"/?(aws|ssm)", re.IGNORECASE)


def check_catalog_prefix(prefix: str) -> None:
    """ValueError when SSM would refuse the deployment's catalog names: a parameter name "can't be prefixed with
    'aws' or 'ssm' (case-insensitive)" (SSM API reference, PutParameter, Name), and ``/<prefix>/…`` begins with the
    prefix. Called before a build or an upload starts, not after hours of it."""
    if _RESERVED.match(image_parameter(prefix)):
        raise ValueError(
            f"prefix '{prefix}' starts with 'aws' or 'ssm': SSM reserves such parameter names, so this deployment "
            f"cannot record images or models ({image_parameter(prefix)}); deploy it under another prefix, or set "
            "verl_image_uri and verl_models instead"
        )


def image_parameter(prefix: str, image: str = "verl") -> str:
    return f"/{prefix}/images/{image}"


def models_path(prefix: str) -> str:
    return f"/{prefix}/models"


def model_parameter(prefix: str, model_id: str) -> str:
    return f"{models_path(prefix)}/{model_id}"


@dataclass(frozen=True)
class RegisteredImage:
    uri: str
    recorded_at: str
    build_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri, "recorded_at": self.recorded_at, "build_id": self.build_id}


@dataclass(frozen=True)
class RegisteredModel:
    model: VerlModelSettings
    recorded_at: str
    source: str  # "hub" or "local"

    def to_dict(self) -> dict[str, Any]:
        return {**self.model.model_dump(mode="json"), "recorded_at": self.recorded_at, "source": self.source}


@dataclass(frozen=True)
class Catalog:
    image: RegisteredImage | None
    models: tuple[RegisteredModel, ...]


SOURCES = ("hub", "local")
_RECORDED_AT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_BUILD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,299}")  # CodeBuild's <project>:<uuid>
_ROLE_ACCOUNT = re.compile(r"arn:[a-z-]+:iam::([0-9]{12}):role/")
_COPY_REVISION = re.compile(r"(?P<commit>[0-9a-f]{40})|local-[0-9a-f]{16}")


def _checked_image(uri: str, *, prefix: str, region: str | None, account: str | None = None) -> str:
    found = ECR_IMAGE.match(uri)
    if found is None or not found["digest"]:
        raise ValueError(f"{uri!r} is not an ECR image pinned by digest (<registry>/<repository>@sha256:<64 hex>)")
    if account is not None and found["account"] != account:
        raise ValueError(f"{uri!r} is not in the deployment's account {account}")
    repository = image_repository_name(prefix)
    if found["repository"] != repository or (region is not None and found["region"] != region):
        raise ValueError(f"{uri!r} is not an image of the deployment's repository {repository} in {region}")
    return uri


def _checked_copy(model: VerlModelSettings) -> None:
    """A registered copy lies where the import wrote it: ``models/<id>/<commit or local-<16 hex>>/``."""
    if model.s3_uri is None or model.sha256 is None:
        raise ValueError(f"model '{model.id}': a registered model is an S3 copy with its checksum")
    key = model.s3_uri.removeprefix("s3://").partition("/")[2]
    revision = key.removeprefix(f"{MODELS_PREFIX}{model.id}/").removesuffix("/")
    found = _COPY_REVISION.fullmatch(revision) if key == f"{MODELS_PREFIX}{model.id}/{revision}/" else None
    if found is None or (model.revision is not None and found["commit"] != model.revision):
        raise ValueError(
            f"model '{model.id}': {model.s3_uri} is not a copy mtrl model import writes "
            f"({MODELS_PREFIX}{model.id}/<commit or local-<16 hex>>/, the commit its revision)"
        )


def _checked_words(recorded_at: object, source: object = "hub", build_id: object = None) -> None:
    if not isinstance(recorded_at, str) or not _RECORDED_AT.fullmatch(recorded_at):
        raise ValueError(f"recorded_at {recorded_at!r} is not a UTC time (YYYY-MM-DDTHH:MM:SSZ)")
    if source not in SOURCES:
        raise ValueError(f"source {source!r} is not one of {', '.join(SOURCES)}")
    if build_id is not None and not (isinstance(build_id, str) and _BUILD_ID.fullmatch(build_id)):
        raise ValueError(f"build_id {build_id!r} is not a CodeBuild build id")


def record_image(ssm: Any, prefix: str, image: RegisteredImage) -> None:
    _checked_image(image.uri, prefix=prefix, region=ssm.meta.region_name)
    _checked_words(image.recorded_at, build_id=image.build_id)
    ssm.put_parameter(
        Name=image_parameter(prefix),
        Value=json.dumps(image.to_dict(), sort_keys=True),
        Type="String",
        Overwrite=True,
        Description="mtrl: the verl trainer image (mtrl image build verl)",
    )


def record_model(ssm: Any, prefix: str, registered: RegisteredModel) -> None:
    model = registered.model
    _checked_copy(model)
    _checked_words(registered.recorded_at, registered.source)
    ssm.put_parameter(
        Name=model_parameter(prefix, model.id),
        Value=json.dumps(registered.to_dict(), sort_keys=True),
        Type="String",
        Overwrite=True,
        Description=f"mtrl: a model copy verl runs may train (mtrl model import {model.id})",
    )


def _parse_image(name: str, text: str, prefix: str, region: str | None, account: str | None) -> RegisteredImage:
    try:
        document = json.loads(text)
        _checked_words(document.get("recorded_at"), build_id=document.get("build_id"))
        return RegisteredImage(
            uri=_checked_image(str(document["uri"]), prefix=prefix, region=region, account=account),
            recorded_at=document["recorded_at"],
            build_id=document.get("build_id"),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise BackendError(f"parameter {name} is not a registered image ({error}): run {BUILD_IMAGE_COMMAND}") from None


def _parse_model(name: str, text: str, prefix: str) -> RegisteredModel:
    try:
        document = json.loads(text)
        model = VerlModelSettings.model_validate(
            {key: document.get(key) for key in ("id", "s3_uri", "sha256", "revision")}
        )
    except (ValueError, TypeError, AttributeError, ValidationError) as error:
        raise BackendError(f"parameter {name} is not a registered model ({error})") from None
    if model_parameter(prefix, model.id) != name or model.s3_uri is None:
        raise BackendError(f"parameter {name} registers model '{model.id}' under another name, or without a copy")
    try:
        _checked_copy(model)
        _checked_words(document.get("recorded_at"), document.get("source"))
    except ValueError as error:
        raise BackendError(f"parameter {name} is not a registered model ({error})") from None
    return RegisteredModel(model, document["recorded_at"], document["source"])


def read_catalog(ssm: Any, prefix: str, *, account: str | None = None) -> Catalog:
    """What the deployment has registered; BackendError (transient for throttling) when SSM cannot be read.
    ``account``: the deployment's account, when known (Preflight), which the image must be in."""
    name = image_parameter(prefix)
    try:
        try:
            region = ssm.meta.region_name
            image = _parse_image(name, ssm.get_parameter(Name=name)["Parameter"]["Value"], prefix, region, account)
        except ClientError as error:
            if error_code(error) != "ParameterNotFound":
                raise
            image = None
        models = []
        paginator = ssm.get_paginator("get_parameters_by_path")
        for page in paginator.paginate(Path=models_path(prefix), Recursive=True):
            models += [_parse_model(p["Name"], p["Value"], prefix) for p in page.get("Parameters", [])]
    except (ClientError, BotoCoreError) as error:
        what = error_code(error) if isinstance(error, ClientError) else str(error)
        raise BackendError(
            f"reading the deployment's catalog (SSM {name}, {models_path(prefix)}): {what}",
            transient=is_transient(error),
        ) from None
    models.sort(key=lambda registered: (registered.recorded_at, registered.model.id))
    return Catalog(image, tuple(models))


def with_registered(values: Mapping[str, Any], catalog: Catalog) -> dict[str, Any]:
    """The verl values completed with what is registered (explicit settings win)."""
    resolved = dict(values)
    if not resolved.get("verl_image_uri") and catalog.image is not None:
        resolved["verl_image_uri"] = catalog.image.uri
    configured = [dict(model) for model in resolved.get("verl_models") or []]
    ids = {model.get("id") for model in configured}
    resolved["verl_models"] = configured + [
        registered.model.model_dump(mode="json", exclude_none=True)
        for registered in catalog.models
        if registered.model.id not in ids
    ]
    return resolved


def registered_values(values: Mapping[str, Any], *, clients: AwsClients | None = None) -> dict[str, Any]:
    """The descriptor's ``registered_values`` hook (Preflight, before the effective settings are stored): the
    deploy-time verl values completed from the deployment's catalog in its region. The account of the deployment's
    trainer role (``arn:<partition>:iam::<account>:role/…``) is the one a registered image must be in."""
    region, prefix = values.get("region"), values.get("prefix") or "mtrl"
    if not region:
        raise BackendError("the deployment's verl values name no region (deployment is broken)")
    role = str(values.get("verl_trainer_role_arn") or "")
    account = found[1] if (found := _ROLE_ACCOUNT.match(role)) else None
    ssm = (clients or AwsClients()).client("ssm", str(region))
    return with_registered(values, read_catalog(ssm, str(prefix), account=account))
