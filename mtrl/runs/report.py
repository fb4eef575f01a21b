"""The end of a run in words: ``runs/<run-id>/summary.json`` and the one notification per finished run."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from mtrl.contracts.errors import in_plain_words

MAX_CAUSE_CHARS = 1500


def cause_text(cause: str | None) -> str:
    """The human part of a Step Functions ``Cause`` (Lambda errors arrive as a JSON document)."""
    if not cause:
        return ""
    try:
        document = json.loads(cause)
    except (json.JSONDecodeError, TypeError):
        return cause[:MAX_CAUSE_CHARS]
    if isinstance(document, dict) and "errorMessage" in document:
        return str(document["errorMessage"])[:MAX_CAUSE_CHARS]
    return cause[:MAX_CAUSE_CHARS]


def _seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    try:
        begin = datetime.fromisoformat(start.replace("Z", "+00:00"))
        finish = datetime.fromisoformat(end.replace("Z", "+00:00"))
    except ValueError:
        return None
    return round((finish - begin).total_seconds(), 3)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float | Decimal) and not isinstance(value, bool) else None


def baseline_comparison(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The run's baseline evaluation (the base model before training) next to the after-training score, per
    metric; None when the run did not ask for one (``baseline_evaluation``).

    A backend with a Baseline phase (serverless) records ``baseline`` with the same metric names as its
    ``evaluation``; one that measures the untrained policy inside training (local) reports ``<name>_before`` and
    ``<name>_after`` in its ``evaluation``. A figure not measured (the run failed first) is None.
    """
    settings = record.get("settings") or {}
    if not settings.get("baseline_evaluation"):
        return None
    evaluation = dict(record.get("evaluation") or {})
    if record.get("baseline") is not None:
        before = dict(record["baseline"])
        after = evaluation
    else:
        before = {name.removesuffix("_before"): v for name, v in evaluation.items() if name.endswith("_before")}
        after = {name.removesuffix("_after"): v for name, v in evaluation.items() if name.endswith("_after")}
    # Loaded here, so `mtrl status --help` starts without the backends.
    from mtrl.contracts.registry import UnknownBackendError, descriptor_for  # noqa: PLC0415

    try:
        support = descriptor_for(str(settings.get("backend"))).baseline
    except UnknownBackendError:
        support = None
    measure = (record.get("evaluation_settings") or {}).get("evaluation_measure")
    return {
        "how": support.how if support else None,
        "measure": measure,
        "metrics": {
            name: {"baseline": _number(before.get(name)), "after_training": _number(after.get(name))}
            for name in sorted(set(before) | set(after))
        },
    }


def build_summary(record: Mapping[str, Any], *, bucket: str) -> dict[str, Any]:
    phases = {
        name: {**entry, "seconds": _seconds_between(entry.get("started_at"), entry.get("ended_at"))}
        for name, entry in record["phases"].items()
    }
    remaining = [r for r in record["resources"] if "removed_at" not in r]
    return {
        "run_id": record["run_id"],
        "status": record["status"],
        "created_at": record["created_at"],
        "finished_at": record.get("finished_at"),
        "duration_seconds": _seconds_between(record["created_at"], record.get("finished_at")),
        "dataset": record.get("dataset"),
        "settings": record.get("settings"),
        "phases": phases,
        "job_id": record.get("job_id"),
        "progress": record.get("progress") or {},
        "metrics": record.get("metrics") or {},
        "evaluation": record.get("evaluation") or {},
        "evaluation_settings": record.get("evaluation_settings") or {},
        "baseline": baseline_comparison(record),
        "cost": record.get("cost") or {},
        "outputs": record.get("outputs") or {},
        "resources": record["resources"],
        "resources_remaining": remaining,
        "validation_report": record.get("validation", {}).get("report_uri"),
        # eval_split runs: the training and held-out rows the backend was given (written by Validate).
        "dataset_splits": record.get("validation", {}).get("splits"),
        "error": record.get("error"),
        "stop_reason": record.get("stop_reason"),  # early_stop: the health rule that cancelled the job
        "checkpoints": record.get("stop_checkpoints"),  # early_stop: the latest and best-evaluation checkpoints kept
        "health": record.get("health"),  # the training-health verdict of the last status poll (mtrl.health)
        "summary_uri": f"s3://{bucket}/runs/{record['run_id']}/summary.json",
    }


def notification_choice(record: Mapping[str, Any]) -> str:
    """A run's ``backend_options.notifications`` (serverless ``options.RUN_OPTIONS``): all (default), failures, none.
    It governs the run's end notification and its training-health notices alike."""
    choice = ((record.get("settings") or {}).get("backend_options") or {}).get("notifications", "all")
    return str(choice) if choice in {"all", "failures", "none"} else "all"


