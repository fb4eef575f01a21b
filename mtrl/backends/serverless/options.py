"""What a run may choose for the ``serverless`` backend: one table of options, each with its type, range and source.

Pure Python (no AWS SDK): the manifest check (``mtrl.runs.manifest``) calls :func:`manifest_problems` at Register, and
the adapter's preflight calls it again. A manifest's ``hyperparameters`` go to the job's ``HyperParameters`` (flat
strings); its ``backend_options`` are the per-run choices below. Anything not in the table is refused: deploy-time
keys (roles, region, the MLflow app) never come from a manifest.

Sources (named on every row):

- ``HYPERPARAMS``: SageMaker AI developer guide, "Hyperparameters reference" for multi-turn RL
  (https://docs.aws.amazon.com/sagemaker/latest/dg/model-customize-mtrl-hyperparams.html), read 2026-12-01.
- ``WORDLE``: the Wordle sample's launcher and README (shared/reference/anchor_wordle_sdk.md A.8, C.2): rollout limits
  the service enforced there, which the hyperparameters page excerpt we could read does not list.
- ``GUIDE``: the AWS ML Blog multi-turn RL hands-on guide and the Wordle sample (reference A.1): supported models and
  their regions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

HYPERPARAMS = (
    "SageMaker MTRL hyperparameters reference (docs.aws.amazon.com/sagemaker/latest/dg/model-customize-mtrl-hyperparams"
    ".html)"
)
WORDLE = "Wordle sample launcher/README (reference anchor_wordle_sdk.md A.8, C.2)"
GUIDE = "AWS ML Blog MTRL hands-on guide and the Wordle sample README (reference A.1)"
AGENTCORE = "Bedrock AgentCore runtime ARN format (reference A.6, A.8: CreateJob AgentConfig.BedrockAgentCoreConfig)"

Kind = Literal["int", "float", "choice", "bool", "str", "int_list"]


@dataclass(frozen=True)
class Option:
    """One per-run choice: ``low``/``high`` bound numbers (``low_open`` excludes ``low``), ``choices`` enumerate."""

    name: str
    kind: Kind
    source: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple[Any, ...] = ()
    pattern: str | None = None
    meaning: str = ""

    def problem(self, value: Any) -> str | None:  # noqa: PLR0911 - one return per kind
        """Why ``value`` is not acceptable, or None."""
        if self.kind == "bool":
            return None if isinstance(value, bool) else f"must be true or false (got {value!r})"
        if self.kind == "str":
            if not isinstance(value, str) or not value:
                return f"must be a non-empty string (got {value!r})"
            if self.pattern and not re.fullmatch(self.pattern, value):
                return f"must match {self.pattern} (got {value!r})"
            return None
        if self.kind == "choice":
            return (
                None
                if value in self.choices and not isinstance(value, bool)
                else (f"must be one of {', '.join(map(str, self.choices))} (got {value!r})")
            )
        if self.kind == "int_list":
            if not isinstance(value, list) or not value:
                return f"must be a non-empty list of whole numbers (got {value!r})"
            bad = [
                item
                for item in value
                if self._number_problem(item, whole=True) or (self.choices and item not in self.choices)
            ]
            return f"entries {bad}: {self._range_text()}" if bad else None
        return self._number_problem(value, whole=self.kind == "int")

    def _number_problem(self, value: Any, *, whole: bool) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return f"must be a {'whole ' if whole else ''}number (got {value!r})"
        if whole and not float(value).is_integer():
            return f"must be a whole number (got {value!r})"
        below = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        above = self.high is not None and value > self.high
        return f"{self._range_text()} (got {value!r})" if below or above else None

    def _range_text(self) -> str:
        if self.choices:
            return f"must be one of {', '.join(map(str, self.choices))}"
        low = "-inf" if self.low is None else f"{self.low:g}"
        high = "inf" if self.high is None else f"{self.high:g}"
        return f"must be in {'(' if self.low_open else '['}{low}, {high}]"


def _int(name: str, low: float | None, high: float | None, source: str = HYPERPARAMS, meaning: str = "") -> Option:
    return Option(name, "int", source, low=low, high=high, meaning=meaning)


def _float(name: str, low: float | None, high: float | None, *, low_open: bool = False, source: str = HYPERPARAMS,
           meaning: str = "") -> Option:  # fmt: skip
    return Option(name, "float", source, low=low, high=high, low_open=low_open, meaning=meaning)


ADVANTAGE_METHODS = (
    "monte_carlo",
    "group_based",
    "group_based_per_turn",
    "rloo",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "opo",
    "grpo_passk",
    "gpg",
)
LOSS_FUNCTIONS = ("importance_sampling", "ppo", "cispo")
REASONING_EFFORTS = ("low", "medium", "high")
NOTIFICATIONS = ("all", "failures", "none")

# Training hyperparameters: sent to the job as flat strings under TrainingConfig.HyperParameters.
TRAINING_HYPERPARAMETERS: dict[str, Option] = {
    option.name: option
    for option in (
        Option("global_batch_size", "choice", HYPERPARAMS, choices=(32, 64, 128), meaning="unique prompts per step"),
        _int("group_size", 2, 32, meaning="rollouts per prompt (GRPO/RLOO group)"),
        Option("advantage_method", "choice", HYPERPARAMS, choices=ADVANTAGE_METHODS),
        Option("loss_fn", "choice", HYPERPARAMS, choices=LOSS_FUNCTIONS, meaning="RL loss function"),
        _float("clip_low_threshold", 0, 1),
        _float("clip_high_threshold", 1, 10),
        _float("temperature", 0, 2, meaning="rollout sampling temperature"),
        _float("sampling_top_p", 0, 1),
        _int("sampling_max_tokens", 512, 8192, meaning="tokens per turn during rollouts"),
        _float("success_threshold", None, None, meaning="reward at which a validation rollout counts as solved"),
        _int("max_epochs", 1, 30),
        _int("max_steps", 1, 1000, meaning="training steps"),
        _int("val_every", 0, 100),
        _int("lora_rank", 16, 64),
        _int("lora_alpha", 16, 128),
        _float("learning_rate", 0, 1e-2, low_open=True),
        _float("adam_beta1", 0, 0.999999),
        # Not in the excerpt of the reference we could read; bounded like adam_beta1 (the Wordle run used 0.95).
        _float("adam_beta2", 0, 0.999999, source=f"{WORDLE}; range as adam_beta1 in {HYPERPARAMS}"),
        _int("rollout_max_concurrency", 32, 96, source=WORDLE),
        _int("rollout_timeout", 1, None, source=WORDLE, meaning="seconds per rollout (service default 600)"),
        _int("rollout_max_retries", 0, None, source=WORDLE),
        _int("max_steps_off_policy", 0, None, source=WORDLE),
        _int("save_every", 1, None, source=WORDLE, meaning="steps between intermediate checkpoints"),
    )
}

# Evaluation (AgentRFTEvaluation) hyperparameters a run may set; the rest are fixed by mtrl (reference A.9).
EVALUATION_HYPERPARAMETERS: dict[str, Option] = {
    name: TRAINING_HYPERPARAMETERS[name]
    for name in (
        "temperature",
        "sampling_top_p",
        "sampling_max_tokens",
        "success_threshold",
        "rollout_timeout",
        "rollout_max_concurrency",
        "rollout_max_retries",
    )
}

# backend_options of a serverless run.
RUN_OPTIONS: dict[str, Option] = {
    option.name: option
    for option in (
        Option(
            "agent_runtime_arn",
            "str",
            AGENTCORE,
            pattern=r"arn:aws[a-z\-]*:bedrock-agentcore:[a-z0-9\-]+:\d{12}:runtime/[A-Za-z0-9_\-]+",
            meaning="an existing Bedrock AgentCore runtime plays the episodes instead of the environment's Lambda",
        ),
        Option("agent_qualifier", "str", AGENTCORE, pattern=r"[A-Za-z0-9_\-]{1,64}", meaning="runtime endpoint"),
        Option(
            "reasoning_effort",
            "choice",
            f"{WORDLE} (A.5: the agent's request parameter, not a job hyperparameter)",
            choices=REASONING_EFFORTS,
            meaning="reasoning_effort the deployed agent Lambda sends with every Sample request",
        ),
        Option(
            "intermediate_checkpoints",
            "bool",
            f"{WORDLE} (A.8: ModelPackageConfig.IntermediateCheckpointModelPackageGroupArn)",
            meaning="register intermediate checkpoints as model packages in the deployment's package group",
        ),
        Option(
            "notifications",
            "choice",
            "mtrl (the run's SNS notification)",
            choices=NOTIFICATIONS,
            meaning="which run endings publish the run notification",
        ),
        _int("eval_group_size", 1, 32, source=f"{WORDLE} (A.9: eval_group_size)", meaning="rollouts per eval prompt"),
        Option(
            "eval_pass_k",
            "int_list",
            f"{HYPERPARAMS} (val_metrics_config.pass_k_values) and {WORDLE} (A.9: k <= group size)",
            choices=(1, 2, 4, 8, 16, 32),
            meaning="k values of pass@k",
        ),
        _int("eval_max_runtime_seconds", 60, 7 * 24 * 3600, source=f"{WORDLE} (A.9: StoppingCondition)"),
    )
}
# eval_hyperparameters is a mapping checked against EVALUATION_HYPERPARAMETERS.
EVAL_HYPERPARAMETERS_OPTION = "eval_hyperparameters"


@dataclass(frozen=True)
class ServiceModel:
    hub_id: str
    name: str
    regions: frozenset[str]
    aliases: tuple[str, ...] = ()


# The base models serverless MTRL offers, and where. Sources: GUIDE ("at the time of writing") for GPT-OSS-20B and
# Nova 2 Lite; for Qwen 3.6 27B, the SageMaker AI developer guide "Open weight model customization" (its table marks
# huggingface-vlm-qwen3-6-27b for MTRL (LoRA)) and aws/sagemaker-hyperpod-recipes
# launcher/recipe_templatization/mtrl/mtrl_regional_parameters.json (the MTRL rft-trainer image is in us-west-2 only),
# as read on 2026-12-01. Gemma 4 31B is offered in
# us-west-2 too, but no source gives its hub model id: add it here to use it. The live list is
# MultiTurnRLTrainer.list_supported_models() (sagemaker-train) in an account; this table is what preflight checks.
SERVICE_MODELS: tuple[ServiceModel, ...] = (
    ServiceModel(
        "openai-reasoning-gpt-oss-20b", "GPT-OSS-20B", frozenset({"us-east-1", "us-west-2"}), ("gpt-oss-20b",)
    ),
    ServiceModel(
        "nova-textgeneration-lite-v2",
        "Amazon Nova 2 Lite",
        frozenset({"us-east-1", "us-west-2"}),
        ("nova-2-lite", "amazon.nova-2-lite-v1:0:256k"),
    ),
    ServiceModel("huggingface-vlm-qwen3-6-27b", "Qwen3.6 27B", frozenset({"us-west-2"}), ("qwen3.6-27b",)),
)


def model_region_problem(model: str, region: str) -> str | None:
    """Why the service does not offer ``model`` in ``region`` (None when it does)."""
    for entry in SERVICE_MODELS:
        if model == entry.hub_id or model in entry.aliases:
            if region in entry.regions:
                return None
            return (
                f"serverless MTRL offers {entry.name} ({entry.hub_id}) in {', '.join(sorted(entry.regions))}, "
                f"not in {region}"
            )
    known = ", ".join(f"{entry.hub_id} ({'/'.join(sorted(entry.regions))})" for entry in SERVICE_MODELS)
    return f"base model {model!r} is not one serverless MTRL offers (known: {known}; table in {__name__})"


def hyperparameter_problems(values: Mapping[str, Any], table: Mapping[str, Option], *, where: str) -> list[str]:
    problems = []
    for name in sorted(values):
        option = table.get(name)
        if option is None:
            problems.append(f"{where} '{name}' is not a documented serverless MTRL hyperparameter (known: "
                            f"{', '.join(sorted(table))})")  # fmt: skip
            continue
        problem = option.problem(values[name])
        if problem:
            problems.append(f"{where} '{name}' {problem} (source: {option.source})")
    return problems


def option_problems(options: Mapping[str, Any]) -> list[str]:
    """Problems with a serverless run's ``backend_options``; unknown keys are refused."""
    problems = []
    for name in sorted(options):
        value = options[name]
        if name == EVAL_HYPERPARAMETERS_OPTION:
            if not isinstance(value, Mapping):
                problems.append(f"backend_options '{name}' must be an object of evaluation hyperparameters")
            else:
                problems += hyperparameter_problems(value, EVALUATION_HYPERPARAMETERS, where=f"{name}")
            continue
        option = RUN_OPTIONS.get(name)
        if option is None:
            known = ", ".join(sorted([*RUN_OPTIONS, EVAL_HYPERPARAMETERS_OPTION]))
            problems.append(f"backend_options '{name}' is not a per-run serverless option (known: {known})")
            continue
        problem = option.problem(value)
        if problem:
            problems.append(f"backend_options '{name}' {problem} (source: {option.source})")
    group = options.get("eval_group_size", 1)
    pass_k = options.get("eval_pass_k")
    if isinstance(pass_k, list) and isinstance(group, int) and not isinstance(group, bool):
        too_big = [k for k in pass_k if isinstance(k, int) and k > group]
        if too_big:
            problems.append(f"backend_options 'eval_pass_k' {too_big} exceed eval_group_size ({group})")
    if "reasoning_effort" in options and "agent_runtime_arn" in options:
        problems.append(
            "backend_options 'reasoning_effort' applies to the deployed agent Lambdas; an AgentCore runtime reads its "
            "own setting (REASONING_EFFORT in its environment, reference A.5)"
        )
    if "agent_qualifier" in options and "agent_runtime_arn" not in options:
        problems.append("backend_options 'agent_qualifier' needs 'agent_runtime_arn'")
    return problems


def manifest_problems(hyperparameters: Mapping[str, Any], backend_options: Mapping[str, Any]) -> list[str]:
    """Everything wrong with a serverless run's per-run choices (empty when they are all acceptable)."""
    return hyperparameter_problems(hyperparameters, TRAINING_HYPERPARAMETERS, where="hyperparameter") + option_problems(
        backend_options
    )


def run_hyperparameter_problems(settings: Any) -> list[str]:
    """A resolved run's training hyperparameters against the service's documented ranges (the descriptor's
    ``manifest_check``; the per-run options are checked by their model)."""
    return hyperparameter_problems(settings.hyperparameters, TRAINING_HYPERPARAMETERS, where="hyperparameter")
