"""The one episode driver: every consumer plays an environment through this module.

The reward workers, the serverless agent, the local trainer, ``mtrl env try``/``eval``/``play``, the verifiers
adapter and the verl agent loop all play episodes here, so a dry run plays exactly the game training plays:

- the **rules** come from the environment (``EnvironmentSpec.rules()``): its ``MAX_TURNS`` and ``SYSTEM_PROMPT``
  (one documented default each, in ``mtrl.contracts.environment``), plus the caller's deadline. A caller may only
  *lower*
  the turn limit (a quick dry run), never raise it;
- the **conversation** uses chat roles: the system prompt, then ``reset(task)`` as the first ``user`` message, each
  action as an ``assistant`` message and each observation as the next ``user`` message;
- the **string contract**: actions reaching ``step`` are always ``str`` (``None`` becomes ``""``, other values
  ``str(value)``; lone surrogates become U+FFFD so a transcript always encodes as UTF-8), and an observation that
  is not a ``str`` is a contract violation (the episode ends with an error);
- the **deadline** is checked between turns and after each action (a late action is not applied), the policy
  is told the time left, and a sandbox run inside ``step`` ends at the deadline (``mtrl.contracts.deadline``);
- the **result contract**: ``result()`` must return an ``EpisodeResult`` whose reward, components, metrics and
  evaluation are finite numbers (``EpisodeResult.problems``); anything else (NaN, ±inf, a number too large for a
  float) ends the episode with an error and no result, so no backend ever trains on it;
- ``result()`` is taken and ``close()`` is called on every exit: done, turn limit, deadline, the policy stopping,
  or an exception in the environment or the policy. Nothing here raises: the ``Rollout`` carries the error and a
  caller that wants it raised calls ``Rollout.raise_error()``.

The loop itself is written once, as a generator (``episode``) that yields an ``ActionRequest`` per turn and
receives the action. The faces below only feed it: ``play`` (a policy called per turn), ``play_batch`` (many
episodes advanced together, one policy call per turn for all of them — language models batch generation),
``play_async`` (an awaited policy — the verl agent loop) and ``Stepper`` (the caller owns the loop — the
verifiers adapter, where verifiers drives the turns).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from mtrl.contracts.deadline import episode_deadline
from mtrl.contracts.environment import (
    DEFAULT_MAX_TURNS,
    DEFAULT_SYSTEM_PROMPT,
    Environment,
    EpisodeResult,
    close_environment,
)

log = logging.getLogger("mtrl.envs.rollout")

Task = Mapping[str, Any]
Message = dict[str, str]
EndReason = Literal["done", "turn_limit", "deadline", "policy_stopped", "error"]
Status = Literal["completed", "timeout", "error"]
Clock = Callable[[], float]


class StopEpisode(Exception):
    """Raised by a policy that has no next action (a script ran out, end of input): the episode ends as it stands."""


class ContractError(TypeError):
    """The environment broke the contract (an observation that is not a string)."""


class ResultContractError(ContractError):
    """``result()`` returned something no trainer may use (not an ``EpisodeResult``, or a non-finite number)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("result() broke the contract: " + "; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class EpisodeRules:
    """How an episode is played: the environment's own turn limit and system prompt, and the caller's deadline."""

    max_turns: int = DEFAULT_MAX_TURNS
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_turns, int) or isinstance(self.max_turns, bool) or self.max_turns < 1:
            raise ValueError(f"max_turns must be a whole number of at least 1 (got {self.max_turns!r})")
        if self.timeout_s is not None and not self.timeout_s >= 0:  # 0: no time at all (the first check ends it)
            raise ValueError(f"timeout_s must not be negative (got {self.timeout_s!r})")

    def capped(self, max_turns: int | None) -> EpisodeRules:
        """The same rules with the turn limit lowered to ``max_turns`` (never raised above the environment's)."""
        if max_turns is None or max_turns >= self.max_turns:
            return self
        return replace(self, max_turns=max_turns)

    def with_timeout(self, timeout_s: float | None) -> EpisodeRules:
        return replace(self, timeout_s=timeout_s)


