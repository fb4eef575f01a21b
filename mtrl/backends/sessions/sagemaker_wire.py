"""What mtrl sends to and reads from SageMaker's training-session APIs: the request bodies and their parsing, with no
I/O, so every shape here is checked against the botocore model and against what ``sagemaker-train`` sends.

Sources (see ``sagemaker_service`` for the full list of facts and what is unverified):
- botocore 1.44.8: ``sagemaker`` ``CreateTrainingSession`` / ``DescribeTrainingSession`` (statuses,
  ``BillableTokenUsage``) and the ``sagemakertrainingsessionruntime`` 2025-02-10 model (``OperationConfig``,
  ``SampleOperationConfig``, ``Datum``, ``TensorData``, ``SamplingParams`` with ``maxTokens`` 512..131072,
  ``temperature`` 0..2, ``AdamParamsConfig`` bounds, ``LossFnName``).
- ``sagemaker-train`` 1.27.0 (``sagemaker/train/training_session/``): the datum wire format (``modelInput`` chunks of
  ``encoded_text``; ``lossFnInputs`` ``target_tokens`` int64, ``weights``/``logprobs``/``advantages`` float32, each
  one value per ``modelInput`` token, with ``shape``), the loss inputs an RL loss requires, and ``saveWeights`` /
  ``saveState`` / ``loadState`` / ``loadWeightsForSampling`` payloads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mtrl.backends._aws import safe_name
from mtrl.backends.sessions.service import (
    AdamParams,
    Datum,
    ForwardBackwardResult,
    LossName,
    SampledSequence,
    SamplingParams,
    ServiceError,
    StopReason,
    TokenUsage,
)

# The runtime's SamplingParams.maxTokens floor (botocore model): a smaller budget is requested at the floor and the
# completion cut back here, so the loop's own budget holds (the extra tokens are sampled and billed, then dropped).
SERVICE_MIN_MAX_TOKENS = 512
# Session names: [a-zA-Z0-9](-*[a-zA-Z0-9]){0,62} in the control plane (the runtime allows 64).
SESSION_NAME_MAX_LENGTH = 63
# Metric names a forward-backward result may carry its loss under: ``loss`` (the library's combining rule names it),
# ``actor/pg_loss`` (the library's docstrings), ``loss:sum`` (Tinker). Which one the service emits is unverified.
LOSS_METRIC_NAMES = ("loss", "actor/pg_loss", "loss:sum")
# The per-datum loss output carrying the trainer's logprob of each target (Tinker's name; unverified for SageMaker).
TRAINER_LOGPROBS_OUTPUT = "logprobs"


@dataclass(frozen=True)
class SageMakerSessionConfig:
    """One training session's settings, as ``CreateTrainingSession`` takes them.

    ``base_model_arn``: the SageMaker Hub model's ARN (``...:hub-content/SageMakerPublicHub/Model/<name>[/<version>]``);
    ``output_s3_uri``: where checkpoints are written; ``model_package_group_arn``: where saved weights and states are
    registered as model package versions (the library always sends one)."""

    session_name: str
    region: str
    base_model_arn: str
    role_arn: str
    output_s3_uri: str
    model_package_group_arn: str
    lora_rank: int = 16
    lora_alpha: int = 32
    accept_eula: bool = False
    kms_key_arn: str | None = None
    subnet_ids: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()
    tags: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if bool(self.subnet_ids) != bool(self.security_group_ids):
            raise ValueError("a VPC config needs both subnet_ids and security_group_ids, or neither")


def session_name(run_id: str, attempt: int) -> str:
    """A session name per run and attempt (a resumed run opens a new session; names must not collide)."""
    return safe_name(f"{run_id}-{attempt}", max_length=SESSION_NAME_MAX_LENGTH, prefix="mtrl-")


def create_session_request(config: SageMakerSessionConfig) -> dict[str, Any]:
    s3_location: dict[str, Any] = {"Path": config.output_s3_uri}
    if config.kms_key_arn:
        s3_location["KmsKeyArn"] = config.kms_key_arn
    model_config: dict[str, Any] = {"BaseModelArn": config.base_model_arn}
    if config.accept_eula:
        # Only sent when accepted: sagemaker-train 1.27.0 never sends the field, so a session created without it
        # matches the library's request exactly.
        model_config["AcceptEula"] = True
    request: dict[str, Any] = {
        "TrainingSessionName": config.session_name,
        "ModelPackageGroupArn": config.model_package_group_arn,
        "LoraConfig": {"Rank": config.lora_rank, "Alpha": config.lora_alpha},
        "RoleArn": config.role_arn,
        "ModelConfig": model_config,
        "OutputConfig": {"S3Location": s3_location},
    }
    if config.subnet_ids:
        request["VpcConfig"] = {
            "Subnets": list(config.subnet_ids),
            "SecurityGroupIds": list(config.security_group_ids),
        }
    if config.tags:
        request["Tags"] = [{"Key": key, "Value": value} for key, value in config.tags.items()]
    return request


def usage_from_description(detail: Mapping[str, Any]) -> TokenUsage:
    billed = detail.get("BillableTokenUsage") or {}
    return TokenUsage(
        prefill=int(billed.get("PrefillTokenCount") or 0),
        sample=int(billed.get("SampleTokenCount") or 0),
        train=int(billed.get("TrainingTokenCount") or 0),
    )


def _tensor(values: Sequence[float] | Sequence[int], dtype: str) -> dict[str, Any]:
    return {"data": list(values), "dtype": dtype, "shape": [len(values)]}


def wire_datum(datum: Datum) -> dict[str, Any]:
    """``model_input = tokens[:-1]``, one loss input per predicted position: ``target_tokens = tokens[1:]``, the mask
    as ``weights`` (0 leaves a position out of the loss), and the sampler's ``logprobs`` and ``advantages`` with
    masked positions at 0 (a prompt or observation token has neither)."""
    sampled = [weight > 0 for weight in datum.mask]
    return {
        "modelInput": {"chunks": [{"tokens": list(datum.tokens[:-1]), "type": "encoded_text"}]},
        "lossFnInputs": {
            "target_tokens": _tensor(datum.tokens[1:], "int64"),
            "weights": _tensor([float(weight) for weight in datum.mask], "float32"),
            "logprobs": _tensor(
                [lp if keep else 0.0 for lp, keep in zip(datum.sampling_logprobs, sampled, strict=True)], "float32"
            ),
            "advantages": _tensor(
                [a if keep else 0.0 for a, keep in zip(datum.advantages, sampled, strict=True)], "float32"
            ),
        },
    }


def chunked(data: Sequence[Datum], *, max_datums: int, max_values: int) -> list[list[Datum]]:
    """``data`` split in order so each ``forwardBackward`` request stays under the runtime's size limit
    (``max_values``: token ids plus loss-input values, about ten bytes each as JSON). The service accumulates the
    gradient over consecutive forward-backward operations until the next optimizer step, so the chunks train the
    same as one request."""
    chunks: list[list[Datum]] = []
    chunk: list[Datum] = []
    chunk_values = 0
    for datum in data:
        values = 5 * (len(datum.tokens) - 1)  # the input tokens and four loss inputs, one value per position each
        if chunk and (len(chunk) >= max_datums or chunk_values + values > max_values):
            chunks.append(chunk)
            chunk, chunk_values = [], 0
        chunk.append(datum)
        chunk_values += values
    if chunk:
        chunks.append(chunk)
    return chunks


def forward_backward_operation(chunk: Sequence[Datum], loss: LossName) -> dict[str, Any]:
    return {"forwardBackward": {"lossFnName": loss, "datumList": [wire_datum(datum) for datum in chunk]}}


def adam_config(adam: AdamParams) -> dict[str, Any]:
    config: dict[str, Any] = {
        "learningRate": adam.learning_rate,
        "beta1": adam.beta1,
        "beta2": adam.beta2,
        "eps": adam.eps,
        "weightDecay": adam.weight_decay,
    }
    if adam.grad_clip_norm is not None:
        config["gradClipNorm"] = adam.grad_clip_norm
    return config


def sample_operation(
    prompt: Sequence[int], params: SamplingParams, count: int, model_package_arn: str | None
) -> dict[str, Any]:
    """The ``sample`` variant of ``ExecuteSamplingOperation``. Stop token ids have no wire field (the service takes
    stop *text*), so completions are cut at them here (``completion``)."""
    sampling: dict[str, Any] = {
        "maxTokens": max(params.max_tokens, SERVICE_MIN_MAX_TOKENS),
        "temperature": params.temperature,
        "topP": params.top_p,
    }
    if params.seed is not None:
        sampling["seed"] = params.seed
    config: dict[str, Any] = {
        "prompt": {"chunks": [{"tokens": list(prompt), "type": "encoded_text"}]},
        "numSamples": count,
        "samplingParams": sampling,
    }
    if model_package_arn:
        config["modelPackageArn"] = model_package_arn
    return {"sample": config}


def completion(raw: Mapping[str, Any], params: SamplingParams) -> SampledSequence:
    """A sampled sequence as the loop sees it: cut after the first stop token id, then at ``max_tokens``."""
    tokens = [int(token) for token in raw.get("tokens") or []]
    logprobs = raw.get("logprobs")
    if logprobs is None or len(logprobs) != len(tokens):
        count = "no" if logprobs is None else len(logprobs)
        raise ServiceError(f"the service returned {len(tokens)} sampled tokens with {count} logprobs")
    stop_reason: StopReason = "stop" if raw.get("stopReason") == "stop" else "length"
    end = len(tokens)
    for index, token in enumerate(tokens[: params.max_tokens]):
        if token in params.stop_token_ids:
            end, stop_reason = index + 1, "stop"
            break
    else:
        if end > params.max_tokens:
            end, stop_reason = params.max_tokens, "length"
    return SampledSequence(
        tokens=tuple(tokens[:end]),
        logprobs=tuple(float(value) for value in logprobs[:end]),
        stop_reason=stop_reason,
    )


def _float_list(tensor: Any) -> tuple[float, ...] | None:
    data = tensor.get("data") if isinstance(tensor, Mapping) else None
    if not isinstance(data, list) or not all(isinstance(value, int | float) for value in data):
        return None
    return tuple(float(value) for value in data)


def forward_backward_result(
    results: Sequence[Mapping[str, Any]], chunk_targets: Sequence[Sequence[int]]
) -> ForwardBackwardResult:
    """The chunks' ``forwardBackward`` results folded into one. ``chunk_targets``: per chunk, each datum's number of
    targets. The loss is the datum-weighted mean of the chunks' (each reports the mean over its own datums; NaN when
    the service names it under none of ``LOSS_METRIC_NAMES``); the trainer's logprobs come per datum, empty for a
    datum the service reported none (or a wrong number) for."""
    losses: list[tuple[float, int]] = []
    trainer_logprobs: list[tuple[float, ...]] = []
    for result, targets in zip(results, chunk_targets, strict=True):
        metrics = result.get("metrics") or {}
        loss = next((metrics[name] for name in LOSS_METRIC_NAMES if isinstance(metrics.get(name), int | float)), None)
        if loss is not None:
            losses.append((float(loss), len(targets)))
        outputs = result.get("lossFnOutputs") or []
        for index, count in enumerate(targets):
            output = outputs[index] if index < len(outputs) and isinstance(outputs[index], Mapping) else {}
            logprobs = _float_list(output.get(TRAINER_LOGPROBS_OUTPUT))
            trainer_logprobs.append(logprobs if logprobs is not None and len(logprobs) == count else ())
    total = sum(count for _, count in losses)
    mean = sum(loss * count for loss, count in losses) / total if total else math.nan
    return ForwardBackwardResult(loss=mean, trainer_logprobs=tuple(trainer_logprobs))
