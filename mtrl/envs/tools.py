"""Tools for environments: the tool-call syntax, record–replay read-only tools, a dispatcher and a recorder.

The SageMaker AI multi-turn RL best-practices post: read-only tools replay recorded responses keyed by their input, so
the same trajectory always gets the same observations and the same reward, and no live system is touched by thousands of
rollouts.

**Call syntax** (the Hermes / Qwen convention most chat models were trained on)::

    <tool_call>{"name": "lookup_customer", "arguments": {"email": "ana@example.com"}}</tool_call>

``parse_tool_call(action)`` returns a ``ToolCall``, ``None`` when the action holds no ``<tool_call>`` (it is
then a message or a final answer), or a ``ToolCallError`` naming what is malformed. Rules: one call per
action (several are refused, so a policy cannot fan out calls in one turn); the body is one JSON object with
a non-empty string ``name`` and an optional ``arguments`` object (a JSON string holding an object is accepted
too: OpenAI-style models send that); text around the block is ignored; a body over 64 KiB is refused.

**Observations.** ``ToolBox.handle`` wraps every answer as ``<tool_response>…</tool_response>``. A tool
answers with its recorded response, with its documented ``not_found`` response for an input that was never
recorded, or — for a call it cannot take (unknown tool, missing or unknown argument, malformed call) — with
an error object ``{"error": "..."}``. None of these raise: whatever the policy writes is an observation.

**Fixtures.** JSONL: one object per line, ``{"tool"?: name, "arguments": {...}, "response": value}``
(lines of other tools are skipped, so one file can hold several tools); a non-string response is shown as
compact JSON with sorted keys. CSV: the tool's parameters are columns, the response is a JSON object of the
other columns (or of ``response_columns``); ``many=True`` collects every row of one input into a list (an
order history). Keys are ``normalise.canonical_key`` of the arguments: stripped, casefolded, canonical
numbers, key order ignored. Two different responses for one key are a ``FixtureError`` at load.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from mtrl.envs.normalise import canonical_key

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
RESPONSE_OPEN = "<tool_response>"
RESPONSE_CLOSE = "</tool_response>"
MAX_CALL_CHARS = 64 * 1024
NOT_FOUND = '{"error": "not found"}'


class FixtureError(ValueError):
    """A fixture file is unusable (the message names the file, the line and the problem)."""


class ToolError(Exception):
    """Raised by a tool function to refuse a call; the message becomes the ``{"error": ...}`` observation."""


@dataclass(frozen=True)
class ToolCall:
    """One parsed call: the tool's name and its arguments (a JSON object)."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ToolCallError:
    """An action that tried to call a tool but is malformed; ``message`` says what is wrong."""

    message: str


def _reject_constant(text: str) -> Any:
    raise ValueError(f"non-standard JSON constant {text}")


def _strip_fence(body: str) -> str:
    body = body.strip()
    if body.startswith("```") and body.endswith("```") and len(body) >= 6:
        body = body[3:-3]
        first, _, rest = body.partition("\n")
        body = rest if first.strip().isalpha() or not first.strip() else body
    return body.strip()


def parse_tool_call(action: str) -> ToolCall | ToolCallError | None:  # noqa: PLR0911 - one return per rule
    """The tool call in ``action``; ``None`` when it has none; a ``ToolCallError`` when it is malformed."""
    if not isinstance(action, str) or CALL_OPEN not in action:
        return None
    if action.count(CALL_OPEN) > 1:
        return ToolCallError("one tool call per turn: the action holds several <tool_call> blocks")
    start = action.index(CALL_OPEN) + len(CALL_OPEN)
    end = action.find(CALL_CLOSE, start)
    if end < 0:
        return ToolCallError("unclosed <tool_call>: end the call with </tool_call>")
    body = _strip_fence(action[start:end])
    if len(body) > MAX_CALL_CHARS:
        return ToolCallError(f"tool call longer than {MAX_CALL_CHARS} characters")
    try:
        document = json.loads(body, parse_constant=_reject_constant)
    except RecursionError:
        return ToolCallError("the tool call is nested too deeply")
    except ValueError as error:
        return ToolCallError(f"the tool call is not valid JSON ({str(error)[:80]})")
    if not isinstance(document, dict):
        return ToolCallError('the tool call must be a JSON object {"name": ..., "arguments": {...}}')
    name = document.get("name")
    if not isinstance(name, str) or not name.strip():
        return ToolCallError('the tool call needs a "name" (a non-empty string)')
    arguments = document.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments, parse_constant=_reject_constant) if arguments.strip() else {}
        except (ValueError, RecursionError):
            return ToolCallError('"arguments" is a string that is not a JSON object')
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return ToolCallError('"arguments" must be a JSON object')
    return ToolCall(name=name.strip(), arguments=arguments)


