"""The deployment's catalog of trainer images and model copies: SSM parameters the CLI writes after deploy
(``mtrl image build verl``, ``mtrl model import``) and Preflight reads, so neither needs a redeploy.

- ``/<prefix>/images/verl``: the trainer image, ``{"uri": "<repo>@sha256:<hex>", ...}``;
- ``/<prefix>/models/<owner>/<name>``: one model copy, ``{"id", "s3_uri", "sha256", "revision"?, ...}``.

Explicit settings win: a configured ``verl_image_uri`` is used as it is, and configured ``verl_models`` come first
(the first is a run's default), a registered model with the same id is ignored. Registered models follow, oldest
import first. Plain ``String`` parameters: the values are names and digests, nothing secret.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import ValidationError

from mtrl.backends._aws import AwsClients, error_code, is_transient
from mtrl.backends.verl.supply import BUILD_IMAGE_COMMAND
from mtrl.contracts.backend import BackendError
from mtrl.settings.verl import ECR_IMAGE, VerlModelSettings


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


def _checked_image(uri: str) -> str:
    found = ECR_IMAGE.match(uri)
    if found is None or not found["digest"]:
        raise ValueError(f"{uri!r} is not an ECR image pinned by digest (<registry>/<repository>@sha256:<64 hex>)")
    return uri


def record_image(ssm: Any, prefix: str, image: RegisteredImage) -> None:
    _checked_image(image.uri)
    ssm.put_parameter(
        Name=image_parameter(prefix),
        Value=json.dumps(image.to_dict(), sort_keys=True),
        Type="String",
        Overwrite=True,
        Description="mtrl: the verl trainer image (mtrl image build verl)",
    )


def record_model(ssm: Any, prefix: str, registered: RegisteredModel) -> None:
    model = registered.model
    if model.s3_uri is None or model.sha256 is None:
        raise ValueError(f"model '{model.id}': a registered model is an S3 copy with its checksum")
    ssm.put_parameter(
        Name=model_parameter(prefix, model.id),
        Value=json.dumps(registered.to_dict(), sort_keys=True),
        Type="String",
        Overwrite=True,
        Description=f"mtrl: a model copy verl runs may train (mtrl model import {model.id})",
    )


def _parse_image(name: str, text: str) -> RegisteredImage:
    try:
        document = json.loads(text)
        return RegisteredImage(
            uri=_checked_image(str(document["uri"])),
            recorded_at=str(document.get("recorded_at", "")),
            build_id=document.get("build_id"),
        )
    except (ValueError, KeyError, TypeError) as error:
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
    return RegisteredModel(model, str(document.get("recorded_at", "")), str(document.get("source", "")))


def read_catalog(ssm: Any, prefix: str) -> Catalog:
    """What the deployment has registered; BackendError (transient for throttling) when SSM cannot be read."""
    name = image_parameter(prefix)
    try:
        try:
            image = _parse_image(name, ssm.get_parameter(Name=name)["Parameter"]["Value"])
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
    deploy-time verl values completed from the deployment's catalog in its region."""
    region, prefix = values.get("region"), values.get("prefix") or "mtrl"
    if not region:
        raise BackendError("the deployment's verl values name no region (deployment is broken)")
    ssm = (clients or AwsClients()).client("ssm", str(region))
    return with_registered(values, read_catalog(ssm, str(prefix)))
