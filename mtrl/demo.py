"""The offline demo (`make demo`): the real pipeline, deployed into an embedded emulator, training on the CPU.

Steps, each shown as it happens:
1. synthesize the app's emulator variant (`npx cdk synth -c emulator=true`, the real CDK CLI);
2. start the embedded AWS emulator (MiniStack, 127.0.0.1 only) and deploy the synthesized templates;
3. `mtrl submit` the environment's bundled sample (wordle's by default; ``--env`` picks any registered one, a
   custom one included) with a manifest selecting the `local` backend, and watch it:
   upload → EventBridge rule → trigger Lambda → Step Functions → GRPO training → held-out evaluation →
   teardown → report;
4. print the run's summary (status, phase timings, held-out success before/after, signal health) and
   fetch its summaries, signal rows and learning-curve plot into the work directory;
5. upload a malformed dataset the way `aws s3 cp` would (the CLI would refuse it locally) and show the
   pipeline reject it with line-numbered errors before anything is provisioned.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from mtrl.backends.local import LLM_PYTHON_ENV
from mtrl.client import runs as client_runs
from mtrl.client.deployment import Deployment
from mtrl.emulator import Emulator, deploy_app
from mtrl.emulator.deploy import session_for
from mtrl.emulator.process import REGION
from mtrl.envs.registry import load_spec
from mtrl.health import signal_health
from mtrl.local.agents import agent_for
from mtrl.local.config import FEATURES, TrainConfig, default_policy
from mtrl.local.policy import LogLinearPolicy
from mtrl.local.trainer import TaskSplit, Trainer

REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLE_DATASET = REPO_ROOT / "environments" / "wordle" / "sample" / "train.jsonl"
# The sample's own evaluation set: every held-out figure the demo shows is on these words.
SAMPLE_EVAL = REPO_ROOT / "environments" / "wordle" / "sample" / "eval.jsonl"
EVAL_KEY = "eval-data/wordle-demo-eval.jsonl"
POLICY_LINE = (
    "policy: `features` — a 7-weight log-linear policy choosing among candidate guesses that a built-in Wordle "
    "solver offers (mtrl/local/agents/wordle.py); fast and offline, but not a language model "
    "(for one: mtrl env try wordle --policy hf:MODEL)"
)
# The hand-set heuristic row: one weight by hand, no training — "guess a word still consistent with the clues".
HAND_SET_WEIGHTS = {"consistent": 1.0}
PREFIX = "mtrl"
# The demo's deployment: the emulator variant, its training polled every second instead of every few minutes (a
# poll of the local backend trains the next slice, so a longer wait only idles).
SYNTH_CONTEXT = {
    "emulator": "true",
    "status_poll_seconds": "1",
    "slot_poll_seconds": "2",
    "slot_max_wait_minutes": "10",
    "run_timeout_minutes": "30",
}
# The demo's watches poll the emulator each second (the CLI's default, 5 s, suits a run of hours).
WATCH_INTERVAL = "1"
LANGUAGE_MODEL_LINE = "policy: `{policy}` — a language model trained with TRL GRPO on a LoRA adapter, on the CPU{tiny}"
TINY_LINE = (
    "; hf:tiny-random is a tiny randomly initialised model built in code (no download): a plumbing check whose "
    "scores say nothing about the reward (for a real model: --policy hf:PATH)"
)
FEATURES_LINE = (
    "policy: `features` — a log-linear policy choosing among candidate actions that a hand-made agent for "
    "{env_id} offers (mtrl/local/agents/{env_id}.py); fast and offline, but not a language model "
    "(for one: --policy hf:MODEL)"
)


@dataclass(frozen=True)
class DemoPlan:
    """What the demo trains: the environment, its sample dataset and the run manifest."""

    env_id: str
    policy: str
    train_path: Path
    eval_path: Path
    manifest: dict[str, Any]

    @property
    def eval_key(self) -> str:
        return str(self.manifest["eval_dataset"])

    @property
    def policy_line(self) -> str:
        if self.policy != FEATURES:
            return LANGUAGE_MODEL_LINE.format(
                policy=self.policy, tiny=TINY_LINE if self.policy.endswith(":tiny-random") else ""
            )
        return POLICY_LINE if self.env_id == "wordle" else FEATURES_LINE.format(env_id=self.env_id)

    @property
    def hand_set_heuristic(self) -> bool:
        """The hand-set heuristic row: wordle's feature policy only (its weight names a wordle feature)."""
        return self.env_id == "wordle" and self.policy == FEATURES


