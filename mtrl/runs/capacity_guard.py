"""The GPU safety net: a scheduled check that scales back any watched HyperPod instance group that is above its idle
count while no live run holds it, and says so on the notification topic.

Teardown releases a run's GPUs on every path the pipeline knows (the state machine's catch-alls and the reaper); this
check exists for the paths nobody foresaw (a bug in teardown, a hand-made ``UpdateCluster``, a run record lost), so
GPUs can never stay up for days unnoticed.

A group is *held* when a run that is not final has a ``hyperpod-capacity`` resource for it that was not removed. The
hyperpod adapter records that resource **before** it scales the group, and this check reads the cluster **before**
the run table, so a run that starts scaling during the check is seen as a holder. The run listing comes from the
table's GSI, which DynamoDB keeps only eventually consistent with the table ("Global secondary indexes ... support
eventually consistent reads only"): right after ``record_resource`` the index can still show the run without its
capacity. So a group that looks unheld is scaled back only after every live run of the listing has been re-read from
the table itself with a strongly consistent ``GetItem``. Reading and scaling the cluster's groups is the hyperpod
backend's (``mtrl.backends.hyperpod.capacity``: the adapter's own implementation); a cluster that is busy updating is
left for the next check.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.exceptions import ClientError

from mtrl.backends.hyperpod import ProvisioningInProgress
from mtrl.backends.hyperpod.capacity import describe_cluster, group_size, held_group, scale_group
from mtrl.contracts.backend import BackendError
from mtrl.contracts.errors import InternalError, TransientError
from mtrl.runs.registry import TERMINAL_STATUSES, decode_item, raise_for_client_error, run_key
from mtrl.runs.runtime import Runtime

# Environment variables PipelineStack.add_capacity_guard sets on the guard function.
ENV_GUARDED_CLUSTER = "MTRL_GUARDED_CLUSTER"
ENV_GUARDED_GROUPS = "MTRL_GUARDED_GROUPS"  # JSON object: instance group name → idle count

# The run table's listing index (stacks.constructs.data_store.RUN_TABLE_LISTING_INDEX; not imported: CDK).
LISTING_INDEX = "by_kind"
RUN_KIND = "run"


@dataclass(frozen=True)
class GuardedCluster:
    """The HyperPod cluster whose GPU groups are watched, and each group's idle count."""

    name: str
    idle_counts: Mapping[str, int]

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> GuardedCluster:
        name = environ.get(ENV_GUARDED_CLUSTER, "")
        try:
            groups = json.loads(environ.get(ENV_GUARDED_GROUPS, ""))
        except json.JSONDecodeError as error:
            raise InternalError(f"{ENV_GUARDED_GROUPS} is not JSON ({error}): the deployment is broken") from None
        if not name or not isinstance(groups, dict) or not groups:
            raise InternalError(
                f"the capacity guard needs {ENV_GUARDED_CLUSTER} and a non-empty {ENV_GUARDED_GROUPS} "
                "(the deployment is broken)"
            )
        return cls(name=name, idle_counts={str(group): int(idle) for group, idle in groups.items()})


@dataclass
class GuardResult:
    scaled_back: list[dict[str, Any]] = field(default_factory=list)
    held: list[dict[str, Any]] = field(default_factory=list)
    busy: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"scaled_back": self.scaled_back, "held": self.held, "busy": self.busy, "problems": self.problems}


def live_runs(runtime: Runtime) -> list[dict[str, Any]]:
    """The records of runs that are not final, as the listing index shows them (eventually consistent)."""
    request: dict[str, Any] = {
        "TableName": runtime.table,
        "IndexName": LISTING_INDEX,
        "KeyConditionExpression": "kind = :kind",
        "ExpressionAttributeValues": {":kind": {"S": RUN_KIND}},
    }
    runs: list[dict[str, Any]] = []
    while True:
        try:
            page = runtime.dynamodb.query(**request)
        except ClientError as error:
            raise_for_client_error(error, "capacity guard: reading the run table")
            raise
        # A run the index shows as final is final in the table too (a final status never changes).
        runs += [r for r in map(decode_item, page.get("Items", [])) if r.get("status") not in TERMINAL_STATUSES]
        if "LastEvaluatedKey" not in page:
            return runs
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def holders_in(records: list[dict[str, Any]], cluster: str) -> dict[str, list[str]]:
    """Instance group → ids of the runs among ``records`` that are not final and hold it (capacity recorded, not
    removed)."""
    holders: dict[str, list[str]] = {}
    for record in records:
        if record.get("status") in TERMINAL_STATUSES:
            continue
        for resource in record["resources"]:
            group = held_group(resource, cluster)
            if group is not None:
                holders.setdefault(group, []).append(str(record["run_id"]))
    return holders


