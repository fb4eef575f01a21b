"""The ``serverless`` backend: SageMaker AI serverless multi-turn RL (``CreateJob``, ``JobCategory=AgentRFT``).

The service trains; an agent (the Lambda deployed for the run's environment, or an existing Bedrock AgentCore
runtime) plays the episodes and reports rewards through the ``sagemakerjobruntime`` API. The only per-run
resources are the jobs themselves (training, then optionally an ``AgentRFTEvaluation`` job). The installed botocore
(≥ 1.43.37) models ``CreateJob``/``DescribeJob``/``StopJob`` and ``sagemakerjobruntime``.

Modules of this package: ``settings`` (what a run is submitted with, which agent it uses), ``options`` (the one
table of per-run choices and the region/model table), ``documents`` (dataset rows and ``JobConfigDocument``),
``status`` (``DescribeJob`` → status, billable tokens), ``smoke`` (the agent smoke test). This module is the adapter;
it re-exports the public names of the others.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from mtrl.backends._aws import (
    Arn,
    AwsClients,
    S3Uri,
    backend_error,
    error_code,
    error_message,
    short_token,
)
from mtrl.backends.episode_rows import update_signals
from mtrl.backends.serverless.cost import estimate as price_run
from mtrl.backends.serverless.documents import (
    agent_options,
    build_evaluation_config,
    build_training_config,
    convert_dataset,
    evaluation_sampling,
    job_name_for,
    run_input_prefix,
    service_rows,
    to_service_row,
)
from mtrl.backends.serverless.settings import (
    DEFAULT_BASE_MODEL,
    EVALUATION_CATEGORY,
    JOB_KIND,
    JOB_TRUST_PRINCIPAL,
    SCHEMA_VERSION,
    TRAINING_CATEGORY,
    Agent,
    HyperValue,
    ServerlessSettings,
    parse_settings,
)
from mtrl.backends.serverless.smoke import AgentProbe, SmokeOutcome, SmokeResult, classify_smoke, smoke_payload
from mtrl.backends.serverless.status import (
    check_job_role_trust,
    job_from_arn,
    job_status_from_description,
    usage_for_cost,
)
from mtrl.contracts.backend import BackendError, CreatedResource, Finding, JobState, JobStatus, RunContext
from mtrl.cost import CostError, load_price_book
from mtrl.envs.registry import EnvironmentNotFoundError, InvalidEnvironmentError, load_spec
from mtrl.health.emf import JOB_DIMENSION
from mtrl.health.evaluation import describe
from mtrl.health.signals import SignalsError

__all__ = [
    "DEFAULT_BASE_MODEL",
    "EVALUATION_CATEGORY",
    "JOB_KIND",
    "JOB_TRUST_PRINCIPAL",
    "SCHEMA_VERSION",
    "TRAINING_CATEGORY",
    "Agent",
    "HyperValue",
    "ServerlessAdapter",
    "ServerlessSettings",
    "SmokeOutcome",
    "SmokeResult",
    "build_evaluation_config",
    "build_training_config",
    "check_job_role_trust",
    "classify_smoke",
    "convert_dataset",
    "job_name_for",
    "job_status_from_description",
    "parse_settings",
    "run_input_prefix",
    "smoke_payload",
    "to_service_row",
]

BASELINE_PURPOSE = "baseline"  # a CreatedResource detail: the evaluation job of the base model, before training


class ServerlessAdapter:
    name = "serverless"

    def __init__(
        self,
        clients: AwsClients | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        log_wait_attempts: int = 3,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._clients = clients or AwsClients()
        self._sleep = sleep
        self._clock = clock
        self._log_wait_attempts = log_wait_attempts

    # -- preflight ----------------------------------------------------------------------------------------------

    def preflight(self, run: RunContext) -> list[Finding]:
        try:
            settings = parse_settings(run.settings)
        except BackendError as error:
            return [Finding("settings", False, str(error))]
        findings = [Finding("settings", True, "serverless settings are complete; hyperparameters in range")]
        agent_problem = settings.agent_problem()
        if agent_problem:
            findings.append(Finding("agent", False, agent_problem))
        else:
            agent = settings.agent
            assert agent is not None
            findings.append(Finding("agent", True, f"episodes are played by {agent.source} ({agent.arn})"))
        model_problem = settings.model_region_problem()
        findings.append(
            Finding("base-model", False, model_problem)
            if model_problem
            else Finding("base-model", True, f"{settings.serverless_base_model} is offered in {settings.region}")
        )
        findings.append(self._check_regions(run, settings))
        findings.append(self._check_role_trust(settings))
        findings.append(self._check_mlflow_and_packages(settings))
        findings.append(
            Finding("eula", True, f"EULA of {settings.serverless_base_model} accepted")
            if settings.serverless_accept_eula
            else Finding(
                "eula", False, f"set serverless_accept_eula=true to accept the EULA of {settings.serverless_base_model}"
            )
        )
        if all(finding.ok for finding in findings):
            # Only worth invoking the agent once everything it depends on is right.
            result = self.smoke_test(run, settings)
            findings.append(Finding("agent-smoke-test", result.ok, result.message))
        return findings

    def _check_regions(self, run: RunContext, settings: ServerlessSettings) -> Finding:
        region = settings.region
        elsewhere: list[str] = []
        for label, arn in (
            ("agent", settings.agent_arn),
            ("MLflow app", settings.serverless_mlflow_app_arn),
            ("model package group", settings.serverless_model_package_group_arn),
            ("KMS key", settings.kms_key_arn),
        ):
            if arn and Arn.parse(arn).region not in {region, ""}:
                elsewhere.append(f"{label} in {Arn.parse(arn).region}")
        s3 = self._clients.client("s3", region)
        buckets = {S3Uri.parse(run.output_uri).bucket, S3Uri.parse(run.dataset_uri).bucket}
        for bucket in sorted(buckets):
            try:
                location = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint") or "us-east-1"
            except ClientError as error:
                return Finding("region", False, f"cannot read the region of bucket {bucket}: {error_message(error)}")
            location = "eu-west-1" if location == "EU" else location
            if location != region:
                elsewhere.append(f"bucket {bucket} in {location}")
        if elsewhere:
            return Finding(
                "region", False, f"job, agent and bucket must share region {region}; found {'; '.join(elsewhere)}"
            )
        return Finding("region", True, f"job, agent, MLflow app and buckets are all in {region}")

    def _check_role_trust(self, settings: ServerlessSettings) -> Finding:
        role_name = Arn.parse(settings.serverless_job_role_arn).resource.split("/")[-1]
        iam = self._clients.client("iam", settings.region)
        try:
            document = iam.get_role(RoleName=role_name)["Role"]["AssumeRolePolicyDocument"]
        except ClientError as error:
            return Finding("job-role-trust", False, f"cannot read job role {role_name}: {error_message(error)}")
        return check_job_role_trust(role_name, document)

    def _check_mlflow_and_packages(self, settings: ServerlessSettings) -> Finding:
        """The MLflow app is mandatory for the service, and the output model package group must exist."""
        sagemaker = self._clients.client("sagemaker", settings.region)
        try:
            app = sagemaker.describe_mlflow_app(Arn=settings.serverless_mlflow_app_arn)
        except ClientError as error:
            return Finding("mlflow-and-model-packages", False, f"MLflow app: {error_message(error)}")
        if app.get("Status") not in {"Created", "Updated"}:
            return Finding("mlflow-and-model-packages", False, f"MLflow app is {app.get('Status')}, not ready")
        try:
            # By name (the API takes either); the ARN's region was checked above.
            name = Arn.parse(settings.serverless_model_package_group_arn).resource.split("/", 1)[-1]
            group = sagemaker.describe_model_package_group(ModelPackageGroupName=name)
        except ClientError as error:
            return Finding("mlflow-and-model-packages", False, f"model package group: {error_message(error)}")
        if group["ModelPackageGroupStatus"] != "Completed":
            return Finding(
                "mlflow-and-model-packages", False, f"model package group is {group['ModelPackageGroupStatus']}"
            )
        return Finding("mlflow-and-model-packages", True, "MLflow app ready; model package group exists")

    def smoke_test(self, run: RunContext, settings: ServerlessSettings | None = None) -> SmokeResult:
        """Invoke the run's agent with a fake job ARN of this account and classify what happened."""
        settings = settings or parse_settings(run.settings)
        agent = settings.agent
        if agent is None:
            return SmokeResult("other", settings.agent_problem() or "no agent")
        sts = self._clients.client("sts", settings.region)
        account = sts.get_caller_identity()["Account"]
        partition = Arn.parse(settings.serverless_job_role_arn).partition
        token = short_token(f"{run.run_id}-{time.time()}", 12)
        job_arn = f"arn:{partition}:sagemaker:{settings.region}:{account}:job/{TRAINING_CATEGORY}/mtrl-smoke-{token}"
        payload = smoke_payload(self._first_prompt(run, settings), job_arn, settings.region, f"mtrl-smoke-{token}")
        timeout = settings.serverless_smoke_test_timeout_seconds
        probe = AgentProbe(self._clients, settings.region, sleep=self._sleep, log_wait_attempts=self._log_wait_attempts)
        evidence, timed_out = probe.invoke(agent, payload, timeout, token)
        return classify_smoke(evidence, timed_out=timed_out, job_arn=job_arn, timeout_seconds=timeout)

    def _first_prompt(self, run: RunContext, settings: ServerlessSettings) -> str:
        s3 = self._clients.client("s3", settings.region)
        for row in service_rows(s3, S3Uri.parse(run.dataset_uri), agent_options(settings)):
            return row["prompt"]
        raise BackendError(f"{run.dataset_uri} has no rows to smoke-test the agent with")

    # -- provision / submit ------------------------------------------------------------------------------------

    def provision(self, run: RunContext) -> list[CreatedResource]:
        """Convert the dataset(s) into the service format under ``runs/<run-id>/input/``; no AWS resources."""
        settings = parse_settings(run.settings)
        s3 = self._clients.client("s3", settings.region)
        prefix = run_input_prefix(run)
        options = agent_options(settings)
        try:
            convert_dataset(s3, S3Uri.parse(run.dataset_uri), prefix.join("train", "data.jsonl"), options)
            if run.eval_dataset_uri:
                for channel in ("validation", "evaluation"):
                    convert_dataset(s3, S3Uri.parse(run.eval_dataset_uri), prefix.join(channel, "data.jsonl"), options)
        except ClientError as error:
            raise backend_error(f"run {run.run_id}: converting the dataset", error) from error
        return []

    def submit(self, run: RunContext) -> str:
        settings = parse_settings(run.settings)
        job_name = job_name_for(run.run_id)
        prefix = run_input_prefix(run)
        document = build_training_config(
            settings,
            job_name=job_name,
            train=prefix.join("train/"),
            validation=prefix.join("validation/") if run.eval_dataset_uri else None,
            output=S3Uri.parse(run.output_uri).join("model/"),
        )
        return self._create_job(run, settings, job_name, TRAINING_CATEGORY, document)

    def submit_evaluation(
        self, run: RunContext, model_package_arn: str | None = None, *, baseline: bool = False
    ) -> str:
        """Held-out evaluation (``AgentRFTEvaluation``, pass@k); the base model when no package is given.

        ``baseline``: the run's baseline evaluation before training (its own job name, output folder and
        ``purpose`` detail, so the after-training evaluation never mistakes it for its own job).
        """
        settings = parse_settings(run.settings)
        if not run.eval_dataset_uri:
            raise BackendError(f"run {run.run_id}: evaluation needs an eval split")
        job_name = job_name_for(run.run_id, evaluation=True, baseline=baseline)
        document = build_evaluation_config(
            settings,
            job_name=job_name,
            evaluation=run_input_prefix(run).join("evaluation/"),
            # Under evaluation/ either way: the job role may write runs/*/evaluation/* (backend_roles.py), nothing else.
            output=S3Uri.parse(run.output_uri).join("evaluation/baseline/" if baseline else "evaluation/"),
            model_package_arn=model_package_arn,
        )
        purpose = {"purpose": BASELINE_PURPOSE} if baseline else {}
        return self._create_job(run, settings, job_name, EVALUATION_CATEGORY, document, details=purpose)

    def baseline(self, run: RunContext) -> dict[str, float]:
        """The base model on the held-out split before training (the run's ``baseline_evaluation``): the same
        ``AgentRFTEvaluation`` job and scoring as the after-training evaluation, with no model package. One step of
        a wait loop, like ``evaluate``."""
        return self._evaluation_step(run, baseline=True)

    def evaluate(self, run: RunContext) -> dict[str, float]:
        """Evaluate the trained model on the held-out split (pass@k). One step of a wait loop: raises a transient
        error while the evaluation job runs (the pipeline then waits in the state machine and calls again).

        The first call submits the ``AgentRFTEvaluation`` job (on the training job's output model package); later
        calls return its metrics once it completes. Only one evaluation job may run per account at a time.
        """
        return self._evaluation_step(run, baseline=False)

    def _evaluation_step(self, run: RunContext, *, baseline: bool) -> dict[str, float]:
        settings = parse_settings(run.settings)
        wanted = BASELINE_PURPOSE if baseline else None
        eval_job = next(
            (
                r
                for r in run.resources
                if r.kind == JOB_KIND
                and r.details.get("category") == EVALUATION_CATEGORY
                and r.details.get("purpose") == wanted
            ),
            None,
        )
        if eval_job is None:
            package = None if baseline else self._trained_model_package(run, settings)
            self.submit_evaluation(run, package, baseline=baseline)
            what = "baseline evaluation job (the base model)" if baseline else "evaluation job"
            raise BackendError(f"run {run.run_id}: {what} submitted, waiting for it", transient=True)
        sagemaker = self._clients.client("sagemaker", settings.region)
        try:
            job = sagemaker.describe_job(JobName=eval_job.identifier, JobCategory=EVALUATION_CATEGORY)
        except ClientError as error:
            raise backend_error(f"run {run.run_id}: DescribeJob {eval_job.identifier}", error) from error
        status = job_status_from_description(job)
        if status.state is JobState.SUCCEEDED:
            return dict(status.metrics)
        if status.state.terminal:
            raise BackendError(
                f"run {run.run_id}: evaluation job {eval_job.identifier} ended {status.state}: {status.message}"
            )
        raise BackendError(
            f"run {run.run_id}: evaluation job {eval_job.identifier} is {status.message}", transient=True
        )

    def evaluation_settings(self, run: RunContext) -> dict[str, str]:
        """What the evaluation sampled with (the run's values or the service defaults) and what its score measures
        (the agent reports the environment's external evaluation in evaluation jobs), for the run summary."""
        described = evaluation_sampling(parse_settings(run.settings))
        try:
            measure = describe(load_spec(str(run.settings.get("environment"))))
        except (EnvironmentNotFoundError, InvalidEnvironmentError):
            return described
        return {
            **described,
            "evaluation_measure": measure["measure"],
            "evaluation_description": measure["description"],
        }

    def _trained_model_package(self, run: RunContext, settings: ServerlessSettings) -> str | None:
        training = next(
            (
                r
                for r in run.resources
                if r.kind == JOB_KIND and r.details.get("category", TRAINING_CATEGORY) == TRAINING_CATEGORY
            ),
            None,
        )
        if training is None:
            return None
        job = self._clients.client("sagemaker", settings.region).describe_job(
            JobName=training.identifier, JobCategory=TRAINING_CATEGORY
        )
        return job_status_from_description(job).outputs.get("model_package_arn")

    def _create_job(
        self,
        run: RunContext,
        settings: ServerlessSettings,
        job_name: str,
        category: str,
        document: dict[str, Any],
        *,
        details: Mapping[str, str] | None = None,
    ) -> str:
        sagemaker = self._clients.client("sagemaker", settings.region)
        # The base model is deploy-time, not in the run's manifest: record it so `mtrl cost` prices the right one.
        recorded = {
            "category": category,
            "region": settings.region,
            "base_model": settings.serverless_base_model,
            **(details or {}),
        }
        run.record_resource(CreatedResource(JOB_KIND, job_name, recorded))
        try:
            response = sagemaker.create_job(
                JobName=job_name,
                JobCategory=category,
                RoleArn=settings.serverless_job_role_arn,
                JobConfigSchemaVersion=SCHEMA_VERSION,
                JobConfigDocument=json.dumps(document, sort_keys=True),
                Tags=[{"Key": "mtrl:run-id", "Value": run.run_id[:256]}],
            )
            return str(response["JobArn"])
        except ClientError as error:
            if error_code(error) in {"ResourceInUse", "ConflictException"} or "already exists" in error_message(error):
                # A retried submit after a lost response: the job we created is the answer.
                existing = sagemaker.describe_job(JobName=job_name, JobCategory=category)
                return str(existing["JobArn"])
            raise backend_error(f"run {run.run_id}: CreateJob {job_name}", error) from error

    # -- status / cancel / cleanup -----------------------------------------------------------------------------

    def status(self, run: RunContext, job_id: str) -> JobStatus:
        category, name = job_from_arn(job_id)
        sagemaker = self._clients.client("sagemaker", str(run.settings.get("region", "")) or Arn.parse(job_id).region)
        try:
            job = sagemaker.describe_job(JobName=name, JobCategory=category)
        except ClientError as error:
            raise backend_error(f"run {run.run_id}: DescribeJob {name}", error) from error
        status = job_status_from_description(job)
        usage = status.progress.get("billable_token_usage")
        if usage:
            status = _with_cost(status, run, usage)
        return self._record_signals(run, name, job, status)

    def _record_signals(self, run: RunContext, job_name: str, job: Mapping[str, Any], status: JobStatus) -> JobStatus:
        """Append the signal row of a new step from the agent's episode lines of this job (``episode_rows``). A
        failure here never fails the poll: it is reported in the progress (``signals_error``, naming the run) and
        the row is tried again next poll."""
        region = str(run.settings.get("region", "")) or Arn.parse(str(job["JobArn"])).region
        hyper = run.settings.get("hyperparameters")
        group = hyper.get("group_size") if isinstance(hyper, Mapping) else None
        created = job.get("CreationTime")
        try:
            update_signals(
                s3=self._clients.client("s3", region),
                cloudwatch=self._clients.client("cloudwatch", region),
                run_id=run.run_id,
                output_uri=run.output_uri,
                dimensions={"Environment": str(run.settings.get("environment", "")), JOB_DIMENSION: job_name},
                progress=status.progress,
                job_started=created if isinstance(created, datetime) else None,
                now=datetime.fromtimestamp(self._clock(), UTC),
                group_size=group if isinstance(group, int) and not isinstance(group, bool) and group > 0 else None,
            )
        except (ClientError, BotoCoreError, SignalsError) as error:
            return replace(status, progress={**status.progress, "signals_error": f"run {run.run_id}: {error}"[:500]})
        return status

    def cancel(self, run: RunContext, job_id: str) -> None:
        category, name = job_from_arn(job_id)
        self._stop(str(run.settings.get("region", "")) or Arn.parse(job_id).region, name, category, run.run_id)

    def _stop(self, region: str, name: str, category: str, run_id: str) -> bool:
        """Stop the job unless it already ended; True once it is stopped/ended (or never existed)."""
        sagemaker = self._clients.client("sagemaker", region)
        try:
            job = sagemaker.describe_job(JobName=name, JobCategory=category)
        except ClientError as error:
            if error_code(error) in {"ResourceNotFound", "ResourceNotFoundException", "ValidationException"}:
                return True  # recorded but never created (CreateJob failed): nothing to stop
            raise backend_error(f"run {run_id}: DescribeJob {name}", error) from error
        if job["JobStatus"] in {"Completed", "Failed", "Stopped", "Deleting", "DeleteFailed"}:
            return True
        if job["JobStatus"] != "Stopping":
            try:
                sagemaker.stop_job(JobName=name, JobCategory=category)
            except ClientError as error:
                raise backend_error(f"run {run_id}: StopJob {name}", error) from error
        return True

    def cleanup(self, run: RunContext) -> list[CreatedResource]:
        """Stop every job this run recorded that is still running. Jobs are kept (their record is the history)."""
        removed: list[CreatedResource] = []
        region_default = str(run.settings.get("region", ""))
        for resource in run.resources:
            if resource.kind != JOB_KIND:
                continue
            region = str(resource.details.get("region") or region_default)
            category = str(resource.details.get("category", TRAINING_CATEGORY))
            if self._stop(region, resource.identifier, category, run.run_id):
                removed.append(resource)
        return removed


def _with_cost(status: JobStatus, run: RunContext, usage: Mapping[str, Any]) -> JobStatus:
    """Add ``cost_usd`` (the pipeline's budget guard reads it) when prices.json knows the model and region."""
    record = {
        "region": run.settings.get("region"),
        "model": run.settings.get("serverless_base_model") or DEFAULT_BASE_MODEL,
        "billable_token_usage": usage_for_cost(usage),
    }
    try:
        estimate = price_run(record, load_price_book())
    except CostError:
        return status  # no price for this model/region: report usage, not a made-up cost
    return replace(status, metrics={**status.metrics, "cost_usd": float(estimate.total)})