def plan_for(
    env_id: str = "wordle", *, policy: str | None = None, hyperparameters: dict[str, Any] | None = None
) -> DemoPlan:
    """The demo of ``env_id``: its ``sample/train.jsonl`` and ``sample/eval.jsonl``, the ``local`` backend.

    Plain ``mtrl demo`` is wordle with the features policy (20 steps); another environment trains with its default
    policy (``mtrl.local.config.default_policy``) unless ``policy`` names one; ``hyperparameters`` override.
    """
    spec = load_spec(env_id)
    sample = spec.path / "sample"
    train_path, eval_path = sample / "train.jsonl", sample / "eval.jsonl"
    missing = [str(path) for path in (train_path, eval_path) if not path.is_file()]
    if missing:
        raise DemoError(
            f"environment '{env_id}' has no sample dataset ({', '.join(missing)} missing): the demo trains on "
            "sample/train.jsonl and evaluates on sample/eval.jsonl, as custom-environments/template ships them"
        )
    chosen = policy or default_policy(env_id)
    values: dict[str, Any] = {"steps": 20, "seed": 7} if env_id == "wordle" and chosen == FEATURES else {"seed": 7}
    if env_id != "wordle" or chosen != FEATURES:
        values["policy"] = chosen
    values.update(hyperparameters or {})
    try:
        TrainConfig.from_mapping(env_id, values)  # refuse a bad setting here, not minutes later in the pipeline
        if chosen == FEATURES:
            agent_for(env_id)  # says which environments have a features policy
    except (ValueError, LookupError) as error:
        raise DemoError(str(error)) from error
    manifest = {
        "backend": "local",
        "environment": env_id,
        "hyperparameters": values,
        "eval_dataset": EVAL_KEY if env_id == "wordle" else f"eval-data/{env_id.replace('_', '-')}-demo-eval.jsonl",
    }
    return DemoPlan(env_id=env_id, policy=chosen, train_path=train_path, eval_path=eval_path, manifest=manifest)


# Each line breaks a different rule; the pipeline must report every one with its line number.
MALFORMED_DATASET = "\n".join(
    [
        '{"id": "ok-1", "metadata": {"prompt": "Guess the 5-letter word", "answer": "crane"}}',
        '{"id": "ok-2", "metadata": {"prompt": "Guess the 5-letter word", "answer": "slate"}',
        '{"id": "ok-1", "metadata": {"prompt": "Guess the 5-letter word", "answer": "pious"}}',
        '{"id": "long", "metadata": {"prompt": "Guess the 5-letter word", "answer": "crumble"}}',
        '{"id": "nometa"}',
        '{"id": "fake", "metadata": {"prompt": "Guess the 5-letter word", "answer": "zzzzz"}}',
    ]
)


@dataclass
class DemoResult:
    """What the demo saw; ``ok`` is True when the good run succeeded and the bad one was rejected."""

    run_id: str | None = None
    run_succeeded: bool = False
    rejected_run_id: str | None = None
    rejected_before_provisioning: bool = False
    summary: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.run_succeeded and self.rejected_before_provisioning


class DemoError(RuntimeError):
    pass


def _step(console: Console, number: int, text: str) -> None:
    console.print(f"\n[bold cyan][{number}/5][/] {text}")


# What the CDK CLI would spend on the demo's offline synth for nothing it shows: the notices download and the
# telemetry upload (both need the network), and aws-cdk-lib's built-in CloudFormation check, whose findings are
# only ever warnings (~10 s of CPU to start its engine; cdk-nag, the check that fails a synth, still runs).
SYNTH_ENVIRONMENT = {
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    "CDK_DISABLE_CLI_TELEMETRY": "true",
    "CDK_VALIDATION": "false",
}


def cdk_command() -> list[str]:
    """The project's CDK CLI (``node_modules/.bin/cdk``, what ``npx cdk`` resolves to, without npx's start-up)."""
    local = REPO_ROOT / "node_modules" / ".bin" / "cdk"
    if local.is_file():
        return [str(local)]
    npx = shutil.which("npx")
    if npx is None:
        raise DemoError("npx not found: install Node.js 20+ and run `make setup`")
    return [npx, "cdk"]