def confirmed_holders(runtime: Runtime, runs: list[dict[str, Any]], cluster: str) -> dict[str, list[str]]:
    """The same, with each listed run re-read from the table with a strongly consistent read (what a run recorded
    is there, whatever the index shows yet). A run deleted since the listing holds nothing."""
    records = []
    for listed in runs:
        run_id = str(listed.get("run_id"))
        try:
            response = runtime.dynamodb.get_item(TableName=runtime.table, Key=run_key(run_id), ConsistentRead=True)
        except ClientError as error:
            raise_for_client_error(error, f"capacity guard: reading run {run_id}")
            raise
        if "Item" in response:
            records.append(decode_item(response["Item"]))
    return holders_in(records, cluster)


def check_capacity(runtime: Runtime, sagemaker: Any, guarded: GuardedCluster) -> GuardResult:
    """Scale back every watched group above its idle count that no live run holds; alert on what it did."""
    result = GuardResult()
    groups = sorted(guarded.idle_counts)
    try:
        cluster = describe_cluster(sagemaker, guarded.name)  # before the run table: see module doc
    except BackendError as error:
        raise TransientError(f"capacity guard: {error}") from error
    runs = live_runs(runtime)
    holders = holders_in(runs, guarded.name)
    confirmed: dict[str, list[str]] | None = None  # read from the table only when a group looks unheld
    for group in groups:
        idle = guarded.idle_counts[group]
        try:
            size = group_size(cluster, group)
        except BackendError as error:
            result.problems.append(str(error))
            continue
        if size.target <= idle:
            continue
        entry = {"group": group, "instance_type": size.instance_type, "target": size.target, "idle": idle}
        if not holders.get(group):
            if confirmed is None:
                confirmed = confirmed_holders(runtime, runs, guarded.name)
            holders[group] = confirmed.get(group, [])
        if holders.get(group):
            result.held.append({**entry, "runs": holders[group]})
            continue
        try:
            scale_group(sagemaker, guarded.name, group, idle)
        except ProvisioningInProgress as error:
            result.busy.append({**entry, "reason": str(error)})
            continue
        except BackendError as error:
            result.problems.append(f"scaling {group} back to {idle}: {error}")
            continue
        result.scaled_back.append(entry)
    if result.scaled_back or result.problems:
        _alert(runtime, guarded.name, result)
    return result


def _alert(runtime: Runtime, cluster: str, result: GuardResult) -> None:
    if not runtime.topic_arn or runtime.sns is None:
        raise InternalError("capacity guard: no notification topic configured (the deployment is broken)")
    lines = [f"The GPU safety net checked HyperPod cluster {cluster}."]
    for entry in result.scaled_back:
        lines.append(
            f"- Scaled {entry['group']} ({entry['instance_type'] or 'GPU'}) back from {entry['target']} to its idle "
            f"count {entry['idle']}: no run in progress holds it. Find the run that scaled it in `mtrl runs` and "
            "read its teardown in `mtrl logs <run-id>`."
        )
    for problem in result.problems:
        lines.append(f"- Could not check or scale back: {problem}")
    subject = (
        f"mtrl: GPU safety net scaled back {', '.join(e['group'] for e in result.scaled_back)}"
        if result.scaled_back
        else "mtrl: GPU safety net could not check the cluster"
    )
    try:
        runtime.sns.publish(TopicArn=runtime.topic_arn, Subject=subject[:100], Message="\n".join(lines))
    except ClientError as error:
        raise TransientError(f"capacity guard: publishing the alert failed: {error}") from error


def guard(runtime: Runtime, _event: Mapping[str, Any]) -> dict[str, Any]:
    """The scheduled entry point (an EventBridge schedule event; its content is not used)."""
    return check_capacity(runtime, boto3.client("sagemaker"), GuardedCluster.from_env(os.environ)).as_dict()
