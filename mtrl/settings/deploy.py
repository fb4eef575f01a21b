"""The deploy-time settings model and how it is read from CDK context.

Every settings group (one module per concern) is mixed into ``DeploySettings``; a later concern adds
its own group module and one base class here. Keys are flat so ``cdk synth -c key=value`` works.
"""

from __future__ import annotations

import difflib
import json
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from pydantic import ValidationError, model_validator

from mtrl.contracts.descriptor import resolve
from mtrl.contracts.problems import problems_from_validation_error
from mtrl.contracts.registry import descriptor_for
from mtrl.settings import eks_support
from mtrl.settings.backends import BackendSettings
from mtrl.settings.base import SettingsError, SettingsGroup
from mtrl.settings.cluster import ClusterSettings
from mtrl.settings.core import CoreSettings
from mtrl.settings.data import DataSettings
from mtrl.settings.emulator import EmulatorSettings
from mtrl.settings.environments import ENV_ID_PATTERN, EnvironmentSettings
from mtrl.settings.network import NetworkSettings
from mtrl.settings.pipeline import MAX_RUN_INSTANCES, PipelineSettings, cluster_backend_refusal
from mtrl.settings.reward_workers import RewardWorkerSettings
from mtrl.settings.verl import VerlSettings

# The serverless profile (deployment_profile=serverless): no EKS, no HyperPod, no NAT gateway (docs/operations.md).
SERVERLESS_PROFILE: dict[str, Any] = {"deploy_cluster": False, "nat_gateways": "none", "run_backend": "serverless"}

# Context keys that belong to CDK itself (feature flags, lookups, CLI switches), never to mtrl.
_OUR_KEY = re.compile(r"^[a-z][a-z0-9_]*$")


# One group per concern, in the order the documentation lists them.
SETTINGS_GROUPS: tuple[type[SettingsGroup], ...] = (
    CoreSettings,
    NetworkSettings,
    DataSettings,
    EnvironmentSettings,
    PipelineSettings,
    ClusterSettings,
    RewardWorkerSettings,
    BackendSettings,
    VerlSettings,
    EmulatorSettings,
)