# What the synth reads: a work directory's cdk.out synthesized from the same files, settings and pinned tools is
# reused (a second `mtrl demo` in the same work directory deploys it again without synthesizing it again).
SYNTH_INPUTS = (
    "app.py",
    "cdk.json",
    "cdk.context.json",
    "package-lock.json",
    "requirements",
    "stacks",
    "statemachine",
    "lambda",
    "mtrl",
    "environments",
    "custom-environments",
)
BUILT_INPUTS = (".build/lambda-deps",)  # made by `make setup`; identified by name, size and time (171 MB)
SYNTH_STAMP = "mtrl-demo-inputs.sha256"


def synth_inputs_digest(root: Path = REPO_ROOT) -> str:
    """A digest of everything the demo's synth depends on: sources, pinned tools, context and the environment."""
    digest = hashlib.sha256()
    environment = sorted((k, v) for k, v in os.environ.items() if k.startswith(("CDK_", "MTRL_", "AWS_", "JSII_")))
    digest.update(json.dumps([SYNTH_CONTEXT, SYNTH_ENVIRONMENT, environment, cdk_command()]).encode())
    for name in (*SYNTH_INPUTS, *BUILT_INPUTS):
        top = root / name
        for path in [top] if top.is_file() else sorted(top.rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            if name in BUILT_INPUTS:
                stat = path.stat()
                content = f"{stat.st_size} {stat.st_mtime_ns}".encode()
            else:
                content = path.read_bytes()
            digest.update(str(path.relative_to(root)).encode() + b"\0" + content + b"\0")
    return digest.hexdigest()


def synthesize(out_dir: Path, console: Console) -> None:
    shown = out_dir.relative_to(REPO_ROOT) if out_dir.is_relative_to(REPO_ROOT) else out_dir
    inputs = synth_inputs_digest()
    stamp = out_dir / SYNTH_STAMP
    if stamp.is_file() and stamp.read_text(encoding="utf-8") == inputs:
        console.print(f"    {shown} was synthesized from these same sources and settings: deploying it as it is")
        return
    command = [*cdk_command(), "synth", "--quiet", "--no-notices", "-o", str(out_dir)]
    for key, value in SYNTH_CONTEXT.items():
        command += ["-c", f"{key}={value}"]
    env = {**os.environ, **SYNTH_ENVIRONMENT}
    env.pop("CDK_DEFAULT_ACCOUNT", None)
    shutil.rmtree(out_dir, ignore_errors=True)
    completed = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise DemoError(f"cdk synth failed:\n{completed.stderr[-3000:]}")
    stamp.write_text(inputs, encoding="utf-8")
    templates = sorted(path.name for path in out_dir.glob("*.template.json"))
    console.print(f"    synthesized {', '.join(templates)} into {shown}")


def _mtrl(args: list[str], emulator: Emulator, *, capture: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the `mtrl` command as a user would, aimed at the emulator."""
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",  # the emulator's fixed test credentials
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    command = [sys.executable, "-m", "mtrl", *args, "--endpoint-url", emulator.endpoint_url, "--prefix", PREFIX]
    return subprocess.run(command, cwd=REPO_ROOT, env=env, text=True, capture_output=capture, check=False)


def _run_ids(session: Any) -> list[str]:
    """The deployment's run ids, newest first: what `mtrl runs --json` lists (the same query, in this process; the
    demo only reads them, so it starts no interpreter for it, once after the run and once a second for the
    malformed upload's run)."""
    data, pipeline = _stack_outputs(session, f"{PREFIX}-data"), _stack_outputs(session, f"{PREFIX}-pipeline")
    deployment = Deployment(
        prefix=PREFIX,
        region=REGION,
        bucket=data["DataBucketName"],
        run_table=data["RunTableName"],
        state_machine_arn=pipeline["StateMachineArn"],
        topic_arn=pipeline["NotificationTopicArn"],
    )
    records = client_runs.list_runs(session.client("dynamodb"), deployment)
    return [str(client_runs.run_view(record)["run_id"]) for record in records]


def _read_json(s3: Any, bucket: str, key: str) -> dict[str, Any]:
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    parsed: dict[str, Any] = json.loads(body)
    return parsed


def _summary_tables(summary: dict[str, Any], training: dict[str, Any] | None) -> list[Table]:
    run = Table(title=f"run {summary.get('run_id')}", show_header=False)
    run.add_column("what")
    run.add_column("value")
    settings = summary.get("settings") or {}
    run.add_row("status", str(summary.get("status")))
    run.add_row("backend / environment", f"{settings.get('backend')} / {settings.get('environment')}")
    run.add_row("duration", f"{_seconds(summary.get('duration_seconds'))}")
    phases = sorted((summary.get("phases") or {}).items(), key=lambda item: str(item[1].get("started_at")))
    for phase, entry in phases:
        run.add_row(f"  phase {phase}", f"{_seconds(entry.get('seconds'))}  {entry.get('outcome', '')}")
    run.add_row("resources left behind", str(len(summary.get("resources_remaining") or [])))
    tables = [run]
    if training:
        tables.append(_evaluation_table(training))
        health = Table(title="reward signal health (GRPO learns only from spread inside a group)")
        for column in (
            "component",
            f"{signal_health.SPREAD_HEADING}, step 1",
            f"{signal_health.ZERO_SPREAD_HEADING}, step 1",
            f"{signal_health.ZERO_SPREAD_HEADING}, whole run",
            f"verdict, step 1 (flat: ≥ {signal_health.FLAT_WARNING_SHARE:.0%})",
        ):
            health.add_column(column)
        first = training.get("signal_health_first_step") or {}
        whole = training.get("signal_health") or {}
        for name in sorted(set(first) | set(whole)):
            early, overall = first.get(name) or {}, whole.get(name) or {}
            if isinstance(early, dict) or isinstance(overall, dict):
                health.add_row(
                    name,
                    _fmt(early.get("mean_spread")),
                    _pct(early.get("zero_spread_share")),
                    _pct(overall.get("zero_spread_share")),
                    signal_health.verdict(float(early.get("zero_spread_share", 1.0))) if early else "—",
                )
        tables.append(health)
    return tables


def _evaluation_table(training: dict[str, Any]) -> Table:
    """Rows on the same held-out tasks: untrained, (wordle) the hand-set heuristic, trained."""
    heldout = training.get("heldout") or {}
    config = training.get("config") or {}
    env_id = str(training.get("env_id") or config.get("env_id") or "wordle")
    policy = str(config.get("policy") or FEATURES)
    unit = "words" if env_id == "wordle" else "tasks"
    table = Table(
        title=f"held-out evaluation: the sample's eval.jsonl, {heldout.get('tasks')} {unit} "
        "(the environment's own success criterion)"
    )
    for column in ("policy", "success rate" if unit == "tasks" else "solve rate", "mean reward"):
        table.add_column(column)
    untrained = "untrained (all weights 0)" if policy == FEATURES else f"untrained ({policy}, no adapter)"
    table.add_row(untrained, _pct(heldout.get("success_before")), _fmt(heldout.get("reward_before")))
    if env_id == "wordle" and policy == FEATURES:
        heuristic = training.get("heuristic") or {}
        weights = ", ".join(f"{name} = {value:g}" for name, value in HAND_SET_WEIGHTS.items())
        table.add_row(
            f"hand-set heuristic ({weights}, no training)",
            _pct(heuristic.get("success_rate")),
            _fmt(heuristic.get("reward_mean")),
        )
    steps = training.get("steps")
    trained = f"trained ({steps} GRPO steps)" if policy == FEATURES else f"trained ({steps} GRPO steps, LoRA)"
    table.add_row(trained, _pct(heldout.get("success_after")), _fmt(heldout.get("reward_after")))
    return table


def heuristic_evaluation(training: dict[str, Any], holdout: list[dict[str, Any]]) -> dict[str, Any]:
    """The hand-set heuristic on the run's held-out tasks, evaluated exactly as the run evaluated its policy."""
    config = TrainConfig(**training["config"])
    agent = agent_for(config.env_id)
    theta = np.zeros(len(agent.feature_names))
    for name, value in HAND_SET_WEIGHTS.items():
        theta[agent.feature_names.index(name)] = value
    trainer = Trainer(
        load_spec(config.env_id), agent, TaskSplit(train=holdout, holdout=holdout), env_args=config.env_args
    )
    return trainer.evaluate(LogLinearPolicy(agent.feature_names, theta), step=0, config=config)


def _seconds(value: Any) -> str:
    return "—" if value is None else f"{float(value):.1f} s"


def _pct(value: Any) -> str:
    return "—" if value is None else f"{100 * float(value):.0f}%"


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3f}"
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def run_demo(*, work_dir: Path, console: Console | None = None, plan: DemoPlan | None = None) -> DemoResult:
    console = console or Console()
    plan = plan or plan_for("wordle")
    emulator_environ = {"SFN_WAIT_SCALE": "1"}
    if plan.policy != FEATURES:
        # The emulator's Lambda runtime has no torch (nor has a real one): the local backend trains a language
        # model in this interpreter, which has the mtrl[llm] extra (mtrl.backends.local).
        emulator_environ[LLM_PYTHON_ENV] = sys.executable
    result = DemoResult()
    started = time.perf_counter()
    cdk_out = work_dir / "cdk.out"
    work_dir.mkdir(parents=True, exist_ok=True)

    _step(console, 1, "Synthesizing the app (emulator variant: data + pipeline stacks) with the CDK CLI")
    mark = time.perf_counter()
    synthesize(cdk_out, console)
    result.timings["synth"] = time.perf_counter() - mark

    _step(console, 2, "Starting the embedded AWS emulator and deploying the synthesized templates")
    mark = time.perf_counter()
    with Emulator(environ=emulator_environ, log_path=work_dir / "emulator.log") as emulator:
        console.print(f"    emulator on {emulator.endpoint_url} (log: {work_dir / 'emulator.log'})")
        session = session_for(emulator.client_kwargs)
        for stack in deploy_app(session, cdk_out, stacks=[f"{PREFIX}-pipeline"]):
            if not stack.ok:
                raise DemoError(f"deploying {stack.stack_name} failed: {stack.status} {stack.failures}")
            console.print(f"    {stack.stack_name}: {stack.status}")
        result.timings["deploy"] = time.perf_counter() - mark

        _step(
            console, 3, f"mtrl submit: the sample {plan.env_id} dataset, with a manifest selecting the `local` backend"
        )
        _print_what_runs(console, plan)
        stem = f"{plan.env_id.replace('_', '-')}-demo"
        manifest_path = work_dir / f"{stem}.run.json"
        manifest_path.write_text(json.dumps(plan.manifest, indent=2) + "\n", encoding="utf-8")
        dataset_path = work_dir / f"{stem}.jsonl"
        shutil.copyfile(plan.train_path, dataset_path)
        console.print(f"    manifest: {json.dumps(plan.manifest)}", highlight=False)
        mark = time.perf_counter()
        submitted = _mtrl(
            [
                "submit",
                str(dataset_path),
                "--manifest",
                str(manifest_path),
                "--eval-file",
                str(plan.eval_path),
                "--watch",
                "--interval",
                WATCH_INTERVAL,
            ],
            emulator,
        )
        result.timings["run"] = time.perf_counter() - mark
        runs = _run_ids(session)
        result.run_id = runs[0] if runs else None
        result.run_succeeded = submitted.returncode == 0

        _step(console, 4, "The run's summary")
        s3 = session.client("s3")
        bucket = _data_bucket(session)
        if result.run_id:
            result.summary = _show_run(s3, bucket, result.run_id, plan, work_dir=work_dir, console=console)

        _step(console, 5, "A malformed dataset, uploaded directly (as `aws s3 cp` would), is rejected")
        s3.put_object(Bucket=bucket, Key="training-data/broken.jsonl", Body=MALFORMED_DATASET.encode())
        result.rejected_run_id, result.rejected_before_provisioning = _follow_rejection(
            emulator, session, s3, bucket, known=set(runs), console=console
        )
    result.timings["total"] = time.perf_counter() - started
    verdict = "[bold green]demo passed[/]" if result.ok else "[bold red]demo failed[/]"
    console.print(f"\n{verdict} in {result.timings['total']:.0f} s; the emulator is stopped.")
    return result


def _show_run(s3: Any, bucket: str, run_id: str, plan: DemoPlan, *, work_dir: Path, console: Console) -> dict[str, Any]:
    """Print the run's summary tables, fetch its outputs into ``work_dir``; returns the pipeline's summary."""
    summary = _read_json(s3, bucket, f"runs/{run_id}/summary.json")
    training = _read_optional_json(s3, bucket, f"runs/{run_id}/local/summary.json")
    tasks = _read_optional_json(s3, bucket, f"runs/{run_id}/local/tasks.json")
    if training and tasks and plan.hand_set_heuristic:
        training["heuristic"] = heuristic_evaluation(training, list(tasks["holdout"]))
    for table in _summary_tables(summary, training):
        console.print(table)
    plot = _fetch_plot(s3, bucket, run_id, work_dir)
    if plot:
        console.print(f"    learning curve (reward and held-out success per step): {plot}")
    for fetched in _fetch_outputs(s3, bucket, run_id, work_dir):
        console.print(f"    fetched {fetched.relative_to(work_dir)}", highlight=False)
    return summary


def _print_what_runs(console: Console, plan: DemoPlan) -> None:
    console.print(f"    {plan.policy_line}", highlight=False)
    unit = "words" if plan.env_id == "wordle" else "tasks"
    console.print(
        f"    held out for evaluation: the sample's own eval.jsonl ({_rows(plan.eval_path)} {unit}, uploaded to "
        f"{plan.eval_key}); training on train.jsonl ({_rows(plan.train_path)} {unit})",
        highlight=False,
    )


# What step 4 copies out of the emulator (it stops when the demo ends): the pipeline's and the trainer's summaries
# and the per-step signal rows the training-health rules read.
FETCHED_OUTPUTS = ("summary.json", "signals.jsonl", "health.json", "local/summary.json")


def _fetch_outputs(s3: Any, bucket: str, run_id: str, work_dir: Path) -> list[Path]:
    fetched: list[Path] = []
    for name in FETCHED_OUTPUTS:
        try:
            body = s3.get_object(Bucket=bucket, Key=f"runs/{run_id}/{name}")["Body"].read()
        except s3.exceptions.NoSuchKey:
            continue
        target = work_dir / run_id / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(body)
        fetched.append(target)
    return fetched


def _rows(path: Path) -> int:
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def _read_optional_json(s3: Any, bucket: str, key: str) -> dict[str, Any] | None:
    try:
        return _read_json(s3, bucket, key)
    except s3.exceptions.NoSuchKey:
        return None


def _stack_outputs(session: Any, stack_name: str) -> dict[str, str]:
    outputs = session.client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"][0]["Outputs"]
    return {str(o["OutputKey"]): str(o["OutputValue"]) for o in outputs}


def _data_bucket(session: Any) -> str:
    return _stack_outputs(session, f"{PREFIX}-data")["DataBucketName"]


def _fetch_plot(s3: Any, bucket: str, run_id: str, work_dir: Path) -> Path | None:
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"runs/{run_id}/")
    keys = [item["Key"] for item in listed.get("Contents", []) if item["Key"].endswith(".png")]
    if not keys:
        return None
    target = work_dir / f"{run_id}.png"
    target.write_bytes(s3.get_object(Bucket=bucket, Key=keys[0])["Body"].read())
    return target


