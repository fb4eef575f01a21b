"""Deploy-time settings of the ``verl`` backend: the trainer image, the models a run may train, and the ceilings
of the per-run options (``backend_options`` of a manifest: mtrl.backends.verl.options)."""

from __future__ import annotations

import re
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mtrl.contracts.hub import HUB_COMMIT, HUB_MODEL_ID, MODEL_SUMS_FILE
from mtrl.settings.base import SettingsGroup

# Absolute bounds of the per-run options: a deployment's ceilings lie inside them.
MAX_LORA_RANK = 256
MAX_GROUP_SIZE = 64
MAX_STEPS = 100_000
MAX_SEQUENCE_LENGTH = 131_072
MIN_SEQUENCE_LENGTH = 64

_HF_ID = HUB_MODEL_ID
_S3_PREFIX = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/([A-Za-z0-9!_.*'()/-]+/)?$"
_SHA256 = r"^[0-9a-f]{64}$"
_COMMIT = HUB_COMMIT
# registry/repository, pinned by digest (…@sha256:<64 hex>) or by tag.
_IMAGE = re.compile(
    r"^[a-z0-9.-]+(:[0-9]{1,5})?/[a-z0-9._/-]+(@sha256:[0-9a-f]{64}|:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})\Z"
)
_DNS_LABEL = r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
# The KubeRay operator's own namespace (stacks/constructs/kuberay.py): its leader-election Role may edit every
# ConfigMap and Lease there, so it shares the namespace with nothing (never kube-system, where that would reach
# CoreDNS's and kube-proxy's ConfigMaps).
KUBERAY_OPERATOR_NAMESPACE = "kuberay-system"
# Namespaces that exist without mtrl or that another release creates (the HyperPod chart's training operator, the Nova
# Forge runner's job namespace, the KubeRay operator's).
_FOREIGN_NAMESPACES = frozenset({"default", "kubeflow", "mtrl-runs", KUBERAY_OPERATOR_NAMESPACE})


# \Z, not $: Python's $ also matches before a trailing newline (an image reference ending in "\n" would pass).
# An image in ECR, the one registry Preflight can check without pulling: account, region, repository, digest or tag.
ECR_IMAGE = re.compile(
    r"^(?P<account>[0-9]{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?/(?P<repository>[a-z0-9._/-]+)"
    r"(@(?P<digest>sha256:[0-9a-f]{64})|:(?P<tag>[A-Za-z0-9_][A-Za-z0-9._-]{0,127}))\Z"
)


def model_sums_object(s3_uri: str) -> tuple[str, str]:
    """The bucket and key of a model copy's SHA256SUMS: the file whose SHA-256 the deployment pins."""
    bucket, _, prefix = s3_uri.removeprefix("s3://").partition("/")
    return bucket, prefix + MODEL_SUMS_FILE


class VerlModelSettings(BaseModel):
    """One model verl runs may train: a Hugging Face id and where its weights come from."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    id: str = Field(..., pattern=_HF_ID, description="Hugging Face model id, e.g. 'Qwen/Qwen2.5-0.5B-Instruct'.")
    s3_uri: str | None = Field(
        None,
        pattern=_S3_PREFIX,
        description="S3 prefix (ending in '/') holding the operator's copy of the model's files.",
    )
    sha256: str | None = Field(
        None,
        pattern=_SHA256,
        description="SHA-256 of the copy's SHA256SUMS file (sha256sum format, one line per file); the trainer "
        "checks the file against it and every model file against the list before loading.",
    )
    revision: str | None = Field(
        None, pattern=_COMMIT, description="Hub commit to download (only with verl_hub_downloads; pinned, 40 hex)."
    )

    @model_validator(mode="after")
    def _copy_is_checksummed(self) -> Self:
        if (self.s3_uri is None) != (self.sha256 is None):
            raise ValueError(f"model '{self.id}': s3_uri and sha256 go together (a copy is verified by its checksum)")
        return self


class VerlSettings(SettingsGroup):
    """The verl backend: GRPO of open-weight models on the cluster's training group, one KubeRay RayJob per run."""

    verl_image_uri: str | None = Field(
        None,
        description="Container image of the verl trainer (docker/verl-trainer), pinned by digest "
        "(<registry>/<repo>@sha256:<hex>) or tag. Empty = the image `mtrl image build verl` built in the account "
        "and registered (read at each run's Preflight; without one, verl runs are refused there).",
    )
    verl_namespace: str | None = Field(
        None,
        pattern=_DNS_LABEL,
        description="Kubernetes namespace of this deployment's RayJobs (the pipeline may manage RayJobs only "
        "there). Empty = '<prefix>-verl'.",
    )
    verl_models: list[VerlModelSettings] = Field(
        default_factory=list,
        description="Models verl runs may train (JSON list of objects with keys id, s3_uri, sha256, revision). "
        "Each needs an S3 copy with its checksum unless verl_hub_downloads is true (then a pinned revision). The "
        "first is the default; a manifest chooses another with backend_options.model. Models registered with "
        "`mtrl model import` follow these (oldest import first; the same id here wins).",
    )
    verl_hub_downloads: bool = Field(
        False,
        description="Let the trainer download a listed model from the Hugging Face Hub at run time (at its pinned "
        "revision). Off: only the operator's checksummed S3 copies are used.",
    )
    verl_kueue_queue_name: str | None = Field(
        None,
        pattern=_DNS_LABEL,
        description="Kueue LocalQueue of HyperPod task governance RayJobs are submitted to (label "
        "kueue.x-k8s.io/queue-name). Empty = task governance is not installed: no queue label.",
    )
    verl_lora_rank: int = Field(
        32, ge=0, le=MAX_LORA_RANK, description="Default LoRA rank of a verl run (0 = full fine-tuning)."
    )
    verl_max_lora_rank: int = Field(
        64, ge=1, le=MAX_LORA_RANK, description="Largest LoRA rank a manifest may ask for (backend_options.lora_rank)."
    )
    verl_allow_full_finetuning: bool = Field(
        False, description="Let a manifest ask for full fine-tuning (backend_options.lora_rank 0)."
    )
    verl_group_size: int = Field(
        8, ge=2, le=MAX_GROUP_SIZE, description="Default GRPO group size (rollouts per prompt) of a verl run."
    )
    verl_max_group_size: int = Field(
        16,
        ge=2,
        le=MAX_GROUP_SIZE,
        description="Largest group size a manifest may ask for (backend_options.group_size).",
    )
    verl_steps: int = Field(100, ge=1, le=MAX_STEPS, description="Default number of training steps of a verl run.")
    verl_max_steps: int = Field(
        1000, ge=1, le=MAX_STEPS, description="Most training steps a manifest may ask for (backend_options.steps)."
    )
    verl_prompt_length: int = Field(
        1024,
        ge=MIN_SEQUENCE_LENGTH,
        le=MAX_SEQUENCE_LENGTH,
        description="Default prompt length of a verl run, in tokens.",
    )
    verl_max_prompt_length: int = Field(
        4096,
        ge=MIN_SEQUENCE_LENGTH,
        le=MAX_SEQUENCE_LENGTH,
        description="Longest prompt length a manifest may ask for (backend_options.max_prompt_length).",
    )
    verl_response_length: int = Field(
        2048,
        ge=MIN_SEQUENCE_LENGTH,
        le=MAX_SEQUENCE_LENGTH,
        description="Default response length (all turns of an episode together) of a verl run, in tokens.",
    )
    verl_max_response_length: int = Field(
        8192,
        ge=MIN_SEQUENCE_LENGTH,
        le=MAX_SEQUENCE_LENGTH,
        description="Longest response length a manifest may ask for (backend_options.max_response_length).",
    )
    verl_pre_running_deadline_minutes: int = Field(
        30,
        ge=1,
        le=24 * 60,
        description="A RayJob not running after this long (image pull, unschedulable pods) fails "
        "(preRunningDeadlineSeconds).",
    )
    verl_ttl_seconds_after_finished: int = Field(
        30,
        ge=0,
        le=60,
        description="Seconds KubeRay keeps a finished run's Ray cluster (and its GPUs) before deleting it.",
    )

    @field_validator("verl_image_uri")
    @classmethod
    def _image_is_pinned(cls, value: str | None) -> str | None:
        if value is not None and not _IMAGE.match(value):
            raise ValueError("must be <registry>/<repository>@sha256:<64 hex> or <registry>/<repository>:<tag>")
        return value

    @field_validator("verl_namespace")
    @classmethod
    def _namespace_is_the_deployments_own(cls, value: str | None) -> str | None:
        # The cluster stack creates the namespace and owns it (helm): a Kubernetes system namespace (the kube- prefix
        # is reserved; Kubernetes docs "Namespaces") or one another release creates would conflict.
        if value is not None and (value.startswith("kube-") or value in _FOREIGN_NAMESPACES):
            raise ValueError(
                f"'{value}' is a namespace mtrl does not own (kube-*, {', '.join(sorted(_FOREIGN_NAMESPACES))}): "
                "choose a namespace for this deployment's RayJobs alone"
            )
        return value

    @field_validator("verl_models")
    @classmethod
    def _model_ids_unique(cls, value: list[VerlModelSettings]) -> list[VerlModelSettings]:
        ids = [model.id for model in value]
        if len(set(ids)) != len(ids):
            raise ValueError(f"model ids must be unique (got {ids})")
        return value

    @model_validator(mode="after")
    def _verl_models_have_a_source(self) -> Self:
        for model in self.verl_models:
            if model.s3_uri is None and not self.verl_hub_downloads:
                raise ValueError(
                    f"verl_models: model '{model.id}' has no s3_uri, and verl_hub_downloads is off (give the S3 "
                    "copy and its sha256, or allow hub downloads with a pinned revision)"
                )
            if model.s3_uri is None and model.revision is None:
                raise ValueError(f"verl_models: model '{model.id}' is downloaded from the Hub: pin its revision")
        return self

    @model_validator(mode="after")
    def _verl_defaults_within_ceilings(self) -> Self:
        for default, ceiling in (
            ("verl_lora_rank", "verl_max_lora_rank"),
            ("verl_group_size", "verl_max_group_size"),
            ("verl_steps", "verl_max_steps"),
            ("verl_prompt_length", "verl_max_prompt_length"),
            ("verl_response_length", "verl_max_response_length"),
        ):
            if getattr(self, default) > getattr(self, ceiling):
                raise ValueError(f"{default}: {getattr(self, default)} is above {ceiling} ({getattr(self, ceiling)})")
        if self.verl_lora_rank == 0 and not self.verl_allow_full_finetuning:
            raise ValueError("verl_lora_rank: 0 (full fine-tuning) needs verl_allow_full_finetuning")
        return self