def format_tool_call(name: str, arguments: Mapping[str, Any]) -> str:
    """The action text calling ``name`` with ``arguments`` (for scripted actions and examples).

    ``ValueError`` for a non-finite number: the parser refuses NaN and Infinity (they are not JSON).
    """
    document = {"name": name, "arguments": dict(arguments)}
    return CALL_OPEN + json.dumps(document, ensure_ascii=False, allow_nan=False) + CALL_CLOSE


def tool_error(message: str) -> str:
    """The error observation of a refused call: ``{"error": message}``."""
    return json.dumps({"error": message}, ensure_ascii=False)


def response_text(response: Any) -> str:
    """A recorded response as the policy sees it: strings as they are, other JSON values as compact JSON."""
    if isinstance(response, str):
        return response
    return json.dumps(response, ensure_ascii=False, sort_keys=True, separators=(", ", ": "), default=str)


def argument_problem(parameters: Mapping[str, str], arguments: Any, optional: Iterable[str] = ()) -> str | None:
    """Why ``arguments`` do not fit ``parameters`` (every one required unless in ``optional``), else None."""
    if not isinstance(arguments, Mapping):
        return "arguments must be an object"
    unknown = sorted(str(name)[:40] for name in arguments if name not in parameters)
    if unknown:
        takes = ", ".join(parameters) or "no arguments"
        return f"unknown argument {', '.join(repr(n) for n in unknown)} (the tool takes: {takes})"
    skippable = set(optional)
    missing = [name for name in parameters if name not in arguments and name not in skippable]
    if missing:
        return f"missing argument {', '.join(repr(n) for n in missing)}"
    return None


def text_problem(value: Any) -> str | None:
    """Why ``value`` holds text no database, hash or wire format can take (a lone surrogate, which JSON's
    ``"\\ud800"`` escape decodes to), else None. A tool function only ever sees valid Unicode."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "arguments must be valid Unicode text (a lone surrogate is not)"
        elif isinstance(item, Mapping):
            pending += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            pending += item
    return None


@runtime_checkable
class Tool(Protocol):
    """What ``ToolBox`` dispatches to: a name, a description, documented parameters and ``call``."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> Mapping[str, str]: ...

    def call(self, arguments: Mapping[str, Any]) -> str:
        """The observation for one call; never raises for any ``arguments``."""
        ...


@dataclass(frozen=True)
class ReplayTool:
    """A read-only tool that answers from recorded fixtures, keyed by its normalised input.

    ``parameters`` maps each argument name to its description; all are required and together they form the
    key. ``responses`` maps ``canonical_key`` of the arguments to the response text. Unknown inputs get
    ``not_found`` (the real tool's documented answer), bad arguments an ``{"error": ...}`` observation.
    """

    name: str
    description: str
    parameters: Mapping[str, str]
    responses: Mapping[str, str]
    not_found: str = NOT_FOUND

    def key(self, arguments: Mapping[str, Any]) -> str:
        """The fixture key of ``arguments`` (only the tool's parameters count)."""
        return canonical_key({name: arguments.get(name) for name in self.parameters})

    def call(self, arguments: Mapping[str, Any]) -> str:
        problem = argument_problem(self.parameters, arguments)
        if problem:
            return tool_error(problem)
        return self.responses.get(self.key(arguments), self.not_found)

    @classmethod
    def from_records(
        cls,
        records: Iterable[tuple[Mapping[str, Any], Any]],
        *,
        name: str,
        description: str,
        parameters: Mapping[str, str],
        not_found: str = NOT_FOUND,
        source: str = "records",
    ) -> ReplayTool:
        """From ``(arguments, response)`` pairs; a key seen twice with different responses is a FixtureError."""
        responses: dict[str, str] = {}
        for index, (arguments, response) in enumerate(records, start=1):
            problem = argument_problem(parameters, arguments)
            if problem:
                raise FixtureError(f"{source}: record {index} of tool '{name}': {problem}")
            key = canonical_key({param: arguments[param] for param in parameters})
            text = response_text(response)
            if responses.get(key, text) != text:
                raise FixtureError(f"{source}: record {index} of tool '{name}': a different response for {key}")
            responses[key] = text
        return cls(name=name, description=description, parameters=dict(parameters), responses=responses,
                   not_found=not_found)  # fmt: skip

    @classmethod
    def from_jsonl(
        cls,
        path: str | os.PathLike[str],
        *,
        name: str,
        description: str,
        parameters: Mapping[str, str],
        not_found: str = NOT_FOUND,
    ) -> ReplayTool:
        """From a JSONL fixture (see the module docstring); records of other tools are skipped."""
        return cls.from_records(
            read_jsonl_records(path, tool=name),
            name=name,
            description=description,
            parameters=parameters,
            not_found=not_found,
            source=str(path),
        )

    @classmethod
    def from_csv(
        cls,
        path: str | os.PathLike[str],
        *,
        name: str,
        description: str,
        parameters: Mapping[str, str],
        response_columns: Sequence[str] | None = None,
        many: bool = False,
        not_found: str = NOT_FOUND,
    ) -> ReplayTool:
        """From a CSV fixture: parameter columns are the key, the other (or ``response_columns``) the response."""
        rows = read_csv_rows(path)
        header = list(rows[0]) if rows else []
        missing = [column for column in [*parameters, *(response_columns or [])] if column not in header]
        if rows and missing:
            raise FixtureError(f"{path}: missing column {', '.join(repr(c) for c in missing)} for tool '{name}'")
        columns = list(response_columns) if response_columns is not None else [c for c in header if c not in parameters]
        if not many:
            records = [({p: row[p] for p in parameters}, {c: row[c] for c in columns}) for row in rows]
            return cls.from_records(
                records, name=name, description=description, parameters=parameters, not_found=not_found,
                source=str(path),
            )  # fmt: skip
        grouped: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
        for row in rows:
            arguments = {p: row[p] for p in parameters}
            grouped.setdefault(canonical_key(arguments), (arguments, []))[1].append({c: row[c] for c in columns})
        return cls.from_records(
            grouped.values(), name=name, description=description, parameters=parameters, not_found=not_found,
            source=str(path),
        )  # fmt: skip