def baseline_lines(comparison: Mapping[str, Any] | None) -> list[str]:
    """``Baseline → after training: name b → a`` per metric, for the notification."""
    if not comparison:
        return []

    def shown(value: float | None) -> str:
        return "not measured" if value is None else f"{value:.4g}"

    measure = f" ({comparison['measure']})" if comparison.get("measure") else ""
    pairs = ", ".join(
        f"{name} {shown(pair['baseline'])} → {shown(pair['after_training'])}"
        for name, pair in comparison["metrics"].items()
    )
    return [f"Baseline before training → after training{measure}: {pairs or 'not measured'}"]


def converged_at(health: Mapping[str, Any] | None, *, succeeded: bool) -> int | None:
    """The step from which a run that SUCCEEDED had levelled off, when plateau is all that fired (its "stop" is then
    news, not an alarm: the run converged); else None."""
    fired = (health or {}).get("fired") or []
    if not succeeded or not health or health.get("verdict") != "stop" or not fired:
        return None
    if any(item.get("rule") != "plateau" for item in fired):
        return None
    return min(int(item["step"]) for item in fired)


def converged_text(step: int) -> str:
    return f"the reward stopped improving from step {step} (rule plateau; nothing to fix)"


def health_lines(health: dict[str, Any] | None, *, succeeded: bool = False) -> list[str]:
    """The verdict and the rules that fired, in words (``mtrl status``, the summary's notification)."""
    if not health:
        return []
    if health.get("error"):
        return [f"Training health: not evaluated ({health['error']})"]
    step = converged_at(health, succeeded=succeeded)
    if step is not None:
        return [f"Training health: converged: {converged_text(step)}"]
    fired = health.get("fired") or []
    rules = ", ".join(f"{item['rule']} {item['level']} at step {item['step']}" for item in fired)
    return [f"Training health: {health['verdict']}" + (f" ({rules})" if rules else " (no rule fired)")]


def checkpoint_lines(kept: Mapping[str, Any] | None) -> list[str]:
    """Which checkpoints an early-stopped run kept (or that its backend has none), in words."""
    if not kept:
        return []
    if kept.get("error"):
        return [f"Checkpoints: not recorded ({kept['error']})"]
    lines = []
    for name, label in (("latest", "latest"), ("best_evaluation", "best held-out evaluation")):
        item = kept.get(name)
        if isinstance(item, Mapping):
            score = f", evaluation {item['evaluation_mean']:.4g}" if "evaluation_mean" in item else ""
            lines.append(f"Checkpoint kept ({label}): step {item.get('step')}{score}: {item.get('uri')}")
    if kept.get("note"):
        lines.append(f"Checkpoints: {kept['note']}")
    return lines


def notification(summary: Mapping[str, Any]) -> tuple[str, str]:
    """(subject ≤ 100 characters, plain-text body) naming the failing step and cause in plain words."""
    run_id = summary["run_id"]
    status = summary["status"]
    error = summary.get("error") or {}
    dataset = summary.get("dataset") or {}
    lines = []
    if status == "SUCCEEDED":
        subject = f"mtrl run succeeded: {run_id}"
        lines.append(f"Run {run_id} finished successfully.")
        if summary.get("metrics"):
            metrics = ", ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(summary["metrics"].items())
            )
            lines.append(f"Metrics: {metrics}")
        if summary.get("outputs"):
            lines += [f"Output {name}: {uri}" for name, uri in sorted(summary["outputs"].items())]
        lines += baseline_lines(summary.get("baseline"))
    else:
        step = error.get("step") or "unknown step"
        subject = f"mtrl run {status.lower().replace('_', ' ')} at {step}: {run_id}"
        lines.append(f"Run {run_id} {status.replace('_', ' ').lower()} in step '{step}'.")
        lines.append(f"What happened: {error.get('plain') or in_plain_words(str(error.get('error')))}.")
        if error.get("cause"):
            lines.append(f"Details: {error['cause']}")
        lines += checkpoint_lines(summary.get("checkpoints"))
    lines += health_lines(summary.get("health"), succeeded=status == "SUCCEEDED")
    if dataset.get("uri"):
        lines.append(f"Dataset: {dataset['uri']} (version {dataset.get('version_id') or 'none'})")
    if summary.get("duration_seconds") is not None:
        lines.append(f"Duration: {summary['duration_seconds']:.0f} s")
    if summary.get("cost"):
        lines.append(f"Cost: {json.dumps(summary['cost'], sort_keys=True)}")
    remaining = summary.get("resources_remaining") or []
    if remaining:
        names = ", ".join(f"{r['kind']} {r['identifier']}" for r in remaining)
        lines.append(f"WARNING: teardown could not remove: {names}. Remove them by hand.")
    else:
        lines.append("Teardown: every resource the run created was removed and its slot released.")
    lines.append(f"Summary: {summary['summary_uri']}")
    if summary.get("validation_report"):
        lines.append(f"Validation report: {summary['validation_report']}")
    return subject[:100], "\n".join(lines)
