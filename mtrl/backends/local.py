"""The ``local`` backend: a small log-linear policy trained with GRPO on the CPU, inside the pipeline's Lambdas.

How it runs under the state machine (chosen so no long-lived compute exists and the Lambda timeout is never
at risk): ``submit`` reads the run's dataset, splits it and writes the initial training state under the
run's output prefix (``runs/<run-id>/local/``); every ``status`` poll then trains for a bounded time slice
(``chunk_seconds``, default 20 s) and writes the state back, so the run advances poll by poll, reports
live progress, survives a retried or timed-out invocation (the last saved state is the checkpoint), and
gives identical results for the same seed however it is sliced. The status Lambda needs a timeout of at
least ``chunk_seconds`` plus one training step and evaluation (60 s is plenty for the built-in configs).

Run settings read here: ``environment``, ``environment_args`` (passed to the environment's ``make_env``)
and ``hyperparameters`` (the ``mtrl.local.config.TrainConfig`` fields: steps, tasks_per_step, group_size,
learning_rate, seed, eval_every, eval_tasks, holdout_fraction, greedy_eval, policy, max_new_tokens, max_turns;
unknown names are errors).

``policy`` is ``features`` (the built-ins' feature agents, the default for them) or ``hf:MODEL`` (a language
model trained with TRL GRPO + LoRA: any environment, ``hf:tiny-random`` the default for the others). A
language-model run trains whole in one status poll (``mtrl.local.llm_run``). It needs torch (the ``mtrl[llm]``
extra); where the function's own interpreter lacks it — the emulator's Lambda runtime, like a real one — the
poll runs the training in the interpreter named by ``MTRL_LLM_PYTHON`` (``mtrl.backends.local_llm``), which
reads and writes the same state under the run's prefix.
Nothing is provisioned, so ``provision`` and ``cleanup`` have nothing to create or remove. ``evaluate`` (the
pipeline's optional evaluation phase) returns the held-out before/after figures the run ended with.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from mtrl.backends._aws import AwsClients, S3Uri, backend_error
from mtrl.backends.llm_python import LLM_PYTHON_ENV, TIMEOUT_S, LlmPythonError, llm_python, run_module
from mtrl.contracts.backend import BackendError, CreatedResource, Finding, JobState, JobStatus, RunContext
from mtrl.envs.registry import EnvironmentNotFoundError, InvalidEnvironmentError, load_spec
from mtrl.health.emf import EpisodeMetrics
from mtrl.health.signals import SIGNALS_FILE, iso_time, render_signals
from mtrl.local.agents import NoAgentError, agent_for
from mtrl.local.config import ConfigError, TrainConfig
from mtrl.local.run import (
    PLOT,
    STATE,
    SUMMARY,
    advance_run,
    cancel_requested,
    create_run,
    load_run,
    parse_jsonl,
    read_summary,
    request_cancel,
)
from mtrl.local.signals import STEP_TIME_KEY, header_of, signal_rows
from mtrl.local.trainer import TrainingError, TrainingState

OUTPUT_FOLDER = "local"
BEST_POLICY = "best_policy.json"  # the best-evaluation checkpoint a stopped run keeps (``checkpoints``)
DEFAULT_CHUNK_SECONDS = 20.0
_MAX_DATASET_BYTES = 50 * 1024 * 1024  # the local backend is for small dry runs and the demo


class S3Store:
    """The ``Store`` of a run: objects under ``<output_uri>local/``."""

    def __init__(self, s3: Any, prefix: S3Uri) -> None:
        self.s3 = s3
        self.prefix = prefix

    def read(self, name: str) -> bytes | None:
        uri = self.prefix.join(name)
        try:
            body: bytes = self.s3.get_object(Bucket=uri.bucket, Key=uri.key)["Body"].read()
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in {"NoSuchKey", "404", "NotFound"}:
                return None
            raise
        return body

    def write(self, name: str, data: bytes, *, content_type: str) -> str:
        uri = self.prefix.join(name)
        self.s3.put_object(Bucket=uri.bucket, Key=uri.key, Body=data, ContentType=content_type)
        return str(uri)


def train_config(settings: Mapping[str, Any]) -> TrainConfig:
    """The run's training configuration from its effective settings (raises ConfigError)."""
    env_id = settings.get("environment")
    if not isinstance(env_id, str) or not env_id:
        raise ConfigError("the run's settings name no 'environment'")
    hyperparameters = settings.get("hyperparameters") or {}
    env_args = settings.get("environment_args") or {}
    if not isinstance(hyperparameters, Mapping) or not isinstance(env_args, Mapping):
        raise ConfigError("'hyperparameters' and 'environment_args' must be objects")
    return TrainConfig.from_mapping(env_id, hyperparameters, env_args=env_args)