# Bases reversed: pydantic orders fields base-last.
class DeploySettings(
    EmulatorSettings,
    VerlSettings,
    BackendSettings,
    RewardWorkerSettings,
    ClusterSettings,
    PipelineSettings,
    EnvironmentSettings,
    DataSettings,
    NetworkSettings,
    CoreSettings,
):
    """Everything a deployment can be configured with (docs/configuration.md is generated from it)."""

    def default_backend_gaps(self, ssm: Any = None) -> list[str]:
        """What the default backend still lacks before a run can start, each naming the command that supplies it
        (its descriptor's ``readiness``; with an SSM client, what the deployment registered after deploy counts)."""
        hook = descriptor_for(self.run_backend).readiness
        gaps: list[str] = list(resolve(hook)(self, ssm)) if hook is not None else []
        return gaps

    def default_backend_warning(self, ssm: Any = None, *, subject: str = "the default backend") -> str | None:
        """``default_backend_gaps`` as one line (None when there are none): config show, the synth and submit."""
        gaps = self.default_backend_gaps(ssm)
        if not gaps:
            return None
        return f"{subject} '{self.run_backend}' cannot run yet: " + "; ".join(gaps)

    @property
    def usable_agent_runtime_arns(self) -> list[str]:
        """The AgentCore runtimes a serverless run may call: the deployment's own and those manifests may name."""
        own = [self.serverless_agent_runtime_arn] if self.serverless_agent_runtime_arn else []
        return list(dict.fromkeys([*own, *self.run_allowed_agent_runtime_arns]))

    @model_validator(mode="before")
    @classmethod
    def _default_backend_follows_the_cluster(cls, values: Any) -> Any:
        # Nova Forge (hyperpod) trains only on a restricted instance group; without one, runs default to verl.
        if (
            isinstance(values, dict)
            and values.get("run_backend") is None
            and values.get("hyperpod_restricted_instance_group") is not None
        ):
            return {**values, "run_backend": "hyperpod"}
        return values

    @model_validator(mode="before")
    @classmethod
    def _profile_defaults(cls, values: Any) -> Any:
        # A profile is a set of defaults: what the operator sets explicitly wins.
        if isinstance(values, dict) and values.get("deployment_profile") == "serverless":
            return {**SERVERLESS_PROFILE, **values}
        return values

    @model_validator(mode="after")
    def _nat_only_where_a_cluster_needs_none(self) -> Self:
        if self.nat_gateways == "none" and self.deploy_cluster:
            raise ValueError(
                "nat_gateways: 'none' is not supported with a cluster: without a NAT gateway the private subnets have "
                "no internet egress, but the deploy-time Helm installer downloads the HyperPod chart from GitHub, "
                "HyperPod nodes and the Nova Forge runner reach public endpoints (SageMaker Hub, CloudFormation) that "
                "have no VPC endpoint here; use 'single' (one shared NAT gateway, the cheapest) "
                "or 'per_az', or deploy without a cluster (deploy_cluster=false, deployment_profile=serverless)"
            )
        if not self.deploy_cluster and self.uses_existing_cluster:
            raise ValueError(
                "deploy_cluster: false means no cluster, but existing_hyperpod_cluster_name names one to use; "
                "drop one of them"
            )
        return self

    @model_validator(mode="after")
    def _default_backend_is_configured(self) -> Self:
        # What the default backend needs from the deployment (hyperpod: a restricted group), from its descriptor.
        problem = self.backend_problem(self.run_backend)
        if problem:
            raise ValueError(problem)
        return self

    def backend_problem(self, backend: str) -> str | None:
        """Why this deployment cannot run ``backend``'s runs, naming the setting to change; None when it can.

        From the backend's descriptor only: a backend that trains on the cluster (``needs_cluster``) needs one, and
        its ``deploy_check`` names what else it needs (hyperpod: a restricted instance group). The default backend
        must pass it; any other backend that does not is not deployed (``stacks.backends.contract.deployed_sides``:
        no statements, roles or values), and its runs are refused (Register for a missing cluster, Preflight else).
        """
        descriptor = descriptor_for(backend)
        if descriptor.needs_cluster and not self.deploy_cluster:
            return cluster_backend_refusal("run_backend", backend)
        check = descriptor.deploy_check
        problem: str | None = resolve(check)(self) if check is not None else None
        return problem

    @model_validator(mode="after")
    def _kubernetes_version_in_standard_support(self) -> Self:
        problem = eks_support.standard_support_problem(self, today=eks_support.utc_today())
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _zones_in_region(self) -> Self:
        foreign = [zone for zone in self.availability_zones if not zone.startswith(self.region)]
        if foreign:
            raise ValueError(f"availability_zones: {foreign} are not in region '{self.region}'")
        return self

    @model_validator(mode="after")
    def _zone_count_addressable(self) -> Self:
        # An account-agnostic stack can name only two AZs (CDK renders Fn::Select 0 and 1 of Fn::GetAZs), so a
        # larger az_count would silently give a 2-AZ VPC while `mtrl config show` says otherwise.
        if self.account is None and not self.availability_zones and not self.vpc_id and self.az_count > 2:
            raise ValueError(
                f"az_count: {self.az_count} AZs need their names: pass availability_zones (for example "
                f"-c availability_zones={self.region}a,{self.region}b,{self.region}c), or set account (or synth with "
                "credentials) so CDK looks the account's AZs up; without either a synth can address only 2 AZs"
            )
        return self

    @model_validator(mode="after")
    def _capacity_wait_within_provision_wait(self) -> Self:
        if self.hyperpod_capacity_timeout_minutes > self.provision_max_wait_minutes:
            raise ValueError(
                f"hyperpod_capacity_timeout_minutes: {self.hyperpod_capacity_timeout_minutes} exceeds "
                f"provision_max_wait_minutes ({self.provision_max_wait_minutes}); the capacity error would never show"
            )
        return self

    @model_validator(mode="after")
    def _custom_env_is_the_run_environment(self) -> Self:
        if self.custom_env_id is not None and not self.use_custom_env:
            raise ValueError(
                f"custom_env_id: '{self.custom_env_id}' is set but use_custom_env is false, so it would be ignored "
                "(set use_custom_env to true to use it, or remove custom_env_id)"
            )
        if self.use_custom_env and self.run_environment != self.custom_env_id:
            raise ValueError(
                f"run_environment: '{self.run_environment}' differs from custom_env_id '{self.custom_env_id}' while "
                "use_custom_env is true (the reward workers and the agent run the custom one; leave run_environment "
                "unset and it follows custom_env_id)"
            )
        return self

    @model_validator(mode="after")
    def _default_run_fits_the_training_group(self) -> Self:
        group = self.run_instance_group
        if not self.uses_existing_cluster and self.run_instance_count > group.run_count:
            raise ValueError(
                f"run_instance_count: {self.run_instance_count} is above the run_count {group.run_count} of the "
                f"instance group '{group.name}' runs scale (raise that group's run_count, or ask for fewer)"
            )
        if (
            not self.uses_existing_cluster
            and self.run_max_instance_count is not None
            and self.run_max_instance_count > group.run_count
        ):
            raise ValueError(
                f"run_max_instance_count: {self.run_max_instance_count} is above the run_count {group.run_count} of "
                f"the instance group '{group.name}' runs scale"
            )
        return self

    @model_validator(mode="after")
    def _one_run_per_gpu_group(self) -> Self:
        # Each run sets the training group's count and the first to tear down scales it back to idle under the
        # other (docs/operations.md, "One GPU group per concurrent run"); a deployment has exactly one such group.
        # The emulator's runs train on the CPU (local backend) and share no group.
        if self.max_concurrent_runs > 1 and not self.emulator:
            raise ValueError(
                f"max_concurrent_runs: {self.max_concurrent_runs} runs at once would share the one training "
                f"instance group '{self.run_instance_group.name}' (each run sets its count, and the first to finish "
                "scales it back to idle under the others); concurrent runs must not share a GPU group, so keep 1"
            )
        return self

    @model_validator(mode="after")
    def _run_workers_within_max_tasks(self) -> Self:
        ceiling = self.run_max_worker_count
        if ceiling is not None and ceiling > self.reward_worker_max_tasks:
            raise ValueError(
                f"run_max_worker_count: {ceiling} is above reward_worker_max_tasks ({self.reward_worker_max_tasks})"
            )
        if self.run_worker_count > self.reward_worker_max_tasks:
            raise ValueError(
                f"run_worker_count: {self.run_worker_count} is above reward_worker_max_tasks "
                f"({self.reward_worker_max_tasks}), the most reward-worker tasks one run may start"
            )
        return self

    def derived_run_ceilings(self) -> dict[str, int]:
        """The per-run ceilings the operator left empty, from the settings they follow from."""
        derived: dict[str, int] = {}
        if self.run_max_instance_count is None and not self.uses_existing_cluster:
            derived["run_max_instance_count"] = min(self.run_instance_group.run_count, MAX_RUN_INSTANCES)
        if self.run_max_worker_count is None:
            derived["run_max_worker_count"] = self.reward_worker_max_tasks
        return derived


