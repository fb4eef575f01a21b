"""The demo's run: the real pipeline, deployed into an embedded emulator, training on the CPU.

Steps, each shown as it happens:
1. synthesize the app's emulator variant (`npx cdk synth -c emulator=true`, the real CDK CLI: ``synth``);
2. start the embedded AWS emulator (MiniStack, 127.0.0.1 only) and deploy the synthesized templates;
3. `mtrl submit` the environment's bundled sample (wordle's by default; ``--env`` picks any registered one, a
   custom one included: ``plan``) with a manifest selecting the `local` backend, and watch it:
   upload → EventBridge rule → trigger Lambda → Step Functions → GRPO training → held-out evaluation →
   teardown → report;
4. print the run's summary (status, phase timings, held-out success before/after, signal health: ``tables``) and
   fetch its summaries, signal rows and learning-curve plot into the work directory (``deployment``);
5. upload a malformed dataset the way `aws s3 cp` would (the CLI would refuse it locally) and show the
   pipeline reject it with line-numbered errors before anything is provisioned.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from mtrl.backends.local import LLM_PYTHON_ENV
from mtrl.cli.demo.deployment import (
    PREFIX,
    cli_hints,
    data_bucket,
    fetch_outputs,
    fetch_plot,
    read_json,
    read_optional_json,
    run_ids,
    run_mtrl,
)
from mtrl.cli.demo.plan import DemoError, DemoPlan, plan_for
from mtrl.cli.demo.synth import synthesize
from mtrl.cli.demo.tables import heuristic_evaluation, summary_tables, validation_table
from mtrl.contracts.text import plural
from mtrl.emulator import Emulator, deploy_app
from mtrl.emulator.deploy import session_for
from mtrl.local.config import FEATURES

# The demo's watches poll the emulator each second (the CLI's default, 5 s, suits a run of hours).
WATCH_INTERVAL = "1"

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


def _step(console: Console, number: int, text: str) -> None:
    console.print(f"\n[bold cyan][{number}/5][/] {text}")


def run_demo(
    *, work_dir: Path, console: Console | None = None, plan: DemoPlan | None = None, keep_emulator: bool = False
) -> DemoResult:
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
        submitted = run_mtrl(
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
        runs = run_ids(session)
        result.run_id = runs[0] if runs else None
        result.run_succeeded = submitted.returncode == 0
        if not result.run_succeeded:
            # Nothing below can pass without the run: say why it failed and stop, rather than show an empty summary.
            _explain_failure(console, emulator, result.run_id)
            return _finish(console, result, started, keep_emulator=keep_emulator, emulator=emulator)

        _step(console, 4, "The run's summary")
        s3 = session.client("s3")
        bucket = data_bucket(session)
        if result.run_id:
            result.summary = _show_run(s3, bucket, result.run_id, plan, work_dir=work_dir, console=console)

        _step(console, 5, "A malformed dataset, uploaded directly (as `aws s3 cp` would), is rejected")
        s3.put_object(Bucket=bucket, Key="training-data/broken.jsonl", Body=MALFORMED_DATASET.encode())
        result.rejected_run_id, result.rejected_before_provisioning = _follow_rejection(
            emulator, session, s3, bucket, known=set(runs), console=console
        )
        return _finish(console, result, started, keep_emulator=keep_emulator, emulator=emulator)


def _finish(
    console: Console, result: DemoResult, started: float, *, keep_emulator: bool, emulator: Emulator
) -> DemoResult:
    """The verdict; with ``keep_emulator``, the emulator keeps serving until Ctrl-C (docs/emulator.md)."""
    result.timings["total"] = time.perf_counter() - started
    verdict = "[bold green]demo passed[/]" if result.ok else "[bold red]demo failed[/]"
    if not keep_emulator:
        console.print(f"\n{verdict} in {result.timings['total']:.0f} s; the emulator is stopped.")
        return result
    console.print(f"\n{verdict} in {result.timings['total']:.0f} s; the emulator keeps running (Ctrl-C stops it).")
    for line in cli_hints(emulator.endpoint_url):
        console.print(f"    {line}", highlight=False, soft_wrap=True)
    wait_for_interrupt()
    return result


def wait_for_interrupt() -> None:
    """Block until Ctrl-C (the kept emulator stops when the demo's `with` block ends)."""
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


def _explain_failure(console: Console, emulator: Emulator, run_id: str | None) -> None:
    if run_id is None:
        console.print("\n[bold red]the run never started[/]: see the emulator log; steps 4 and 5 are skipped")
        return
    shown = run_mtrl(["status", run_id, "--json"], emulator, capture=True)
    view = json.loads(shown.stdout) if shown.stdout.strip().startswith("{") else {}
    error = view.get("error") or {}
    cause = error.get("cause") or error.get("plain") or error.get("error") or "no cause recorded"
    console.print(
        f"\n[bold red]run {run_id} ended {view.get('status', 'unknown')}[/] at {error.get('step') or 'an unknown step'}"
        f": {cause}",
        highlight=False,
        soft_wrap=True,
    )
    console.print(
        "    the demo stops here (steps 4 and 5 need a finished run); fix the cause above, then run it again",
        highlight=False,
    )


def _show_run(s3: Any, bucket: str, run_id: str, plan: DemoPlan, *, work_dir: Path, console: Console) -> dict[str, Any]:
    """Print the run's summary tables, fetch its outputs into ``work_dir``; returns the pipeline's summary."""
    summary = read_json(s3, bucket, f"runs/{run_id}/summary.json")
    training = read_optional_json(s3, bucket, f"runs/{run_id}/local/summary.json")
    tasks = read_optional_json(s3, bucket, f"runs/{run_id}/local/tasks.json")
    if training and tasks and plan.hand_set_heuristic:
        training["heuristic"] = heuristic_evaluation(training, list(tasks["holdout"]))
    for table in summary_tables(summary, training):
        console.print(table)
    plot = fetch_plot(s3, bucket, run_id, work_dir)
    if plot:
        console.print(f"    learning curve (reward and held-out success per step): {plot}")
    for fetched in fetch_outputs(s3, bucket, run_id, work_dir):
        console.print(f"    fetched {fetched.relative_to(work_dir)}", highlight=False)
    return summary


def _print_what_runs(console: Console, plan: DemoPlan) -> None:
    console.print(f"    {plan.policy_line}", highlight=False)
    unit = "word" if plan.env_id == "wordle" else "task"
    held_out = _rows(plan.eval_path)
    # The run evaluates the first eval_tasks of them: the title says how many, so the tables below add up.
    evaluated = "" if plan.eval_tasks >= held_out else f"; the run evaluates the first {plan.eval_tasks}"
    console.print(
        f"    held out for evaluation: the sample's own eval.jsonl ({plural(held_out, unit)}, uploaded to "
        f"{plan.eval_key}{evaluated}); training on train.jsonl ({plural(_rows(plan.train_path), unit)})",
        highlight=False,
    )


def _rows(path: Path) -> int:
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


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
        fresh = [candidate for candidate in run_ids(session) if candidate not in known]
        run_id = fresh[0] if fresh else None
        if run_id is None:
            time.sleep(1)
    if run_id is None:
        console.print("    [red]no run started for the malformed upload[/]")
        return None, False
    watched = run_mtrl(["status", run_id, "--watch", "--interval", WATCH_INTERVAL], emulator)
    report = read_json(s3, bucket, f"runs/{run_id}/validation.json")
    console.print()
    errors = [*(report.get("train") or {}).get("errors", []), *((report.get("eval") or {}).get("errors", []))]
    console.print(validation_table(errors))
    shown = run_mtrl(["status", run_id, "--json"], emulator, capture=True)
    record = json.loads(shown.stdout) if shown.stdout.strip() else {}
    provisioned = record.get("resources") or record.get("job_id")
    console.print(
        f"    run {run_id}: exit {watched.returncode}, resources created: {len(provisioned or [])} "
        "(rejected before preflight and provisioning)"
    )
    return run_id, watched.returncode != 0 and not provisioned and bool(errors)