def _heldout_figures(evaluation: Mapping[str, Any], when: str) -> dict[str, float]:
    """``heldout_success_<when>`` and, when recorded, ``heldout_evaluation_<when>`` of one held-out evaluation."""
    figures = {f"heldout_success_{when}": float(evaluation["success_rate"])}
    if evaluation.get("evaluation_mean") is not None:
        figures[f"heldout_evaluation_{when}"] = float(evaluation["evaluation_mean"])
    return figures


def _stamp_step(state: TrainingState, record: dict[str, Any]) -> None:
    record[STEP_TIME_KEY] = iso_time(time.time())  # the history record is saved with the state


def _has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


def _language_model_finding(policy: str) -> Finding:
    if _has_torch():
        return Finding("local-policy", True, f"{policy}: torch is installed here")
    if llm_python():
        return Finding("local-policy", True, f"{policy}: trained by {llm_python()} ({LLM_PYTHON_ENV})")
    return Finding(
        "local-policy",
        False,
        f"{policy} needs torch (the mtrl[llm] extra), which this function's runtime lacks, and {LLM_PYTHON_ENV} "
        "names no interpreter that has it: try the environment with `mtrl env try ENV --policy hf:MODEL "
        "--train-steps N` or `mtrl demo --env ENV` (the emulator), or train it on the verl backend",
    )


def _train_in_llm_python(run: RunContext) -> None:
    """Run ``mtrl.backends.local_llm`` for this run in the ``MTRL_LLM_PYTHON`` interpreter (raises TrainingError)."""
    if llm_python() is None:
        raise TrainingError(f"a language-model policy needs torch here or {LLM_PYTHON_ENV} set (see preflight)")
    region = str(run.settings.get("region") or os.environ.get("AWS_REGION") or "us-east-1")
    try:
        run_module("mtrl.backends.local_llm", [run.output_uri, run.run_id], region=region, timeout_s=TIMEOUT_S)
    except LlmPythonError as error:
        raise TrainingError(f"the language-model trainer: {error}") from error


