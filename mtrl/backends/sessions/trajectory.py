"""Token in, token out: the policy the episode driver calls, keeping per episode the exact token sequence the model
conditioned on and produced.

- The first prompt is the chat template's rendering of the system prompt and the first observation, with the
  generation prompt.
- Each completion is appended as sampled: its tokens and their logprobs, never decoded and re-encoded (the text
  the environment gets is decoded from them, but training sees the tokens).
- Each later observation is appended as the tokens the template puts **after an assistant turn's content**: the
  turn's closing (an end token the model did not sample because it ran out of tokens, the newline a Qwen2.5-style
  template writes after ``<|im_end|>``), the observation as a user turn, and the generation prompt. The next prompt
  is this sequence itself, never a re-rendering of the conversation, so a template that renders earlier turns
  differently from the last one (Qwen3-style templates drop ``<think>`` from earlier assistant turns) cannot change
  what the model already saw.

``observation_tokens`` finds those tokens from the template alone: it renders the conversation so far with a short
stand-in reply and the new observation, twice with two different stand-ins; the tokens the two renderings share at
their end are everything after the reply's content.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mtrl.backends.sessions.service import ChatTokenizer, Datum, SampledSequence, SamplingParams, TrainingService
from mtrl.envs.rollout import ActionRequest, Message

# Two stand-in replies whose tokens differ at their end in any tokenizer (one ASCII letter each).
_STAND_INS = ("a", "b")


@dataclass
class Trajectory:
    """One episode's token sequence: per token, whether the policy sampled it and its sampling logprob (0 if not)."""

    tokens: list[int]
    sampled: list[bool] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    last_stop: int | None = None  # the stop token that ended the latest completion (None: cut off at max_tokens)

    @classmethod
    def start(cls, prompt: Sequence[int]) -> Trajectory:
        return cls(tokens=list(prompt), sampled=[False] * len(prompt), logprobs=[0.0] * len(prompt))

    def add_completion(self, completion: SampledSequence) -> None:
        self.tokens += completion.tokens
        self.sampled += [True] * len(completion.tokens)
        self.logprobs += completion.logprobs
        self.last_stop = completion.tokens[-1] if completion.stop_reason == "stop" and completion.tokens else None

    def add_observation(self, tokens: Sequence[int]) -> None:
        self.tokens += tokens
        self.sampled += [False] * len(tokens)
        self.logprobs += [0.0] * len(tokens)

    @property
    def sampled_tokens(self) -> tuple[int, ...]:
        return tuple(token for token, sampled in zip(self.tokens, self.sampled, strict=True) if sampled)

    def datum(self, advantage: float) -> Datum:
        """The training datum: every sampled target carries ``advantage``; prompt and observation targets mask 0."""
        mask = tuple(1.0 if sampled else 0.0 for sampled in self.sampled[1:])
        return Datum(
            tokens=tuple(self.tokens),
            mask=mask,
            sampling_logprobs=tuple(self.logprobs[1:]),
            advantages=tuple(advantage * weight for weight in mask),
        )


def observation_tokens(
    tokenizer: ChatTokenizer, conversation: Sequence[Message], observation: str, *, last_stop: int | None
) -> list[int]:
    """The tokens to append after the model's latest completion so the sequence reads as the template would render
    ``observation`` as the next user turn, ending with the generation prompt. ``conversation``: the messages before
    the latest assistant turn; ``last_stop``: the stop token the completion ended with (it is not repeated)."""
    first, second = (
        tokenizer.render(
            [*conversation, {"role": "assistant", "content": stand_in}, {"role": "user", "content": observation}],
            add_generation_prompt=True,
        )
        for stand_in in _STAND_INS
    )
    if first == second:
        raise ValueError("the chat template does not render an assistant turn's content before a user turn")
    shared = 0
    while shared < min(len(first), len(second)) and first[-1 - shared] == second[-1 - shared]:
        shared += 1
    after_reply = list(first[len(first) - shared :])
    if last_stop is not None and after_reply and after_reply[0] == last_stop:
        return after_reply[1:]  # the model sampled the turn's end itself
    return after_reply


@dataclass(frozen=True)
class SampledTurn:
    """A reply to the driver: the action text (decoded from the sampled tokens) and the completion itself."""

    text: str
    completion: SampledSequence
    prompt_tokens: int


class TokenPolicy:
    """The batch policy for ``mtrl.envs.rollout.play_batch``: one trajectory per episode index. Requests with the
    same prompt (a group's first turn) are sampled in one call; each call gets the next seed from ``seed``."""

    def __init__(self, service: TrainingService, sampling: SamplingParams, *, seed: int) -> None:
        self._service = service
        self._sampling = sampling
        self._next_seed = seed
        self.trajectories: dict[int, Trajectory] = {}

    def __call__(self, requests: Sequence[tuple[int, ActionRequest]]) -> list[Any]:
        tokenizer = self._service.tokenizer
        waiting: dict[tuple[int, ...], list[int]] = {}
        for index, request in requests:
            trajectory = self.trajectories.get(index)
            if trajectory is None:
                trajectory = self.trajectories[index] = Trajectory.start(
                    tokenizer.render(request.messages, add_generation_prompt=True)
                )
            else:  # messages end with the latest action and its observation
                trajectory.add_observation(
                    observation_tokens(
                        tokenizer, request.messages[:-2], request.observation, last_stop=trajectory.last_stop
                    )
                )
            waiting.setdefault(tuple(trajectory.tokens), []).append(index)
        replies: dict[int, SampledTurn] = {}
        for prompt, indices in waiting.items():
            params = SamplingParams(
                max_tokens=self._sampling.max_tokens,
                temperature=self._sampling.temperature,
                top_p=self._sampling.top_p,
                seed=self._next_seed,
                stop_token_ids=self._sampling.stop_token_ids,
            )
            self._next_seed += 1
            completions = self._service.sample(prompt, params, len(indices))
            for index, completion in zip(indices, completions, strict=True):
                self.trajectories[index].add_completion(completion)
                replies[index] = SampledTurn(tokenizer.decode(completion.tokens), completion, len(prompt))
        return [replies[index] for index, _ in requests]
