"""Record–replay tools: the call syntax, normalised fixture keys, the dispatcher, the recorder — and hostile input.

Properties (hypothesis): nothing a policy writes makes the parser, a replay tool or the toolbox raise; the
same calls always get the same observations; a key is invariant under the documented normalisation and
nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtrl.envs.normalise import canonical_key, normalise
from mtrl.envs.tools import (
    CALL_CLOSE,
    CALL_OPEN,
    NOT_FOUND,
    FixtureConflictError,
    FixtureError,
    FixtureRecorder,
    FunctionTool,
    ReplayTool,
    ToolBox,
    ToolCall,
    ToolCallError,
    ToolError,
    format_tool_call,
    parse_tool_call,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
finite_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def customers() -> ReplayTool:
    return ReplayTool.from_records(
        [
            ({"email": "ana@example.com"}, {"customer_id": "C-007", "name": "Ana Silva"}),
            ({"email": "bo@example.com"}, {"customer_id": "C-012", "name": "Bo Chen"}),
        ],
        name="lookup_customer",
        description="Find a customer by email.",
        parameters={"email": "the customer's email"},
        not_found='{"error": "no customer with that email"}',
    )


# --- the call syntax -------------------------------------------------------------------------------------------


def test_a_hermes_call_parses_with_text_around_it() -> None:
    action = 'Let me look.\n<tool_call>\n{"name": "lookup_customer", "arguments": {"email": "a@b.c"}}\n</tool_call>'
    assert parse_tool_call(action) == ToolCall("lookup_customer", {"email": "a@b.c"})


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ('<tool_call>{"name": "t", "arguments": "{\\"q\\": 1}"}</tool_call>', ToolCall("t", {"q": 1})),  # OpenAI
        ('<tool_call>{"name": "t"}</tool_call>', ToolCall("t", {})),
        ('<tool_call>{"name": " t ", "arguments": null}</tool_call>', ToolCall("t", {})),
        ('<tool_call>```json\n{"name": "t", "arguments": {}}\n```</tool_call>', ToolCall("t", {})),
    ],
)
def test_accepted_variants(action: str, expected: ToolCall) -> None:
    assert parse_tool_call(action) == expected


@pytest.mark.parametrize("action", ["", "plain words", "<final_output>{}</final_output>", "tool_call: t", "<tool_call"])
def test_an_action_without_a_call_is_none(action: str) -> None:
    assert parse_tool_call(action) is None


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ('<tool_call>{"name": "t"}', "unclosed"),
        ('<tool_call>{"name": "t"}</tool_call><tool_call>{"name": "t"}</tool_call>', "one tool call per turn"),
        ("<tool_call>{name: t}</tool_call>", "not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", "must be a JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', '"name"'),
        ('<tool_call>{"name": ""}</tool_call>', '"name"'),
        ('<tool_call>{"name": 3}</tool_call>', '"name"'),
        ('<tool_call>{"name": "t", "arguments": [1]}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "t", "arguments": "not json"}</tool_call>', "not a JSON object"),
        ('<tool_call>{"name": "t", "arguments": {"x": NaN}}</tool_call>', "not valid JSON"),
        ("<tool_call>" + "[" * 100000 + "</tool_call>", "longer than"),
        ("<tool_call>" + "[" * 5000 + "]" * 5000 + "</tool_call>", "nested too deeply"),
    ],
)
def test_a_malformed_call_is_a_clear_error(action: str, message: str) -> None:
    parsed = parse_tool_call(action)
    assert isinstance(parsed, ToolCallError)
    assert message in parsed.message


@given(st.text())
def test_the_parser_never_raises_on_any_text(text: str) -> None:
    assert parse_tool_call(text) is None or isinstance(parse_tool_call(text), ToolCall | ToolCallError)


@given(st.text(), st.text(), st.text())
def test_the_parser_never_raises_on_any_body(before: str, body: str, after: str) -> None:
    parsed = parse_tool_call(before + CALL_OPEN + body + CALL_CLOSE + after)
    assert isinstance(parsed, ToolCall | ToolCallError)


@given(st.text(min_size=1, max_size=30).filter(str.strip), st.dictionaries(st.text(max_size=10), finite_json))
def test_format_and_parse_round_trip(name: str, arguments: dict[str, Any]) -> None:
    if CALL_CLOSE in json.dumps(arguments, ensure_ascii=False) or CALL_OPEN in name + json.dumps(arguments):
        return  # the delimiters inside a value cannot round-trip (documented: the first </tool_call> ends the call)
    parsed = parse_tool_call(format_tool_call(name, arguments))
    assert isinstance(parsed, ToolCall)
    assert parsed.name == name.strip()
    assert json.dumps(parsed.arguments, sort_keys=True) == json.dumps(arguments, sort_keys=True)


# --- normalisation and keys -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ({"email": "  Ana@Example.COM "}, {"email": "ana@example.com"}),
        ({"name": "Ana   Silva"}, {"name": "ana silva"}),
        ({"amount": "12.50"}, {"amount": 12.5}),
        ({"amount": 12.0}, {"amount": "12"}),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
        ({"qty": "1e2"}, {"qty": 100}),
        ({"Key ": "x"}, {"key": "x"}),
    ],
)
def test_keys_equal_under_the_documented_normalisation(left: dict[str, Any], right: dict[str, Any]) -> None:
    assert canonical_key(left) == canonical_key(right)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ({"id": "007"}, {"id": "7"}),  # identifiers keep their leading zeros
        ({"flag": True}, {"flag": 1}),  # booleans are not numbers
        ({"id": "a b"}, {"id": "ab"}),
        ({"x": None}, {"x": "none"}),
        ({"x": [1, 2]}, {"x": [2, 1]}),  # list order is kept
        ({"n": "1e999999999"}, {"n": "1e999999998"}),  # a huge exponent stays text (no billion-digit int)
    ],
)
def test_keys_differ_otherwise(left: dict[str, Any], right: dict[str, Any]) -> None:
    assert canonical_key(left) != canonical_key(right)


@given(json_values)
def test_normalisation_never_raises_and_is_idempotent(value: Any) -> None:
    once = normalise(value)
    assert canonical_key(once) == canonical_key(value)


def test_a_non_finite_argument_cannot_be_formatted() -> None:
    with pytest.raises(ValueError, match="JSON"):
        format_tool_call("t", {"x": float("nan")})


def test_hostile_values_normalise() -> None:
    deep: Any = []
    for _ in range(500):
        deep = [deep]
    assert canonical_key(deep).count("too deep") == 1
    assert canonical_key(10**10000).startswith('"0x')  # beyond Python's 4300-digit str() limit
    assert canonical_key(float("nan")) == "NaN"
    assert canonical_key(object()).startswith('"<object object')


# --- replay tools ---------------------------------------------------------------------------------------------


def test_replay_answers_recorded_inputs_and_not_found_for_others() -> None:
    tool = customers()
    assert json.loads(tool.call({"email": " ANA@example.com"})) == {"customer_id": "C-007", "name": "Ana Silva"}
    assert tool.call({"email": "nobody@example.com"}) == '{"error": "no customer with that email"}'
    assert json.loads(tool.call({}))["error"] == "missing argument 'email'"
    assert "unknown argument 'phone'" in json.loads(tool.call({"email": "ana@example.com", "phone": "1"}))["error"]
    assert json.loads(tool.call("email"))["error"] == "arguments must be an object"  # type: ignore[arg-type]


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.text(max_size=10), json_values) | json_values)
def test_a_replay_tool_never_raises(arguments: Any) -> None:
    tool = customers()
    assert isinstance(tool.call(arguments), str)  # type: ignore[arg-type]


def test_csv_and_jsonl_fixtures(tmp_path: Path) -> None:
    csv_path = tmp_path / "orders.csv"
    csv_path.write_text(
        "customer_id,order_id,total\nC-007,O-1,12.50\nC-007,O-2,3.00\nC-012,O-3,8.00\n", encoding="utf-8"
    )
    history = ReplayTool.from_csv(
        csv_path, name="get_order_history", description="Orders.", parameters={"customer_id": "id"}, many=True
    )
    assert json.loads(history.call({"customer_id": "c-007"})) == [
        {"order_id": "O-1", "total": "12.50"},
        {"order_id": "O-2", "total": "3.00"},
    ]
    single = ReplayTool.from_csv(
        csv_path, name="order", description="One order.", parameters={"order_id": "id"}, response_columns=["total"]
    )
    assert json.loads(single.call({"order_id": "o-3"})) == {"total": "8.00"}
    assert single.call({"order_id": "O-9"}) == NOT_FOUND
    jsonl = tmp_path / "tools.jsonl"
    jsonl.write_text(
        '{"tool": "policy", "arguments": {"category": "Boots"}, "response": "30 days"}\n'
        '{"tool": "other", "arguments": {"x": 1}, "response": "skipped"}\n'
        '\n{"arguments": {"category": "tents"}, "response": {"days": 14}}\n',
        encoding="utf-8",
    )
    policy = ReplayTool.from_jsonl(jsonl, name="policy", description="Return policy.", parameters={"category": "c"})
    assert policy.call({"category": "boots"}) == "30 days"
    assert policy.call({"category": "TENTS"}) == '{"days": 14}'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json\n", "not a JSON line"),
        ('{"arguments": {"q": "a"}}\n', "without a response"),
        ('{"arguments": [1], "response": 1}\n', "a record is"),
        ('{"arguments": {}, "response": 1}\n', "missing argument 'q'"),
        ('{"arguments": {"q": "A"}, "response": 1}\n{"arguments": {"q": "a "}, "response": 2}\n', "different response"),
        ('{"arguments": {"q": NaN}, "response": 1}\n', "not a JSON line"),
    ],
)
def test_a_bad_jsonl_fixture_is_a_fixture_error_with_its_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "f.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(FixtureError, match=message):
        ReplayTool.from_jsonl(path, name="t", description="", parameters={"q": ""})


def test_a_repeated_identical_record_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    path.write_text('{"arguments": {"q": "A"}, "response": 1}\n{"arguments": {"q": "a"}, "response": 1}\n')
    assert ReplayTool.from_jsonl(path, name="t", description="", parameters={"q": ""}).call({"q": "a"}) == "1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("q,r\na,1\nA,2\n", "different response"),
        ("x,r\na,1\n", "missing column 'q'"),
        ("q,r\na,1,extra\n", "one cell per column"),
        ("q,r\na\n", "one cell per column"),
    ],
)
def test_a_bad_csv_fixture_is_a_fixture_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "f.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(FixtureError, match=message):
        ReplayTool.from_csv(path, name="t", description="", parameters={"q": ""})


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
@given(st.binary(max_size=200))
def test_hostile_fixture_files_raise_only_fixture_errors(tmp_path: Path, content: bytes) -> None:
    for suffix in ("csv", "jsonl"):
        path = tmp_path / f"f.{suffix}"
        path.write_bytes(content)
        try:
            if suffix == "csv":
                ReplayTool.from_csv(path, name="t", description="", parameters={"q": ""})
            else:
                ReplayTool.from_jsonl(path, name="t", description="", parameters={"q": ""})
        except FixtureError:
            pass


def test_a_missing_fixture_file_is_a_fixture_error(tmp_path: Path) -> None:
    with pytest.raises(FixtureError, match="cannot read"):
        ReplayTool.from_jsonl(tmp_path / "none.jsonl", name="t", description="", parameters={})
    with pytest.raises(FixtureError, match="cannot read"):
        ReplayTool.from_csv(tmp_path / "none.csv", name="t", description="", parameters={})


# --- the toolbox ------------------------------------------------------------------------------------------------


def desk() -> ToolBox:
    notes: list[str] = []

    def add_note(arguments: dict[str, Any]) -> dict[str, Any]:
        if not str(arguments["text"]).strip():
            raise ToolError("text must not be empty")
        notes.append(str(arguments["text"]))
        return {"note": len(notes)}

    return ToolBox([customers(), FunctionTool("add_note", "Add a note.", {"text": "the note"}, add_note)])


def test_the_toolbox_dispatches_counts_and_wraps_responses() -> None:
    box = desk()
    assert box.handle("no call here") is None
    found = box.handle(format_tool_call("lookup_customer", {"email": "bo@example.com"}))
    assert found is not None
    assert found.error == ""
    assert found.observation.startswith("<tool_response>\n")
    assert found.observation.endswith("\n</tool_response>")
    assert '"C-012"' in found.observation
    missing = box.handle(format_tool_call("lookup_customer", {"email": "x@example.com"}))
    assert missing is not None
    assert missing.error == ""  # "not found" is an answer, not a refusal
    refused = box.handle(format_tool_call("add_note", {"text": " "}))
    assert refused is not None
    assert "text must not be empty" in refused.observation
    unknown = box.handle(format_tool_call("delete_everything", {}))
    assert unknown is not None
    assert "unknown tool" in unknown.error
    malformed = box.handle("<tool_call>{</tool_call>")
    assert malformed is not None
    assert malformed.call is None
    assert (box.calls, box.refused) == (5, 2)
    assert box.calls_by_tool == {"lookup_customer": 2, "add_note": 1}


def test_the_description_lists_every_tool_as_a_schema() -> None:
    box = desk()
    text = box.describe()
    schemas = [json.loads(line) for line in text.splitlines() if line.startswith('{"type"')]
    assert [schema["function"]["name"] for schema in schemas] == ["lookup_customer", "add_note"]
    assert schemas[0]["function"]["parameters"]["required"] == ["email"]
    assert CALL_OPEN in text
    assert CALL_CLOSE in text


def test_tool_names_must_be_unique() -> None:
    with pytest.raises(ValueError, match="unique"):
        ToolBox([customers(), customers()])


def test_a_tool_bug_propagates_instead_of_passing_for_an_agent_error() -> None:
    def broken(arguments: dict[str, Any]) -> str:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        ToolBox([FunctionTool("broken", "", {}, broken)]).handle(format_tool_call("broken", {}))


calls = st.builds(
    format_tool_call,
    st.sampled_from(["lookup_customer", "add_note", "x"]),
    st.dictionaries(st.sampled_from(["email", "text", "other"]), finite_json, max_size=2),
)


@given(st.lists(st.text(max_size=80) | calls, max_size=6))
def test_same_actions_same_observations_and_never_an_exception(actions: list[str]) -> None:
    first, second = desk(), desk()
    for action in actions:
        a, b = first.handle(action), second.handle(action)
        assert (a.observation if a else None) == (b.observation if b else None)


# --- the recorder -----------------------------------------------------------------------------------------------


def test_the_recorder_writes_replayable_fixtures_and_refuses_a_conflict(tmp_path: Path) -> None:
    path = tmp_path / "fixtures" / "weather.jsonl"
    live = {"paris": {"temp_c": 18}, "oslo": {"temp_c": 4}}
    recorder = FixtureRecorder(path, tool="weather", parameters=["city"])
    weather = recorder.wrap(lambda arguments: live[str(arguments["city"]).strip().casefold()])
    assert weather({"city": "Paris"}) == {"temp_c": 18}
    weather({"city": " paris "})  # same normalised input, same response: not written again
    weather({"city": "Oslo"})
    assert len(path.read_text().splitlines()) == 2
    replay = ReplayTool.from_jsonl(path, name="weather", description="", parameters={"city": ""})
    assert json.loads(replay.call({"city": "OSLO"})) == {"temp_c": 4}
    before = path.read_bytes()
    live["paris"] = {"temp_c": 25}  # the live system changed: the fixture must not silently follow
    with pytest.raises(FixtureConflictError, match="different response"):
        weather({"city": "paris"})
    assert path.read_bytes() == before
    again = FixtureRecorder(path, tool="weather", parameters=["city"])  # a new session reads what is there
    with pytest.raises(FixtureConflictError):
        again.record({"city": "PARIS"}, {"temp_c": 25})
    assert again.record({"city": "PARIS"}, {"temp_c": 18}) is False
    assert again.record({"city": "rome"}, "sunny") is True


@pytest.mark.parametrize("response", [object(), {"temp": float("nan")}, {1, 2}])
def test_the_recorder_refuses_a_response_that_is_not_json_and_writes_nothing(tmp_path: Path, response: Any) -> None:
    path = tmp_path / "f.jsonl"
    recorder = FixtureRecorder(path, tool="t", parameters=["q"])
    with pytest.raises(FixtureError, match="not JSON"):
        recorder.record({"q": "a"}, response)
    assert not path.exists()
    assert recorder.record({"q": "a"}, "fine") is True  # nothing was remembered from the refused record