def _is_textual(annotation: Any) -> bool:
    """True when a field accepts plain strings, so a -c value must not be parsed as JSON (nor a bare word such as
    ``none`` be taken for null: ``-c nat_gateways=none`` must reach the field's own validation)."""
    if typing.get_origin(annotation) in {typing.Union, types.UnionType}:
        return any(_is_textual(arg) for arg in typing.get_args(annotation) if arg is not type(None))
    if typing.get_origin(annotation) is typing.Literal:
        return all(isinstance(arg, str) for arg in typing.get_args(annotation))
    return annotation is str


def _decode_cli_value(key: str, value: Any) -> Any:
    """`-c key=value` always yields strings; decode JSON for lists, dicts, numbers and booleans."""
    field = DeploySettings.model_fields.get(key)
    if not isinstance(value, str) or field is None or _is_textual(field.annotation):
        return value
    text = value.strip()
    if text in {"", "null", "none", "None"}:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        if text.startswith(("[", "{")):
            raise SettingsError([f"setting '{key}': value is not valid JSON ({text!r})"]) from None
        # A bare word for a list setting: accept a comma-separated list.
        if typing.get_origin(field.annotation) is list:
            return [item.strip() for item in text.split(",") if item.strip()]
        return value


def _null_means_default(key: str, value: Any) -> bool:
    field = DeploySettings.model_fields.get(key)
    return value is None and field is not None and not _accepts_none(field.annotation)