def read_jsonl_records(path: str | os.PathLike[str], *, tool: str | None = None) -> list[tuple[dict[str, Any], Any]]:
    """``(arguments, response)`` of every record of ``tool`` (every record when None) in a JSONL fixture."""
    records: list[tuple[dict[str, Any], Any]] = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise FixtureError(f"{path}: cannot read fixture ({error})") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            document = json.loads(line, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as error:
            raise FixtureError(f"{path}:{number}: not a JSON line ({str(error)[:80]})") from None
        if not isinstance(document, dict) or not isinstance(document.get("arguments"), dict):
            raise FixtureError(f'{path}:{number}: a record is {{"arguments": {{...}}, "response": ...}}')
        if "response" not in document:
            raise FixtureError(f"{path}:{number}: record without a response")
        if tool is not None and document.get("tool", tool) != tool:
            continue
        records.append((document["arguments"], document["response"]))
    return records


def read_csv_rows(path: str | os.PathLike[str]) -> list[dict[str, str]]:
    """The rows of a CSV fixture with a header line (every cell a string)."""
    try:
        with Path(path).open(encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle)
            rows = []
            for row in reader:
                if None in row or any(value is None for value in row.values()):
                    raise FixtureError(f"{path}:{reader.line_num}: the row does not have one cell per column")
                rows.append(dict(row))
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise FixtureError(f"{path}: cannot read fixture ({error})") from None
    return rows


@dataclass(frozen=True)
class FunctionTool:
    """A tool backed by a function of its arguments (for stateful tools: a closure over the episode state).

    The function gets the checked arguments and returns the response (a string or a JSON value); it raises
    ``ToolError`` to refuse a call (the message becomes an ``{"error": ...}`` observation). Any other
    exception is a bug in the environment and propagates (the driver closes the episode and reports it).
    """

    name: str
    description: str
    parameters: Mapping[str, str]
    function: Callable[[dict[str, Any]], Any]
    optional: tuple[str, ...] = ()

    def call(self, arguments: Mapping[str, Any]) -> str:
        problem = argument_problem(self.parameters, arguments, self.optional) or text_problem(arguments)
        if problem:
            return tool_error(problem)
        try:
            return response_text(self.function(dict(arguments)))
        except ToolError as refusal:
            return tool_error(str(refusal))


@dataclass(frozen=True)
class ToolOutcome:
    """What one tool-calling action produced: the observation, the call (None if malformed), the refusal."""

    observation: str
    call: ToolCall | None
    error: str = ""  # why the call was refused; "" for an answered call (a "not found" answer included)


@dataclass
class ToolBox:
    """Dispatches the policy's tool calls to named tools, describes them for the prompt and counts calls."""

    tools: Sequence[Tool]
    calls: int = 0
    refused: int = 0
    calls_by_tool: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [tool.name for tool in self.tools]
        if len(set(names)) != len(names):
            raise ValueError(f"tool names must be unique (got {names})")
        self._by_name = {tool.name: tool for tool in self.tools}

    def schemas(self) -> list[dict[str, Any]]:
        """OpenAI/Hermes function schemas of the tools."""
        return [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": {
                        "type": "object",
                        "properties": {name: {"description": text} for name, text in tool.parameters.items()},
                        "required": [name for name in tool.parameters if name not in getattr(tool, "optional", ())],
                    },
                },
            }
            for tool in self.tools
        ]

    def describe(self) -> str:
        """The prompt text: how to call a tool, then the ``<tools>`` block of schemas (one JSON per line)."""
        lines = [
            "You can call these tools. To call one, reply with exactly one block",
            f'{CALL_OPEN}{{"name": "<tool name>", "arguments": {{"<argument>": "<value>"}}}}{CALL_CLOSE}',
            f"and wait for the result, which comes back as {RESPONSE_OPEN}...{RESPONSE_CLOSE}.",
            "<tools>",
            *(json.dumps(schema, ensure_ascii=False) for schema in self.schemas()),
            "</tools>",
        ]
        return "\n".join(lines)

    def dispatch(self, call: ToolCall) -> ToolOutcome:
        """Run one parsed call; unknown tools and bad arguments are refused with an error observation."""
        self.calls += 1
        tool = self._by_name.get(call.name)
        if tool is None:
            self.refused += 1
            message = f"unknown tool {call.name[:60]!r} (tools: {', '.join(self._by_name)})"
            return ToolOutcome(observation=_wrap(tool_error(message)), call=call, error=message)
        self.calls_by_tool[tool.name] = self.calls_by_tool.get(tool.name, 0) + 1
        problem = argument_problem(tool.parameters, call.arguments, getattr(tool, "optional", ()))
        if problem:
            self.refused += 1
            return ToolOutcome(observation=_wrap(tool_error(problem)), call=call, error=problem)
        return ToolOutcome(observation=_wrap(tool.call(call.arguments)), call=call)

    def handle(self, action: str) -> ToolOutcome | None:
        """Parse and dispatch the action's tool call; ``None`` when the action calls no tool."""
        parsed = parse_tool_call(action)
        if parsed is None:
            return None
        if isinstance(parsed, ToolCallError):
            self.calls += 1
            self.refused += 1
            return ToolOutcome(observation=_wrap(tool_error(parsed.message)), call=None, error=parsed.message)
        return self.dispatch(parsed)


