"""Concurrency slots: at most N runs hold the training cluster; the others wait in arrival order.

Layout in the run table:
- slots ``pk=SLOT, sk=<index>`` with ``holder`` (run id) and ``lease_until`` (epoch seconds). A holder
  renews its lease while it works; a lease that ran out (a crashed run) frees the slot for the next run.
- tickets ``pk=QUEUE, sk=<arrival>#<run id>``: a waiting run's place in line, refreshed on every attempt.
  A ticket not refreshed for ``stale_after`` seconds belongs to a run that died while waiting and is
  skipped (and removed), so nobody queues behind a ghost.
All changes are conditional writes; a lost race simply means "try again on the next poll".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from mtrl.runs.registry import decode_item, is_conditional_failure, raise_for_client_error

SLOT_PK = "SLOT"
QUEUE_PK = "QUEUE"


def read_slots(dynamodb: Any, table_name: str) -> dict[int, dict[str, Any]]:
    """Every slot item of the run table, by index (one consistent query of ``pk=SLOT``)."""
    response = dynamodb.query(
        TableName=table_name,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": SLOT_PK}},
        ConsistentRead=True,
    )
    slots = {}
    for item in response.get("Items", []):
        decoded = decode_item(item)
        slots[int(decoded["sk"])] = decoded
    return slots


def is_held(slot: Mapping[str, Any], now: float) -> bool:
    """A slot is held while it has a holder whose lease has not run out."""
    return bool(slot.get("holder")) and int(slot.get("lease_until", 0)) >= now


def live_holders(dynamodb: Any, table_name: str, now: float) -> list[str]:
    """The runs holding a slot at ``now``, sorted (the training cluster is in use while any does)."""
    return sorted(str(slot["holder"]) for slot in read_slots(dynamodb, table_name).values() if is_held(slot, now))


@dataclass(frozen=True)
class Acquisition:
    acquired: bool
    slot: int | None = None
    position: int | None = None  # 0-based place in line while waiting
    waiting: int = 0
    holding: int = 0  # runs holding a slot while this one waits

    @property
    def runs_ahead(self) -> int:
        """The runs before this one: those holding a slot and those in line ahead of it."""
        return self.holding + (self.position or 0)


class SlotPool:
    def __init__(
        self,
        dynamodb: Any,
        table_name: str,
        *,
        capacity: int,
        lease_seconds: int,
        stale_after_seconds: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = dynamodb
        self._table = table_name
        self.capacity = capacity
        self.lease_seconds = lease_seconds
        self.stale_after = stale_after_seconds
        self._clock = clock

    # -- queue -------------------------------------------------------------------------------------
    def enqueue(self, run_id: str, arrival: str) -> None:
        """Take a place in line (idempotent: the same run keeps its place)."""
        now = int(self._clock())
        try:
            self._db.put_item(
                TableName=self._table,
                Item={
                    "pk": {"S": QUEUE_PK},
                    "sk": {"S": f"{arrival}#{run_id}"},
                    "kind": {"S": "queue-ticket"},
                    "run_id": {"S": run_id},
                    "heartbeat": {"N": str(now)},
                    "expires_at": {"N": str(now + 30 * 86400)},  # TTL sweeps tickets nobody removed
                },
                ConditionExpression="attribute_not_exists(pk)",
            )
        except ClientError as error:
            if not is_conditional_failure(error):
                raise_for_client_error(error, f"run {run_id}: joining the slot queue")

    def _tickets(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": QUEUE_PK}},
            "ConsistentRead": True,
        }
        while True:
            response = self._db.query(**request)
            items += [decode_item(item) for item in response.get("Items", [])]
            if "LastEvaluatedKey" not in response:
                return sorted(items, key=lambda item: str(item["sk"]))
            request["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def _slots(self) -> dict[int, dict[str, Any]]:
        return read_slots(self._db, self._table)

    def held_by(self, run_id: str) -> int | None:
        for index, slot in self._slots().items():
            if slot.get("holder") == run_id and index < self.capacity:
                return index
        return None

    # -- acquire / renew / release -----------------------------------------------------------------
    def try_acquire(self, run_id: str) -> Acquisition:
        now = int(self._clock())
        slots = self._slots()
        for index, slot in slots.items():
            if slot.get("holder") == run_id and index < self.capacity:
                self.renew(run_id)
                return Acquisition(True, slot=index)
        tickets = self._tickets()
        line: list[dict[str, Any]] = []
        for ticket in tickets:
            if ticket["run_id"] == run_id:
                self._touch(ticket, now)
                line.append(ticket)
            elif now - int(ticket.get("heartbeat", 0)) > self.stale_after:
                self._drop_ticket(ticket)
            else:
                line.append(ticket)
        position = next((i for i, ticket in enumerate(line) if ticket["run_id"] == run_id), None)
        if position is None:
            raise LookupError(f"run {run_id} has no place in the slot queue")
        free = [index for index in range(self.capacity) if index not in slots or not is_held(slots[index], now)]
        holding = sum(1 for index in range(self.capacity) if index not in free)
        if position >= len(free):
            return Acquisition(False, position=position, waiting=len(line), holding=holding)
        # Runs ahead in line take the first free slots; try "ours" first, then any other free one.
        for index in [free[position], *[i for i in free if i != free[position]]]:
            if self._claim(index, run_id, now):
                self._drop_ticket(line[position])
                return Acquisition(True, slot=index)
        return Acquisition(False, position=position, waiting=len(line), holding=holding)

    def _claim(self, index: int, run_id: str, now: int) -> bool:
        try:
            self._db.update_item(
                TableName=self._table,
                Key={"pk": {"S": SLOT_PK}, "sk": {"S": str(index)}},
                UpdateExpression="SET holder = :run, lease_until = :until, acquired_at = :now, kind = :kind",
                ConditionExpression="attribute_not_exists(holder) OR lease_until < :now",
                ExpressionAttributeValues={
                    ":run": {"S": run_id},
                    ":until": {"N": str(now + self.lease_seconds)},
                    ":now": {"N": str(now)},
                    ":kind": {"S": "slot"},
                },
            )
        except ClientError as error:
            if is_conditional_failure(error):
                return False
            raise_for_client_error(error, f"run {run_id}: taking slot {index}")
        return True

    def renew(self, run_id: str) -> bool:
        """Extend the lease of the slot ``run_id`` holds; False when it holds none (any more)."""
        index = self.held_by(run_id)
        if index is None:
            return False
        now = int(self._clock())
        try:
            self._db.update_item(
                TableName=self._table,
                Key={"pk": {"S": SLOT_PK}, "sk": {"S": str(index)}},
                UpdateExpression="SET lease_until = :until",
                ConditionExpression="holder = :run",
                ExpressionAttributeValues={":run": {"S": run_id}, ":until": {"N": str(now + self.lease_seconds)}},
            )
        except ClientError as error:
            if is_conditional_failure(error):
                return False
            raise_for_client_error(error, f"run {run_id}: renewing its slot lease")
        return True

    def release(self, run_id: str) -> bool:
        """Give back the slot and the place in line of ``run_id`` (idempotent); True if a slot was freed."""
        freed = False
        for index, slot in self._slots().items():
            if slot.get("holder") != run_id:
                continue
            try:
                self._db.update_item(
                    TableName=self._table,
                    Key={"pk": {"S": SLOT_PK}, "sk": {"S": str(index)}},
                    UpdateExpression="REMOVE holder, lease_until, acquired_at",
                    ConditionExpression="holder = :run",
                    ExpressionAttributeValues={":run": {"S": run_id}},
                )
                freed = True
            except ClientError as error:
                if not is_conditional_failure(error):
                    raise_for_client_error(error, f"run {run_id}: releasing slot {index}")
        for ticket in self._tickets():
            if ticket["run_id"] == run_id:
                self._drop_ticket(ticket)
        return freed

    def _touch(self, ticket: dict[str, Any], now: int) -> None:
        try:
            self._db.update_item(
                TableName=self._table,
                Key={"pk": {"S": QUEUE_PK}, "sk": {"S": ticket["sk"]}},
                UpdateExpression="SET heartbeat = :now",
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeValues={":now": {"N": str(now)}},
            )
        except ClientError as error:
            if not is_conditional_failure(error):
                raise_for_client_error(error, f"run {ticket['run_id']}: refreshing its place in line")

    def _drop_ticket(self, ticket: dict[str, Any]) -> None:
        self._db.delete_item(TableName=self._table, Key={"pk": {"S": QUEUE_PK}, "sk": {"S": ticket["sk"]}})

    def snapshot(self) -> dict[str, Any]:
        """Holders and the queue, for status displays and tests."""
        now = int(self._clock())
        slots = self._slots()
        return {
            "holders": {index: slot.get("holder") for index, slot in slots.items() if is_held(slot, now)},
            "queue": [ticket["run_id"] for ticket in self._tickets()],
        }
