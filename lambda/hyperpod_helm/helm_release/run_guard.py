"""A deploy during a run: an Update refuses to run while a run holds the training cluster (a live slot in the run
table, ``mtrl.runs.slots``) unless every holder is listed in ``InterruptibleRuns``. The HyperPod cluster update that
follows would reset the run's group to its idle count."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import boto3

from mtrl.runs.slots import live_holders


def live_slot_holders(table: str, region: str, now: float) -> list[str]:
    """Runs holding the training cluster: a slot with a holder whose lease has not run out."""
    return live_holders(boto3.client("dynamodb", region_name=region), table, now)


def refuse_while_runs_hold_the_cluster(props: Mapping[str, Any], region: str, now: float) -> None:
    """Raise unless no run holds the cluster or every holder is listed in InterruptibleRuns."""
    table = props.get("RunTable")
    if not table:
        return
    holders = live_slot_holders(str(table), region, now)
    allowed = set(json.loads(props.get("InterruptibleRuns") or "[]"))
    blocked = [run_id for run_id in holders if run_id not in allowed]
    if blocked:
        raise RuntimeError(
            f"runs {blocked} hold the training cluster: this deploy would reset their instance groups to the idle "
            "count and stop them. Wait for them (mtrl runs), cancel them (mtrl cancel <run-id>), or deploy again with "
            f"-c hyperpod_deploy_interrupts_runs='{json.dumps(blocked)}' to interrupt them. Nothing was changed."
        )