@dataclass(frozen=True)
class ActionRequest:
    """What the policy is asked for: the next action, given the conversation so far."""

    messages: list[Message]
    turn: int  # 0-based index of the action asked for
    deadline: float | None  # on the driver's clock (``time.monotonic`` unless a test gives another)
    clock: Clock = field(default=time.monotonic, repr=False, compare=False)

    @property
    def observation(self) -> str:
        """The newest observation (the last user message)."""
        return self.messages[-1]["content"]

    def remaining_s(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - self.clock())


@dataclass
class Rollout:
    """One played episode: the conversation, the result and why it ended."""

    task: dict[str, Any]
    messages: list[Message]
    result: EpisodeResult | None
    turns: int
    ended: EndReason
    max_turns: int
    seconds: float
    replies: list[Any] = field(default_factory=list)  # what the policy returned per turn (e.g. token counts)
    error: BaseException | None = None
    coerced_actions: int = 0  # actions that were not strings (or held lone surrogates) and were converted

    @property
    def status(self) -> Status:
        """The reward workers' outcome status: ``timeout`` for the deadline, ``error`` for any exception."""
        if self.ended == "error":
            return "error"
        return "timeout" if self.ended == "deadline" else "completed"

    @property
    def hit_turn_limit(self) -> bool:
        """The episode used every turn it was allowed (whether the driver or the environment stopped it)."""
        return self.ended == "turn_limit" or self.turns >= self.max_turns

    @property
    def reward(self) -> float | None:
        return None if self.result is None else float(self.result.reward)

    @property
    def error_text(self) -> str:
        return "" if self.error is None else f"{type(self.error).__name__}: {self.error}"

    @property
    def transcript(self) -> list[Message]:
        """The conversation without the system prompt (what happened in the episode)."""
        return [message for message in self.messages if message["role"] != "system"]

    def raise_error(self) -> None:
        """Re-raise the exception that ended the episode (after it was scored and closed), if any."""
        if self.error is not None:
            raise self.error


def action_text(reply: Any) -> tuple[str, bool]:
    """The action string of a policy's reply (a ``str`` or an object with a ``text`` string) and whether it had to
    be converted."""
    text = getattr(reply, "text", reply)
    coerced = False
    if text is None:
        text, coerced = "", True
    elif not isinstance(text, str):
        text, coerced = str(text), True
    clean = _encodable(text)
    return clean, coerced or clean is not text


def _encodable(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= char <= "\udfff" else char for char in text)
    return text


