"""IAM identity-policy evaluation: statements, wildcards, conditions, explicit deny.

Semantics follow the IAM User Guide's "Policy evaluation logic" and "IAM JSON policy elements: Condition
operators" pages (docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html and
…/reference_policies_elements_condition_operators.html):

- an explicit ``Deny`` wins over any ``Allow``; no matching ``Allow`` is an implicit deny;
- actions match case-insensitively with ``*``/``?``; resources and ARN conditions case-sensitively, wildcards
  staying inside their ARN segment (partition, service, region, account; the resource part is one segment);
- within a condition block, operators AND together, keys within an operator AND together, values of one key OR
  together (for negated operators: the key matches none of them);
- a missing key makes a positive operator false and a negated one (``StringNotEquals``, ``ArnNotLike``…) true;
  ``…IfExists`` is true on a missing key; ``Null`` tests presence; ``ForAllValues`` is true on a missing or empty
  key, ``ForAnyValue`` false.

What a unit test cannot know is never guessed: a condition on a key that the request does not state (neither a
value nor ``ABSENT``) is *unverified*. A decision that depends on one is ``UNVERIFIED`` and names the keys; the
caller accepts such keys explicitly (``accept_unverified``), one by one, with a reason.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from functools import lru_cache, partial
from typing import Any


class _Absent:
    """The request is known not to carry this key (e.g. ``s3:prefix`` on a ListObjectsV2 without ``Prefix``)."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


@dataclass(frozen=True)
class IamRequest:
    """One authorization request: an IAM action on one resource ARN (or ``*``) with the condition keys it carries.

    ``context`` holds what the request states; a value ``ABSENT`` means the key is known to be missing.
    ``note`` says why this request belongs to the call (e.g. "HeadObject is authorized as s3:GetObject").
    """

    action: str
    resource: str
    context: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""

    def __str__(self) -> str:
        return f"{self.action} on {self.resource}"


@dataclass(frozen=True)
class Statement:
    effect: str
    actions: tuple[str, ...] = ()
    not_actions: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    not_resources: tuple[str, ...] = ()
    conditions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    sid: str = ""
    source: str = ""  # the policy it came from (e.g. "inline BackendPermissions/Policy")

    @classmethod
    def from_json(cls, document: Mapping[str, Any], source: str) -> Statement:
        effect = document.get("Effect")
        if effect not in {"Allow", "Deny"}:
            raise ValueError(f"{source}: statement has no Effect Allow/Deny: {dict(document)}")
        if ("Action" in document) == ("NotAction" in document):
            raise ValueError(f"{source}: a statement needs exactly one of Action/NotAction: {dict(document)}")
        if ("Resource" in document) == ("NotResource" in document):
            raise ValueError(f"{source}: a statement needs exactly one of Resource/NotResource: {dict(document)}")
        for key, value in {**dict(document.get("Condition") or {})}.items():
            if not isinstance(value, Mapping):
                raise ValueError(f"{source}: condition {key} is not an object")
        return cls(
            effect=str(effect),
            actions=_strings(document.get("Action"), source),
            not_actions=_strings(document.get("NotAction"), source),
            resources=_strings(document.get("Resource"), source),
            not_resources=_strings(document.get("NotResource"), source),
            conditions={k: dict(v) for k, v in dict(document.get("Condition") or {}).items()},
            sid=str(document.get("Sid", "")),
            source=source,
        )

    @property
    def label(self) -> str:
        return f"{self.source}/{self.sid}" if self.sid else f"{self.source} (statement without Sid)"


def statements_of(document: Mapping[str, Any], source: str) -> list[Statement]:
    """The statements of a resolved policy document (no intrinsics left)."""
    raw = document.get("Statement", [])
    items = [raw] if isinstance(raw, Mapping) else list(raw)
    return [Statement.from_json(item, source) for item in items]


def _strings(value: Any, source: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"{source}: unresolved value in a policy (resolve intrinsics first): {item!r}")
    return tuple(items)


