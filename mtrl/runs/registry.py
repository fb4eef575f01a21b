"""The run registry: one item per run in the run table, changed only through conditional writes.

Item ``pk=RUN#<run id>, sk=RUN, kind=run``. Every write checks the item's ``version`` (optimistic
locking), so two concurrent updates can never silently overwrite each other; a terminal status is final.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from botocore.exceptions import ClientError

from mtrl.contracts.backend import CreatedResource, JobState
from mtrl.contracts.errors import InternalError, TransientError


@functools.cache
def _dynamodb_types() -> tuple[Any, Any]:
    """boto3's item (de)serializer, imported on first use: importing boto3 costs a CLI command about 0.15 CPU-s."""
    from boto3.dynamodb.types import TypeDeserializer, TypeSerializer  # noqa: PLC0415

    return TypeSerializer(), TypeDeserializer()


_MAX_CONFLICT_RETRIES = 8


class RunStatus(StrEnum):
    REGISTERED = "REGISTERED"
    WAITING_FOR_SLOT = "WAITING_FOR_SLOT"
    VALIDATING = "VALIDATING"
    PREFLIGHT = "PREFLIGHT"
    PROVISIONING = "PROVISIONING"
    EVALUATING_BASELINE = "EVALUATING_BASELINE"
    SUBMITTING = "SUBMITTING"
    TRAINING = "TRAINING"
    EVALUATING = "EVALUATING"
    TEARING_DOWN = "TEARING_DOWN"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    ABORTED = "ABORTED"
    STOPPED = "STOPPED"  # early_stop: a training-health rule cancelled the job (stop_reason names it)

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset(
    {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.ABORTED, RunStatus.STOPPED}
)


_ENDED_JOB_STATES = frozenset(state.value for state in JobState if state.terminal)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def run_key(run_id: str) -> dict[str, Any]:
    return {"pk": {"S": f"RUN#{run_id}"}, "sk": {"S": "RUN"}}


def encode_item(values: Mapping[str, Any]) -> dict[str, Any]:
    # DynamoDB numbers must be Decimal; a JSON round trip turns floats into Decimals exactly as written.
    plain = json.loads(json.dumps(values, default=str), parse_float=Decimal)
    return {key: _dynamodb_types()[0].serialize(value) for key, value in plain.items() if value is not None}


def decode_item(item: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _plain(_dynamodb_types()[1].deserialize(value)) for key, value in item.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | set | tuple):
        return [_plain(item) for item in value]
    return value


def is_conditional_failure(error: ClientError) -> bool:
    return bool(error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException")


_TRANSIENT_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "TransactionConflictException",
    }
)


def raise_for_client_error(error: ClientError, what: str) -> None:
    code = error.response.get("Error", {}).get("Code", "")
    if code in _TRANSIENT_CODES:
        raise TransientError(f"{what}: {code}") from error
    raise InternalError(f"{what}: {code}: {error}") from error


class RunNotFound(LookupError):
    pass


