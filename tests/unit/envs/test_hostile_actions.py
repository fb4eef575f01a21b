"""Every built-in environment turns any action into an observation, never an exception (issue 23 §9).

Hostile strings from hypothesis — lone surrogates, NUL bytes, control characters, huge and deeply nested
text, tool calls whose arguments decode to lone surrogates, answers and code blocks made of the same — are
played as whole episodes against wordle, ask_to_code and sop_support: each step returns a text observation
that is valid Unicode (it can be encoded as UTF-8, so a transcript can always be published), the episode
scores with a finite reward, and ``close()`` works. Non-string actions (the driver coerces them; an
environment must survive them anyway) are observations too. The two crashes of the issue are pinned first.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtrl.contracts.environment import close_environment
from mtrl.envs import load_spec
from mtrl.sandbox import Limits

ENVIRONMENTS = ("wordle", "ask_to_code", "sop_support")
REPO_ROOT = Path(__file__).resolve().parents[3]
FAST = Limits(timeout_s=3.0, cpu_s=2, memory_mb=256, max_processes=8)


def first_task(env_id: str) -> dict[str, Any]:
    line = (REPO_ROOT / "environments" / env_id / "sample" / "train.jsonl").read_text(encoding="utf-8").splitlines()[0]
    metadata: dict[str, Any] = json.loads(line)["metadata"]
    return metadata


TASKS = {env_id: first_task(env_id) for env_id in ENVIRONMENTS}


def make(env_id: str) -> Any:
    kwargs = {"limits": FAST} if env_id == "ask_to_code" else {}
    return load_spec(env_id).make(**kwargs)


def play(env_id: str, actions: list[Any]) -> None:
    env = make(env_id)
    try:
        first = env.reset(TASKS[env_id])
        assert isinstance(first, str)
        for action in actions:
            step = env.step(action)
            assert isinstance(step.observation, str)
            step.observation.encode("utf-8")  # valid Unicode: no lone surrogate echoed back
            assert isinstance(step.done, bool)
        result = env.result()
        assert math.isfinite(result.reward)
        assert all(math.isfinite(value) for value in result.components.values())
    finally:
        close_environment(env)


# Text with everything hypothesis can draw, surrogates included (its default leaves them out).
any_text = st.text(st.characters(exclude_categories=()), max_size=200)
surrogate = st.integers(0xD800, 0xDFFF).map(chr)
hostile_value: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | any_text | surrogate,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner, max_size=3),
    max_leaves=6,
)


def _tool_parameters() -> dict[str, list[str]]:
    """sop_support's tools and their parameters, so calls reach the tool functions (not only their checks)."""
    env = make("sop_support")
    env.reset(TASKS["sop_support"])
    tools = {tool.name: list(tool.parameters) for tool in env.desk.toolbox.tools}
    close_environment(env)
    return {**tools, "nope": ["x"]}


TOOLS = _tool_parameters()
# Real ids of the ticket's orders and customers, alone or with a surrogate or other junk around them.
known = st.sampled_from(["O5005", "C1001", "emil.pike@example.com", "1.00", "DEFECTIVE", "HIGH_VALUE"])
argument = hostile_value | known | st.tuples(known, any_text | surrogate).map("".join)


@st.composite
def tool_call(draw: st.DrawFn) -> str:
    """A call of a real tool with every parameter it takes (so it reaches the function), or a broken one."""
    name = draw(st.sampled_from(sorted(TOOLS)))
    arguments = {parameter: draw(argument) for parameter in TOOLS[name]}
    if draw(st.booleans()):
        arguments.update(draw(st.dictionaries(any_text, hostile_value, max_size=1)))
    raw = draw(st.none() | any_text)
    # ensure_ascii: a surrogate travels as a \ud800 escape, which the tool-call parser decodes back to one.
    body = raw if raw is not None else json.dumps({"name": name, "arguments": arguments}, ensure_ascii=True)
    return f"<tool_call>{body}</tool_call>"


answer = st.builds(lambda body: f"<final_output>{body}</final_output>", any_text | hostile_value.map(json.dumps))
code = st.builds(lambda body: f"```python\n{body}\n```", any_text)
wordle_guess = st.text(st.sampled_from("abcdeSTARE \ud800\x00'\"`*.!"), max_size=12)
hostile_action = any_text | tool_call() | answer | code | wordle_guess | st.just("?" * 10_000) | st.just("[" * 5000)
non_string = st.none() | st.integers() | st.binary(max_size=20) | st.lists(any_text, max_size=2) | st.just({"a": 1})


@pytest.mark.parametrize("env_id", ENVIRONMENTS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=st.lists(hostile_action | non_string, min_size=1, max_size=6))
def test_any_action_is_an_observation(env_id: str, actions: list[Any]) -> None:
    play(env_id, actions)


@settings(max_examples=150, deadline=None)
@given(calls=st.lists(tool_call(), min_size=1, max_size=4))
def test_any_tool_call_is_an_observation(calls: list[str]) -> None:
    """sop_support's tools taken one call after another with hostile arguments (found §9's surrogate crash)."""
    play("sop_support", calls)


def test_issue_refund_with_a_lone_surrogate_in_the_order_id_is_refused() -> None:
    env = make("sop_support")
    env.reset(TASKS["sop_support"])
    for order_id in ("O5005\ud800", "\udfff"):
        arguments = {"order_id": order_id, "amount": "1.00", "reason_code": "DEFECTIVE"}
        action = "<tool_call>" + json.dumps({"name": "issue_refund", "arguments": arguments}) + "</tool_call>"
        step = env.step(action)
        assert "error" in step.observation
        step.observation.encode("utf-8")
    assert env.records() == ()  # nothing was written
    close_environment(env)


@pytest.mark.parametrize("env_id", ENVIRONMENTS)
@pytest.mark.parametrize("action", [None, 42, b"crane", ["crane"], {"guess": "crane"}])
def test_a_non_string_action_is_an_observation(env_id: str, action: Any) -> None:
    play(env_id, [action, "crane"])


def test_wordle_step_none_is_an_invalid_guess() -> None:
    env = make("wordle")
    env.reset(TASKS["wordle"])
    step = env.step(None)
    assert "Invalid guess" in step.observation
    assert not step.done
    assert env.invalid_actions == 1