# ---------------------------------------------------------------------------------------------------------------
# Matching


@lru_cache(maxsize=4096)
def _glob(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(regex, re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def glob_match(pattern: str, value: str, *, ignore_case: bool = False) -> bool:
    return _glob(pattern, ignore_case).fullmatch(value) is not None


def action_matches(pattern: str, action: str) -> bool:
    """``s3:Get*`` matches ``s3:GetObject``; action names are case-insensitive."""
    return glob_match(pattern, action, ignore_case=True)


def arn_matches(pattern: str, arn: str) -> bool:
    """IAM ARN matching: ``*`` alone matches everything; otherwise segment by segment (the resource is one)."""
    if pattern == "*":
        return True
    pattern_parts = pattern.split(":", 5)
    arn_parts = arn.split(":", 5)
    if len(pattern_parts) != 6 or len(arn_parts) != 6:
        return glob_match(pattern, arn)
    return all(glob_match(p, a) for p, a in zip(pattern_parts, arn_parts, strict=True))


_VARIABLE = re.compile(r"\$\{([^}]+)\}")
_ESCAPES = {"*": "*", "?": "?", "$": "$"}


def _expand(pattern: str, context: Mapping[str, Any]) -> tuple[str | None, set[str]]:
    """Replace policy variables (``${aws:username}``); None and the keys when a variable is not known."""
    missing: set[str] = set()

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in _ESCAPES:
            return _ESCAPES[name]
        key, _, default = name.partition(",")
        value = context.get(key.strip().lower())
        if value is None or value is ABSENT:
            if default:
                return default.strip().strip("'")
            missing.add(key.strip())
            return ""
        return str(value)

    expanded = _VARIABLE.sub(replace, pattern)
    return (None, missing) if missing else (expanded, missing)


# ---------------------------------------------------------------------------------------------------------------
# Conditions

_NEGATED = {
    "StringNotEquals",
    "StringNotEqualsIgnoreCase",
    "StringNotLike",
    "ArnNotEquals",
    "ArnNotLike",
    "NumericNotEquals",
    "DateNotEquals",
    "NotIpAddress",
}
_POSITIVE_OF = {
    "StringNotEquals": "StringEquals",
    "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
    "StringNotLike": "StringLike",
    "ArnNotEquals": "ArnEquals",
    "ArnNotLike": "ArnLike",
    "NumericNotEquals": "NumericEquals",
    "DateNotEquals": "DateEquals",
    "NotIpAddress": "IpAddress",
}
_NUMERIC = {
    "NumericEquals": lambda a, b: a == b,
    "NumericLessThan": lambda a, b: a < b,
    "NumericLessThanEquals": lambda a, b: a <= b,
    "NumericGreaterThan": lambda a, b: a > b,
    "NumericGreaterThanEquals": lambda a, b: a >= b,
}
_DATE = {
    "DateEquals": lambda a, b: a == b,
    "DateLessThan": lambda a, b: a < b,
    "DateLessThanEquals": lambda a, b: a <= b,
    "DateGreaterThan": lambda a, b: a > b,
    "DateGreaterThanEquals": lambda a, b: a >= b,
}
OPERATORS = frozenset(
    {"StringEquals", "StringEqualsIgnoreCase", "StringLike", "ArnEquals", "ArnLike", "Bool", "IpAddress", "Null"}
    | set(_NEGATED)
    | set(_NUMERIC)
    | set(_DATE)
)


def _date(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    text = str(value)
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text not in {"true", "false"}:
        raise ValueError(f"not a boolean condition value: {value!r}")
    return text == "true"


def _compare(compare: Any, convert: Any, context_value: Any, policy_value: Any) -> bool:
    return bool(compare(convert(context_value), convert(policy_value)))


_MATCHERS: dict[str, Any] = {
    "StringEquals": lambda c, p: str(c) == str(p),
    "StringEqualsIgnoreCase": lambda c, p: str(c).lower() == str(p).lower(),
    "StringLike": lambda c, p: glob_match(str(p), str(c)),
    "ArnEquals": lambda c, p: arn_matches(str(p), str(c)),
    "ArnLike": lambda c, p: arn_matches(str(p), str(c)),
    "Bool": lambda c, p: _bool(c) == _bool(p),
    "IpAddress": lambda c, p: ipaddress.ip_address(str(c)) in ipaddress.ip_network(str(p), strict=False),
    **{name: partial(_compare, compare, float) for name, compare in _NUMERIC.items()},
    **{name: partial(_compare, compare, _date) for name, compare in _DATE.items()},
}


def _one(operator: str, context_value: Any, policy_value: Any) -> bool:
    """Does one context value satisfy ``operator`` against one policy value (positive operators only)?"""
    if operator not in _MATCHERS:
        raise ValueError(f"unsupported condition operator {operator}")
    return bool(_MATCHERS[operator](context_value, policy_value))


def _parse_operator(operator_name: str) -> tuple[str, str, bool]:
    """(set operator or "", base operator, IfExists) of e.g. ``ForAnyValue:StringLikeIfExists``."""
    set_operator, _, name = operator_name.rpartition(":")
    if set_operator not in {"", "ForAnyValue", "ForAllValues"}:
        raise ValueError(f"unsupported condition set operator {set_operator}")
    if_exists = name.endswith("IfExists")
    name = name.removesuffix("IfExists")
    if name not in OPERATORS:
        raise ValueError(f"unsupported condition operator {operator_name}")
    return set_operator, name, if_exists


def _missing_key_result(set_operator: str, name: str, if_exists: bool) -> bool:
    if set_operator:
        return set_operator == "ForAllValues"  # ForAllValues: true on a missing key, ForAnyValue: false
    return if_exists or name in _NEGATED


def _key_result(operator_name: str, key: str, values: Any, context: Mapping[str, Any]) -> bool | None:
    """True/False, or None when the request does not state ``key``."""
    set_operator, name, if_exists = _parse_operator(operator_name)
    policy_values = values if isinstance(values, list) else [values]
    lookup = context.get(key.lower())
    if lookup is None:
        return None  # unknowable here
    present = lookup is not ABSENT and lookup != []
    if name == "Null":
        (wanted,) = policy_values
        return _bool(wanted) == (not present)
    if not present:
        return _missing_key_result(set_operator, name, if_exists)
    positive = _POSITIVE_OF.get(name, name)

    def satisfied(value: Any) -> bool:
        matched = any(_one(positive, value, p) for p in policy_values)
        return not matched if name in _NEGATED else matched

    if set_operator:
        items = lookup if isinstance(lookup, list) else [lookup]
        return all(map(satisfied, items)) if set_operator == "ForAllValues" else any(map(satisfied, items))
    if isinstance(lookup, list):
        raise ValueError(f"condition key {key} is multi-valued; the policy must use ForAnyValue/ForAllValues")
    return satisfied(lookup)


def conditions_hold(conditions: Mapping[str, Mapping[str, Any]], context: Mapping[str, Any]) -> tuple[bool, set[str]]:
    """(False, ∅) when some condition fails; (True, ∅) when all hold; (True, keys) when all known ones hold and
    ``keys`` are not stated by the request."""
    unknown: set[str] = set()
    for operator, keys in conditions.items():
        for key, values in keys.items():
            result = _key_result(operator, key, values, context)
            if result is False:
                return False, set()
            if result is None:
                unknown.add(key)
    return True, unknown


# ---------------------------------------------------------------------------------------------------------------
# Evaluation


class Outcome(Enum):
    ALLOWED = "allowed"
    DENIED = "denied"
    UNVERIFIED = "unverified"


@dataclass(frozen=True)
class Decision:
    request: IamRequest
    outcome: Outcome
    reason: str
    allowed_by: tuple[Statement, ...] = ()
    denied_by: tuple[Statement, ...] = ()
    unverified_keys: frozenset[str] = frozenset()

    @property
    def allowed(self) -> bool:
        return self.outcome is Outcome.ALLOWED


@dataclass(frozen=True)
class _Match:
    statement: Statement
    unknown: frozenset[str]


def _statement_applies(statement: Statement, request: IamRequest, context: Mapping[str, Any]) -> _Match | None:
    if statement.actions:
        if not any(action_matches(a, request.action) for a in statement.actions):
            return None
    elif any(action_matches(a, request.action) for a in statement.not_actions):
        return None
    unknown: set[str] = set()

    def resource_hit(patterns: Iterable[str]) -> bool:
        for pattern in patterns:
            expanded, missing = _expand(pattern, context)
            if expanded is None:
                unknown.update(missing)
            elif arn_matches(expanded, request.resource):
                return True
        return False

    if statement.resources:
        if not resource_hit(statement.resources) and not unknown:
            return None
    elif resource_hit(statement.not_resources):
        return None
    holds, unknown_keys = conditions_hold(statement.conditions, context)
    if not holds:
        return None
    return _Match(statement, frozenset(unknown | unknown_keys))


def evaluate(
    statements: Sequence[Statement],
    request: IamRequest,
    *,
    context: Mapping[str, Any] | None = None,
    accept_unverified: Iterable[str] = (),
) -> Decision:
    """Decide ``request`` against identity-policy ``statements``.

    ``context`` adds condition keys to the request's own (the request's win). A key in ``accept_unverified`` that
    the request does not state is taken to be as the policy intends: its Allow conditions hold and its Deny
    conditions do not.
    """
    merged = {k.lower(): v for k, v in (context or {}).items()}
    merged.update({k.lower(): v for k, v in request.context.items()})
    accepted = {k.lower() for k in accept_unverified}
    definite_allow: list[Statement] = []
    possible_allow: list[_Match] = []
    definite_deny: list[Statement] = []
    possible_deny: list[_Match] = []
    for statement in statements:
        match = _statement_applies(statement, request, merged)
        if match is None:
            continue
        open_keys = frozenset(k for k in match.unknown if k.lower() not in accepted)
        deny = statement.effect == "Deny"
        if deny and match.unknown and not open_keys:
            continue  # accepted: the deny's conditions do not trigger
        if not open_keys:
            (definite_deny if deny else definite_allow).append(statement)
        else:
            (possible_deny if deny else possible_allow).append(_Match(statement, open_keys))
    if definite_deny:
        labels = ", ".join(s.label for s in definite_deny)
        return Decision(request, Outcome.DENIED, f"explicitly denied by {labels}", denied_by=tuple(definite_deny))
    if possible_deny:
        keys = frozenset().union(*(m.unknown for m in possible_deny))
        labels = ", ".join(f"{m.statement.label} (on {', '.join(sorted(m.unknown))})" for m in possible_deny)
        return Decision(
            request,
            Outcome.UNVERIFIED,
            f"may be denied by {labels}: the request does not state {', '.join(sorted(keys))}",
            allowed_by=tuple(definite_allow),
            denied_by=tuple(m.statement for m in possible_deny),
            unverified_keys=keys,
        )
    if definite_allow:
        return Decision(
            request, Outcome.ALLOWED, "allowed by " + ", ".join(s.label for s in definite_allow), tuple(definite_allow)
        )
    if possible_allow:
        keys = frozenset().union(*(m.unknown for m in possible_allow))
        labels = ", ".join(f"{m.statement.label} (if {', '.join(sorted(m.unknown))})" for m in possible_allow)
        return Decision(
            request,
            Outcome.UNVERIFIED,
            f"allowed only under conditions the request does not state: {labels}; pass accept_unverified "
            f"for {', '.join(sorted(keys))} with a reason, or state the keys in the call's context",
            allowed_by=tuple(m.statement for m in possible_allow),
            unverified_keys=keys,
        )
    return Decision(request, Outcome.DENIED, "implicitly denied: no statement allows it")
