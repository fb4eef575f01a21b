"""Recording AWS calls at botocore's ``BaseClient._make_api_call`` and asserting them against a role's policies."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore.client import BaseClient

from tests.contract.iam.catalog import request_problems
from tests.contract.iam.model import AppModel, ModelError, RolePolicies
from tests.contract.iam.operations import AwsCall, Env, NoMapping, jsonable
from tests.contract.iam.policy import Decision, IamRequest, Outcome
from tests.contract.iam.requests import requests_for


@dataclass
class CallRecorder:
    """Every botocore API call made while active (any client, any session; moto-answered calls included).

    ``with CallRecorder() as calls: …`` then ``calls.calls``; ``calls.write_jsonl(path)`` for a recording file.
    """

    calls: list[AwsCall] = field(default_factory=list)

    @contextmanager
    def _active(self) -> Iterator[CallRecorder]:
        original = BaseClient._make_api_call
        recorder = self

        def recording(client: BaseClient, operation_name: str, api_params: dict[str, Any]) -> Any:
            recorder.calls.append(
                AwsCall(
                    service=client.meta.service_model.service_name,
                    operation=operation_name,
                    params=jsonable(api_params),
                    region=str(client.meta.region_name),
                )
            )
            return original(client, operation_name, api_params)

        BaseClient._make_api_call = recording
        try:
            yield self
        finally:
            BaseClient._make_api_call = original

    def __enter__(self) -> CallRecorder:
        self._context = self._active()
        return self._context.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._context.__exit__(None, None, None)

    def write_jsonl(self, path: Path) -> None:
        path.write_text("".join(json.dumps(c.to_record(), sort_keys=True) + "\n" for c in self.calls))


def read_jsonl(path: Path) -> list[AwsCall]:
    return [AwsCall.from_record(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


@dataclass(frozen=True)
class CallDecision:
    """One IAM request of one call and its decision (``decision`` None: the call could not be mapped)."""

    call: AwsCall
    request: IamRequest | None
    decision: Decision | None
    problem: str = ""

    @property
    def ok(self) -> bool:
        return self.decision is not None and self.decision.allowed

    def line(self) -> str:
        if self.request is None:
            return f"{self.call}: {self.problem}"
        if self.decision is None:
            return f"{self.call} → {self.request.action} on {self.request.resource}: {self.problem}"
        return f"{self.call} → {self.request.action} on {self.request.resource}: {self.decision.reason}"

    @property
    def statement(self) -> str:
        """The statements that allow it (for tables)."""
        return ", ".join(s.label for s in self.decision.allowed_by) if self.decision else ""


def explain_calls(
    calls: Iterable[AwsCall],
    role: str | RolePolicies,
    *,
    model: AppModel,
    context: Mapping[str, Any] | None = None,
    accept_unverified: Mapping[str, str] | None = None,
    managed_grants: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> list[CallDecision]:
    """Every IAM request of every call with its decision, in call order (duplicates folded)."""
    calls = list(calls)
    policies = model.role(role) if isinstance(role, str) else role
    env = Env.of(model, calls)
    results: list[CallDecision] = []
    seen: set[str] = set()
    for call in calls:
        key = json.dumps(call.to_record(), sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        try:
            requests = requests_for(call, env)
        except (NoMapping, ModelError, KeyError, ValueError) as error:
            detail = f"{type(error).__name__}: {error}" if isinstance(error, KeyError) else str(error)
            results.append(CallDecision(call, None, None, detail))
            continue
        for request in requests:
            problems = request_problems(request)
            if problems:  # the mapping built something IAM does not know: a bug in the table, never a pass
                results.append(CallDecision(call, request, None, "; ".join(problems)))
                continue
            decision = policies.decide(
                request, context=context, accept_unverified=accept_unverified, managed_grants=managed_grants
            )
            results.append(CallDecision(call, request, decision))
    return results


def assert_calls_allowed(
    calls: Iterable[AwsCall],
    role: str | RolePolicies,
    *,
    model: AppModel,
    context: Mapping[str, Any] | None = None,
    accept_unverified: Mapping[str, str] | None = None,
    managed_grants: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> list[CallDecision]:
    """Raise AssertionError listing every call the role does not allow (``service.Operation → action on resource:
    reason``); returns the decisions otherwise. An empty ``calls`` is an error: a contract over nothing proves
    nothing."""
    calls = list(calls)
    if not calls:
        raise AssertionError("no AWS calls to check (was the recorder active?)")
    policies = model.role(role) if isinstance(role, str) else role
    decisions = explain_calls(
        calls,
        policies,
        model=model,
        context=context,
        accept_unverified=accept_unverified,
        managed_grants=managed_grants,
    )
    failed = [d for d in decisions if not d.ok]
    if failed:
        unverified = sorted({k for d in failed if d.decision for k in d.decision.unverified_keys})
        hint = f"\n(unverified condition keys: {', '.join(unverified)})" if unverified else ""
        raise AssertionError(
            f"{len(failed)} IAM request(s) not allowed for role {policies.name}:\n"
            + "\n".join(f"  {d.line()}" for d in failed)
            + hint
        )
    return decisions


def markdown_table(decisions: Iterable[CallDecision]) -> str:
    """| call | IAM request | allowed by | (for reports and docs)."""
    rows = ["| call | IAM action on resource | allowed by |", "| --- | --- | --- |"]
    for d in decisions:
        request = f"{d.request.action} on `{d.request.resource}`" if d.request else d.problem
        verdict = d.statement if d.ok else f"**{d.decision.outcome.value if d.decision else Outcome.DENIED.value}**"
        rows.append(f"| {d.call} | {request} | {verdict} |")
    return "\n".join(rows)