class LocalAdapter:
    """``BackendAdapter`` for ``local``: see the module docstring for how training is driven by ``status``."""

    name = "local"

    def __init__(self, *, clients: AwsClients | None = None, chunk_seconds: float | None = None) -> None:
        self.clients = clients or AwsClients()
        configured = os.environ.get("MTRL_LOCAL_CHUNK_SECONDS")
        self.chunk_seconds = chunk_seconds or (float(configured) if configured else DEFAULT_CHUNK_SECONDS)

    def _s3(self, run: RunContext) -> Any:
        region = str(run.settings.get("region") or os.environ.get("AWS_REGION") or "us-east-1")
        return self.clients.client("s3", region)

    def _store(self, run: RunContext) -> S3Store:
        return S3Store(self._s3(run), S3Uri.parse(run.output_uri).join(OUTPUT_FOLDER + "/"))

    def preflight(self, run: RunContext) -> list[Finding]:
        findings: list[Finding] = []
        try:
            config = train_config(run.settings)
            findings.append(Finding("local-settings", True, f"{config.steps} GRPO steps, seed {config.seed}"))
        except ConfigError as error:
            return [Finding("local-settings", False, str(error))]
        try:
            load_spec(config.env_id)
            findings.append(Finding("environment", True, f"environment '{config.env_id}' loads"))
        except (EnvironmentNotFoundError, InvalidEnvironmentError) as error:
            findings.append(Finding("environment", False, str(error)))
            return findings
        if config.uses_language_model:
            findings.append(_language_model_finding(config.policy))
            return findings
        try:
            agent_for(config.env_id)
            findings.append(Finding("local-policy", True, f"a features policy exists for '{config.env_id}'"))
        except NoAgentError as error:
            findings.append(Finding("local-policy", False, str(error)))
        return findings

    def provision(self, run: RunContext) -> list[CreatedResource]:
        return []  # in-process training: no per-run infrastructure

    def _read_rows(self, run: RunContext, uri_text: str) -> list[dict[str, Any]]:
        uri = S3Uri.parse(uri_text)
        s3 = self._s3(run)
        try:
            head = s3.head_object(Bucket=uri.bucket, Key=uri.key)
            if int(head.get("ContentLength", 0)) > _MAX_DATASET_BYTES:
                raise BackendError(
                    f"{uri} is larger than {_MAX_DATASET_BYTES // 2**20} MiB; the local backend is for small "
                    "dry runs — use the hyperpod or serverless backend for this dataset"
                )
            text = s3.get_object(Bucket=uri.bucket, Key=uri.key)["Body"].read().decode("utf-8")
        except (ClientError, BotoCoreError) as error:
            raise backend_error(f"reading {uri}", error) from error
        try:
            return parse_jsonl(text, source=str(uri))
        except TrainingError as error:
            raise BackendError(str(error)) from error

    def submit(self, run: RunContext) -> str:
        try:
            config = train_config(run.settings)
        except ConfigError as error:
            raise BackendError(str(error)) from error
        train_rows = self._read_rows(run, run.dataset_uri)
        eval_rows = self._read_rows(run, run.eval_dataset_uri) if run.eval_dataset_uri else None
        try:
            created = create_run(self._store(run), config, train_rows, eval_rows)
            self._write_signals(run, created)
        except (TrainingError, ConfigError, NoAgentError, EnvironmentNotFoundError, InvalidEnvironmentError) as error:
            raise BackendError(str(error)) from error
        except (ClientError, BotoCoreError) as error:
            raise backend_error("writing the local training state", error) from error
        return f"local-{run.run_id}"

    def status(self, run: RunContext, job_id: str) -> JobStatus:
        store = self._store(run)
        try:
            if cancel_requested(store):
                return self._report(store, JobState.STOPPED, load_run(store).state, "cancelled")
            loaded = load_run(store)
            if loaded.state.done:
                return self._report(store, JobState.SUCCEEDED, loaded.state, "training complete")
            if loaded.state.config.uses_language_model and not _has_torch():
                _train_in_llm_python(run)
                state = load_run(store).state
            else:
                state = advance_run(
                    store,
                    time_budget_s=self.chunk_seconds,
                    extra_summary={"run_id": run.run_id},
                    on_step=_stamp_step,
                    metrics=EpisodeMetrics(loaded.state.config.env_id, dimensions={"RunId": run.run_id}),
                )
            self._write_signals(run, state)
        except TrainingError as error:
            return JobStatus(JobState.FAILED, message=f"local training failed: {error}")
        except (ClientError, BotoCoreError) as error:
            raise backend_error("reading or writing the local training state", error) from error
        except Exception as error:  # an environment plug-in raised: report it, the pipeline tears down
            return JobStatus(JobState.FAILED, message=f"local training failed: {type(error).__name__}: {error}")
        if state.done:
            return self._report(store, JobState.SUCCEEDED, state, "training complete")
        return self._report(store, JobState.RUNNING, state, f"{state.phase}: step {state.step}/{state.config.steps}")

    def _write_signals(self, run: RunContext, state: TrainingState) -> None:
        """``runs/<run id>/signals.jsonl``: the header and one row per step so far (rewritten whole each poll)."""
        uri = S3Uri.parse(run.output_uri).join(SIGNALS_FILE)
        body = render_signals(header_of(state), signal_rows(state)).encode("utf-8")
        self._s3(run).put_object(Bucket=uri.bucket, Key=uri.key, Body=body, ContentType="application/x-ndjson")

    def _report(self, store: S3Store, job_state: JobState, state: TrainingState, message: str) -> JobStatus:
        metrics: dict[str, float] = {}
        if state.history:
            last = state.history[-1]
            metrics["reward_mean"] = float(last["reward_mean"])
            metrics["success_rate"] = float(last["success_rate"])
        if state.evaluations:
            metrics.update(_heldout_figures(state.evaluations[0], "before"))
        if state.done and len(state.evaluations) > 1:
            metrics.update(_heldout_figures(state.evaluations[-1], "after"))
        outputs: dict[str, str] = {}
        if state.done:
            outputs = {"summary_uri": str(store.prefix.join(SUMMARY)), "plot_uri": str(store.prefix.join(PLOT))}
            summary = read_summary(store)
            if summary is not None:
                outputs["signal_health"] = json.dumps(summary.get("signal_health", {}), sort_keys=True)
        return JobStatus(
            state=job_state,
            message=message,
            progress={"step": state.step, "total_steps": state.config.steps, "phase": state.phase},
            metrics=metrics,
            outputs=outputs,
        )

    def evaluate(self, run: RunContext) -> dict[str, float]:
        """The held-out evaluation the run ended with, before vs after training: the external evaluation
        (``heldout_evaluation_*``, the environment's EVALUATION or its success as the labelled fallback — the
        record's ``evaluation_measure``), success and reward, each reported separately.

        The before figures are the untrained policy on the same tasks: the run's baseline. Training already
        evaluated the untrained and the trained policy on the same held-out tasks with the same random stream,
        so this reports those figures rather than playing the episodes again.
        """
        try:
            summary = read_summary(self._store(run))
        except (ClientError, BotoCoreError) as error:
            raise backend_error("reading the local training summary", error) from error
        if summary is None or summary.get("heldout", {}).get("success_after") is None:
            raise BackendError(f"run {run.run_id}: the local training run has no completed held-out evaluation")
        heldout = summary["heldout"]
        evaluation = {
            f"heldout_evaluation_{when}": float(heldout[f"evaluation_{when}"])
            for when in ("before", "after")
            if heldout.get(f"evaluation_{when}") is not None
        }
        return {
            "heldout_tasks": float(heldout["tasks"]),
            **evaluation,
            "heldout_success_before": float(heldout["success_before"]),
            "heldout_success_after": float(heldout["success_after"]),
            "heldout_reward_before": float(heldout["reward_before"]),
            "heldout_reward_after": float(heldout["reward_after"]),
        }

    def evaluation_settings(self, run: RunContext) -> dict[str, str]:
        """What ``heldout_evaluation_*`` measures (the environment's EVALUATION, or success as the fallback)."""
        try:
            summary = read_summary(self._store(run))
        except (ClientError, BotoCoreError) as error:
            raise backend_error("reading the local training summary", error) from error
        measure = ((summary or {}).get("heldout") or {}).get("evaluation_measure")
        return {"evaluation_measure": str(measure)} if measure else {}

    def cancel(self, run: RunContext, job_id: str) -> None:
        try:
            request_cancel(self._store(run))
        except (ClientError, BotoCoreError) as error:
            raise backend_error("cancelling the local training run", error) from error

    def checkpoints(self, run: RunContext) -> dict[str, Any]:
        """What a run stopped early keeps (``early_stop``): the latest state (its policy included) and the policy of
        the best held-out evaluation during training, written to ``best_policy.json``."""
        store = self._store(run)
        try:
            state = load_run(store).state
            kept: dict[str, Any] = {"latest": {"step": state.step, "uri": str(store.prefix.join(STATE))}}
            if state.best is not None:
                body = json.dumps(state.best["policy"]).encode()
                uri = store.write(BEST_POLICY, body, content_type="application/json")
                best = {key: state.best[key] for key in ("step", "evaluation_mean")}
                kept["best_evaluation"] = {**best, "uri": uri}
        except (ClientError, BotoCoreError) as error:
            raise backend_error(f"run {run.run_id}: keeping the local checkpoints", error) from error
        except TrainingError as error:
            raise BackendError(f"run {run.run_id}: keeping the local checkpoints: {error}") from error
        if "best_evaluation" not in kept:
            kept["best_evaluation"] = None
            kept["note"] = "no held-out evaluation was measured during training before the stop"
        return kept

    def cleanup(self, run: RunContext) -> list[CreatedResource]:
        return []  # nothing was created; the state and results under runs/<run-id>/local/ are the run's output