class RunRegistry:
    def __init__(self, dynamodb: Any, table_name: str, *, clock: Callable[[], str] = now_iso) -> None:
        self._db = dynamodb
        self._table = table_name
        self._now = clock
        # The last version of each record this registry read or wrote: an update first tries its write against it
        # (the version condition refuses it if the record moved), saving the read a phase's consecutive updates
        # would otherwise each make. Copies, never objects handed to a caller.
        self._known: dict[str, dict[str, Any]] = {}

    # -- reads ---------------------------------------------------------------------------------------
    def get(self, run_id: str) -> dict[str, Any]:
        record = self._read(run_id)
        self._known[run_id] = copy.deepcopy(record)
        return record

    def _read(self, run_id: str) -> dict[str, Any]:
        """A consistent read of the record."""
        self._known.pop(run_id, None)
        try:
            response = self._db.get_item(TableName=self._table, Key=run_key(run_id), ConsistentRead=True)
        except ClientError as error:
            raise_for_client_error(error, f"run {run_id}: reading the run record")
        if "Item" not in response:
            raise RunNotFound(f"run {run_id} is not registered")
        return decode_item(response["Item"])

    def find(self, run_id: str) -> dict[str, Any] | None:
        try:
            return self.get(run_id)
        except RunNotFound:
            return None

    # -- writes --------------------------------------------------------------------------------------
    def create(self, run_id: str, values: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        """Insert the record unless it exists; returns (record, created)."""
        now = self._now()
        record = {
            "pk": f"RUN#{run_id}",
            "sk": "RUN",
            "kind": "run",
            "run_id": run_id,
            "created_at": now,
            "updated_at": now,
            "status": RunStatus.REGISTERED.value,
            "version": 1,
            "phases": {},
            "resources": [],
            **values,
        }
        try:
            self._db.put_item(
                TableName=self._table,
                Item=encode_item(record),
                ConditionExpression="attribute_not_exists(pk)",
            )
        except ClientError as error:
            if is_conditional_failure(error):
                return self.get(run_id), False
            raise_for_client_error(error, f"run {run_id}: registering the run")
        self._known[run_id] = copy.deepcopy(record)
        return record, True

    def update(self, run_id: str, change: Callable[[dict[str, Any]], bool | None]) -> dict[str, Any]:
        """Apply ``change`` to a fresh copy and write it back if the record did not move meanwhile.

        ``change`` mutates the record in place; returning False means "nothing to write". That is decided on a
        consistent read only; a write may first be tried against the version this registry last saw, which the
        version condition refuses if the record has moved since (then it is read again, as on any conflict).
        """
        known = self._known.pop(run_id, None)
        reads = 0
        while known is not None or reads < _MAX_CONFLICT_RETRIES:
            if known is None:
                record, fresh = self._read(run_id), True
                reads += 1
            else:
                record, known, fresh = known, None, False
            version = int(record["version"])
            if change(record) is False:
                if not fresh:
                    continue
                self._known[run_id] = copy.deepcopy(record)
                return record
            record["version"] = version + 1
            record["updated_at"] = self._now()
            try:
                self._db.put_item(
                    TableName=self._table,
                    Item=encode_item(record),
                    ConditionExpression="version = :version",
                    ExpressionAttributeValues={":version": {"N": str(version)}},
                )
            except ClientError as error:
                if not is_conditional_failure(error):
                    raise_for_client_error(error, f"run {run_id}: updating the run record")
                continue
            self._known[run_id] = copy.deepcopy(record)
            return record
        raise TransientError(f"run {run_id}: the run record kept changing while being updated")

    def set_status(self, run_id: str, status: RunStatus, *, phase: str | None = None) -> dict[str, Any]:
        """Move to ``status`` (never out of a terminal one); ``phase`` gets its start time recorded."""

        def change(record: dict[str, Any]) -> bool:
            if RunStatus(record["status"]).terminal:
                return False
            record["status"] = status.value
            if phase:
                record["phases"].setdefault(phase, {})
                record["phases"][phase].setdefault("started_at", self._now())
            return True

        return self.update(run_id, change)

    def end_phase(self, run_id: str, phase: str, outcome: str = "ok", **details: Any) -> dict[str, Any]:
        def change(record: dict[str, Any]) -> None:
            entry = record["phases"].setdefault(phase, {"started_at": self._now()})
            entry["ended_at"] = self._now()
            entry["outcome"] = outcome
            entry.update(details)

        return self.update(run_id, change)

    def end_open_phases(self, run_id: str, outcome: str, *, but: str) -> dict[str, Any]:
        """End every phase still open except ``but`` (teardown ends the phase an interrupted run was in, so its
        clock stops there instead of running on after the run is gone)."""

        def change(record: dict[str, Any]) -> bool:
            open_phases = [entry for name, entry in record["phases"].items() if name != but and "ended_at" not in entry]
            for entry in open_phases:
                entry["ended_at"] = self._now()
                entry["outcome"] = outcome
            return bool(open_phases)

        return self.update(run_id, change)

    def set_job_status(self, run_id: str, job_state: str, **fields: Any) -> dict[str, Any]:
        """A poll's view of the job: a job already ended (teardown stopped it) never goes back to a running state,
        even when a poll that started before the stop writes after it."""

        def change(record: dict[str, Any]) -> None:
            if record.get("job_state") in _ENDED_JOB_STATES and job_state not in _ENDED_JOB_STATES:
                record.update({key: value for key, value in fields.items() if key != "job_message"})
            else:
                record.update(fields, job_state=job_state)

        return self.update(run_id, change)

    def set_fields(self, run_id: str, **fields: Any) -> dict[str, Any]:
        def change(record: dict[str, Any]) -> None:
            record.update(fields)

        return self.update(run_id, change)

    def record_resource(self, run_id: str, resource: CreatedResource) -> None:
        """Remember a resource before it is created (so teardown can always find it). Idempotent."""

        def change(record: dict[str, Any]) -> bool:
            for entry in record["resources"]:
                if entry["kind"] == resource.kind and entry["identifier"] == resource.identifier:
                    return False
            record["resources"].append(
                {
                    "kind": resource.kind,
                    "identifier": resource.identifier,
                    "details": dict(resource.details),
                    "recorded_at": self._now(),
                }
            )
            return True

        self.update(run_id, change)

    def mark_removed(self, run_id: str, removed: list[CreatedResource]) -> None:
        names = {(item.kind, item.identifier) for item in removed}

        def change(record: dict[str, Any]) -> bool:
            changed = False
            for entry in record["resources"]:
                if (entry["kind"], entry["identifier"]) in names and "removed_at" not in entry:
                    entry["removed_at"] = self._now()
                    changed = True
            return changed

        if names:
            self.update(run_id, change)

    def finish(self, run_id: str, status: RunStatus, *, error: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Make the record final (first final status wins)."""

        def change(record: dict[str, Any]) -> bool:
            if RunStatus(record["status"]).terminal:
                return False
            record["status"] = status.value
            record["finished_at"] = self._now()
            if error:
                record["error"] = dict(error)
            return True

        return self.update(run_id, change)

    def claim_notification(self, run_id: str) -> bool:
        """True exactly once per run: the caller may then publish the run's one notification."""
        self._known.pop(run_id, None)  # the version moves below
        try:
            self._db.update_item(
                TableName=self._table,
                Key=run_key(run_id),
                # Bumping the version makes any concurrent read-modify-write retry instead of dropping this.
                UpdateExpression="SET notified_at = :now, version = version + :one",
                ConditionExpression="attribute_exists(pk) AND attribute_not_exists(notified_at)",
                ExpressionAttributeValues={":now": {"S": self._now()}, ":one": {"N": "1"}},
            )
        except ClientError as error:
            if is_conditional_failure(error):
                return False
            raise_for_client_error(error, f"run {run_id}: recording the notification")
        return True