def _accepts_none(annotation: Any) -> bool:
    return type(None) in typing.get_args(annotation)


def settings_keys_from_context(context: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a CDK context that is mtrl configuration (CDK's own keys are left out)."""
    return {key: value for key, value in context.items() if _OUR_KEY.match(key)}


def load_settings(context: Mapping[str, Any], *, environ: Mapping[str, str] | None = None) -> DeploySettings:
    """Validate configuration from CDK context (cdk.json + ``-c`` overrides) into ``DeploySettings``.

    ``environ`` supplies CDK_DEFAULT_ACCOUNT / CDK_DEFAULT_REGION for settings not given explicitly.
    Raises ``SettingsError`` naming every bad key; nothing is partially applied.
    """
    raw = settings_keys_from_context(context)
    problems: list[str] = []
    for key in raw:
        if key not in DeploySettings.model_fields:
            close = difflib.get_close_matches(key, DeploySettings.model_fields, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            problems.append(f"setting '{key}': unknown setting{hint}")
    if problems:
        raise SettingsError(problems)
    values: dict[str, Any] = {}
    for key, value in raw.items():
        decoded = _decode_cli_value(key, value)
        if not _null_means_default(key, decoded):
            values[key] = decoded
    env = environ or {}
    custom_env_id = values.get("custom_env_id")
    # Runs default to the environment the deployment serves; a malformed id is left for custom_env_id's own check
    # to report (copied, it would be reported under run_environment, a key the user never set).
    well_formed = isinstance(custom_env_id, str) and ENV_ID_PATTERN.match(custom_env_id) is not None
    if values.get("use_custom_env") is True and "run_environment" not in values and well_formed:
        values["run_environment"] = custom_env_id
    if values.get("account") is None and env.get("CDK_DEFAULT_ACCOUNT"):
        values["account"] = env["CDK_DEFAULT_ACCOUNT"]
    if "region" not in values and env.get("CDK_DEFAULT_REGION"):
        values["region"] = env["CDK_DEFAULT_REGION"]
    try:
        return DeploySettings.model_validate(values)
    except ValidationError as error:
        raise SettingsError(problems_from_validation_error(error)) from None


def read_cdk_json_context(path: Path) -> dict[str, Any]:
    """The ``context`` block of a cdk.json file (empty when the file has none)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SettingsError([f"file '{path}': not found (run from the project root or pass --cdk-json)"]) from None
    except json.JSONDecodeError as error:
        raise SettingsError([f"file '{path}': not valid JSON ({error})"]) from None
    context = document.get("context", {})
    if not isinstance(context, dict):
        raise SettingsError([f"file '{path}': 'context' must be an object"])
    return context


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    """Parse ``key=value`` strings as the CDK CLI does for ``-c``."""
    overrides: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SettingsError([f"override '{pair}': expected key=value"])
        overrides[key.strip()] = value
    return overrides