def _observation(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ContractError(f"{where} must return a string observation (got {type(value).__name__})")
    return _encodable(value)


EpisodeLoop = Generator[ActionRequest, Any, Rollout]


def _score(env: Environment) -> tuple[EpisodeResult | None, Exception | None]:
    try:
        return checked_result(env.result()), None
    except Exception as failure:
        return None, failure


def checked_result(result: object) -> EpisodeResult:
    """``result`` as the trainers may use it: an ``EpisodeResult`` whose reward, components, metrics and evaluation
    are finite plain floats (numpy scalars converted), or a ``ResultContractError`` naming every violation.

    Every backend's episodes come through here, so a NaN or an infinity never reaches an advantage: one NaN reward
    makes a whole GRPO group's advantages NaN (and verl's next rollout dump fails on it).
    """
    if not isinstance(result, EpisodeResult):
        raise ResultContractError([f"result() must return EpisodeResult (got {type(result).__name__})"])
    problems = result.problems()
    if problems:
        raise ResultContractError(problems)
    return replace(
        result,
        reward=float(result.reward),
        components={name: float(value) for name, value in result.components.items()},
        metrics={name: float(value) for name, value in result.metrics.items()},
        evaluation=None if result.evaluation is None else float(result.evaluation),
    )


def _close(env: Environment) -> None:
    try:
        close_environment(env)
    except Exception as failure:  # a broken cleanup is logged; it never changes the episode's score
        log.warning("closing the environment failed: %s: %s", type(failure).__name__, failure)


def episode(env: Environment, task: Task, rules: EpisodeRules, *, clock: Clock = time.monotonic) -> EpisodeLoop:
    """The episode loop (the only one): yields an ``ActionRequest`` per turn, is sent the policy's reply, and
    returns the ``Rollout``. Throw ``StopEpisode`` into it to end the episode as it stands, or any exception the
    policy raised (``TimeoutError`` ends it as a deadline, anything else as an error)."""
    started = clock()
    deadline = None if rules.timeout_s is None else started + rules.timeout_s
    messages: list[Message] = [{"role": "system", "content": rules.system_prompt}]
    replies: list[Any] = []
    turns = coerced = 0
    ended: EndReason = "done"
    error: BaseException | None = None
    result: EpisodeResult | None = None
    try:
        try:
            messages.append({"role": "user", "content": _observation(env.reset(task), "reset()")})
            while not env.done:
                if turns >= rules.max_turns:
                    ended = "turn_limit"
                    break
                if deadline is not None and clock() >= deadline:
                    ended = "deadline"
                    break
                try:
                    reply = yield ActionRequest(list(messages), turns, deadline, clock)
                except StopEpisode:
                    ended = "policy_stopped"
                    break
                except TimeoutError as late:
                    ended, error = "deadline", late
                    break
                text, converted = action_text(reply)
                coerced += converted
                replies.append(reply)
                messages.append({"role": "assistant", "content": text})
                turns += 1
                if deadline is not None and clock() > deadline:
                    ended = "deadline"  # the action came too late: it is not applied
                    break
                # A sandbox run inside step() ends with the episode, not at its own timeout past it.
                with episode_deadline(None if deadline is None else deadline - clock()):
                    step = env.step(text)
                messages.append({"role": "user", "content": _observation(step.observation, "step()")})
        except Exception as failure:  # the episode is scored as it stands; the caller decides whether to raise
            ended, error = "error", failure
        result, result_error = _score(env)
        if result_error is not None and error is None:
            ended, error = "error", result_error
    finally:  # also when the loop is abandoned (GeneratorExit): the episode's resources are always released
        _close(env)
    return Rollout(
        task=dict(task),
        messages=messages,
        result=result,
        turns=turns,
        ended=ended,
        max_turns=rules.max_turns,
        seconds=clock() - started,
        replies=replies,
        error=error,
        coerced_actions=coerced,
    )


class Policy(Protocol):
    """A policy for ``play``: the next action from the conversation so far, within ``timeout_s`` (None: no limit).
    It may raise ``StopEpisode`` when it has no next action."""

    def __call__(self, messages: list[Message], *, timeout_s: float | None) -> Any: ...


BatchPolicy = Callable[[Sequence[tuple[int, ActionRequest]]], Sequence[Any]]
AsyncPolicy = Callable[[ActionRequest], Awaitable[Any]]


def _finish(loop: EpisodeLoop, first: Any) -> Rollout:
    """Drive ``loop`` (already started: ``first`` is its first yield or its Rollout) to its end with StopEpisode."""
    if isinstance(first, Rollout):
        return first
    try:
        loop.throw(StopEpisode())
    except StopIteration as finished:
        return finished.value  # type: ignore[no-any-return]
    raise RuntimeError("the episode loop did not end after StopEpisode")  # pragma: no cover - the loop breaks on it


def _start(loop: EpisodeLoop) -> ActionRequest | Rollout:
    try:
        return next(loop)
    except StopIteration as finished:
        return finished.value  # type: ignore[no-any-return]


def _advance(loop: EpisodeLoop, reply: Any = None, *, failure: BaseException | None = None) -> ActionRequest | Rollout:
    try:
        return loop.throw(failure) if failure is not None else loop.send(reply)
    except StopIteration as finished:
        return finished.value  # type: ignore[no-any-return]


def play(
    env: Environment, task: Task, policy: Policy, rules: EpisodeRules, *, clock: Clock = time.monotonic
) -> Rollout:
    """Play one episode, asking ``policy`` for each action."""
    loop = episode(env, task, rules, clock=clock)
    step = _start(loop)
    while isinstance(step, ActionRequest):
        try:
            reply = policy(step.messages, timeout_s=step.remaining_s())
        except Exception as failure:  # StopEpisode and TimeoutError included: the loop decides what each means
            step = _advance(loop, failure=failure)
        else:
            step = _advance(loop, reply)
    return step


def play_batch(
    envs: Sequence[Environment],
    tasks: Sequence[Task],
    policy: BatchPolicy,
    rules: EpisodeRules,
    *,
    clock: Clock = time.monotonic,
) -> list[Rollout]:
    """Play one episode per ``(env, task)``, all advanced together: each turn ``policy`` gets the requests of every
    episode still running, as ``(episode index, request)`` pairs, and returns one reply per request, in order.
    An exception from ``policy`` ends every episode it was asked for."""
    loops = [episode(env, task, rules, clock=clock) for env, task in zip(envs, tasks, strict=True)]
    steps: list[ActionRequest | Rollout] = [_start(loop) for loop in loops]
    while True:
        asked = [(index, step) for index, step in enumerate(steps) if isinstance(step, ActionRequest)]
        if not asked:
            return [step for step in steps if isinstance(step, Rollout)]
        try:
            replies = list(policy(asked))
            if len(replies) != len(asked):
                raise RuntimeError(f"the batch policy returned {len(replies)} replies for {len(asked)} requests")
        except Exception as failure:
            for index, _ in asked:
                steps[index] = _advance(loops[index], failure=failure)
            continue
        for (index, _), reply in zip(asked, replies, strict=True):
            steps[index] = _advance(loops[index], reply)


async def play_async(
    env: Environment, task: Task, policy: AsyncPolicy, rules: EpisodeRules, *, clock: Clock = time.monotonic
) -> Rollout:
    """Play one episode with an awaited policy (the verl agent loop generates through an async server manager).

    The environment's own work (reset, step, scoring: a sandboxed program or a model call can take seconds) runs in a
    worker thread (``asyncio.to_thread``), so the event loop keeps serving the other episodes' generations meanwhile;
    one episode's steps still run one at a time, in order.
    """
    loop = episode(env, task, rules, clock=clock)
    step = await asyncio.to_thread(_start, loop)
    while isinstance(step, ActionRequest):
        try:
            reply = await policy(step)
        except Exception as failure:
            step = await asyncio.to_thread(_advance, loop, failure=failure)
        else:
            step = await asyncio.to_thread(_advance, loop, reply)
    return step


class Stepper:
    """The episode loop turned inside out, for a caller that owns the turns (verifiers calls back per turn).

    ``request`` is the pending ``ActionRequest`` (None once the episode ended); ``act(reply)`` plays one action;
    ``finish()`` ends the episode as it stands (if it still runs) and returns the ``Rollout``.
    """

    def __init__(self, env: Environment, task: Task, rules: EpisodeRules, *, clock: Clock = time.monotonic) -> None:
        self._loop = episode(env, task, rules, clock=clock)
        self._step = _start(self._loop)

    @property
    def request(self) -> ActionRequest | None:
        return self._step if isinstance(self._step, ActionRequest) else None

    @property
    def ended(self) -> bool:
        return isinstance(self._step, Rollout)

    def act(self, reply: Any) -> ActionRequest | None:
        if isinstance(self._step, ActionRequest):
            self._step = _advance(self._loop, reply)
        return self.request

    def finish(self) -> Rollout:
        self._step = _finish(self._loop, self._step)
        return self._step


def scripted(actions: Sequence[Any]) -> Policy:
    """A policy that plays ``actions`` in order, then stops the episode (``mtrl env play --action``, smoke checks)."""
    queue = list(actions)

    def next_action(messages: list[Message], *, timeout_s: float | None) -> Any:
        if not queue:
            raise StopEpisode
        return queue.pop(0)

    return next_action


def run_episode(
    env: Environment, task: Task, actions: Sequence[Any], rules: EpisodeRules | None = None
) -> tuple[list[Message], EpisodeResult]:
    """Play scripted ``actions``; returns the conversation and the result, and raises what the episode raised
    (after scoring and closing it). Without ``rules``, the default system prompt and as many turns as actions."""
    chosen = rules or EpisodeRules(max_turns=max(1, len(actions)))
    rollout = play(env, task, scripted(actions), chosen)
    rollout.raise_error()
    assert rollout.result is not None  # no error means result() returned
    return rollout.messages, rollout.result