def _follow_rejection(
    emulator: Emulator,
    session: Any,
    s3: Any,
    bucket: str,
    *,
    known: set[str],
    console: Console,
    timeout_s: float = 120,
) -> tuple[str | None, bool]:
    deadline = time.monotonic() + timeout_s
    run_id = None
    while run_id is None and time.monotonic() < deadline:
        fresh = [candidate for candidate in _run_ids(session) if candidate not in known]
        run_id = fresh[0] if fresh else None
        if run_id is None:
            time.sleep(1)
    if run_id is None:
        console.print("    [red]no run started for the malformed upload[/]")
        return None, False
    watched = _mtrl(["status", run_id, "--watch", "--interval", WATCH_INTERVAL], emulator)
    report = _read_json(s3, bucket, f"runs/{run_id}/validation.json")
    console.print()
    table = Table(title="validation.json: errors with line numbers")
    table.add_column("line", justify="right")
    table.add_column("error")
    errors = [*(report.get("train") or {}).get("errors", []), *((report.get("eval") or {}).get("errors", []))]
    for error in errors:
        table.add_row(str(error.get("line") or "—"), str(error.get("message")))
    console.print(table)
    shown = _mtrl(["status", run_id, "--json"], emulator, capture=True)
    record = json.loads(shown.stdout) if shown.stdout.strip() else {}
    provisioned = record.get("resources") or record.get("job_id")
    console.print(
        f"    run {run_id}: exit {watched.returncode}, resources created: {len(provisioned or [])} "
        "(rejected before preflight and provisioning)"
    )
    return run_id, watched.returncode != 0 and not provisioned and bool(errors)