def _wrap(text: str) -> str:
    return f"{RESPONSE_OPEN}\n{text}\n{RESPONSE_CLOSE}"


class FixtureConflictError(ValueError):
    """The recorder saw a different response for an input already recorded (fixtures must be deterministic)."""


class FixtureRecorder:
    """Turns real tool responses into a JSONL fixture for ``ReplayTool.from_jsonl``.

    ``wrap(real_function)`` returns a function with the same behaviour that also records each response under
    its normalised input. A response equal to the one already recorded for that input is not written again;
    a different one raises ``FixtureConflictError`` and changes nothing (a live tool that answers the same
    input differently cannot be replayed deterministically: pin the input or the data first).
    """

    def __init__(self, path: str | os.PathLike[str], *, tool: str, parameters: Sequence[str]) -> None:
        self.path = Path(path)
        self.tool = tool
        self.parameters = tuple(parameters)
        self._recorded: dict[str, str] = {}
        if self.path.exists():
            for arguments, response in read_jsonl_records(self.path, tool=tool):
                self._recorded[self._key(arguments)] = response_text(response)

    def _key(self, arguments: Mapping[str, Any]) -> str:
        return canonical_key({name: arguments.get(name) for name in self.parameters})

    def record(self, arguments: Mapping[str, Any], response: Any) -> bool:
        """Append one record; False when the same response is already recorded for this input."""
        key = self._key(arguments)
        text = response_text(response)
        previous = self._recorded.get(key)
        if previous is not None:
            if previous != text:
                raise FixtureConflictError(
                    f"{self.path}: tool '{self.tool}' already has a different response recorded for {key}"
                )
            return False
        try:
            line = json.dumps(
                {"tool": self.tool, "arguments": {name: arguments.get(name) for name in self.parameters},
                 "response": response},
                ensure_ascii=False, sort_keys=True, allow_nan=False,
            )  # fmt: skip
        except (TypeError, ValueError) as error:
            raise FixtureError(
                f"{self.path}: tool '{self.tool}': input or response for {key} is not JSON ({error})"
            ) from None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")
        self._recorded[key] = text
        return True

    def wrap(self, function: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
        """``function`` (arguments → response) that records every response it returns."""

        def recording(arguments: dict[str, Any]) -> Any:
            response = function(arguments)
            self.record(arguments, response)
            return response

        return recording
