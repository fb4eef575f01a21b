"""The training-service interface the sessions loop drives: sample with token logprobs, forward-backward with
per-token advantages and the sampler's logprobs, an optimizer step, fresh weights for the sampler, and state saved
and loaded for resume.

It follows the shape the field shares (Thinking Machines' Tinker; SageMaker's training session APIs and their
``sagemaker-train`` client, ``sagemaker/train/training_session/``: ``SamplingClient.sample``,
``TrainingClient.forward_backward`` / ``optim_step`` / ``save_weights_for_sampler`` / ``save_state`` /
``load_state_with_optimizer``; ``LossFunction`` ``importance_sampling`` and ``ppo``). Everything is tokens: the loop
keeps what the sampler produced and never re-tokenizes generated text.

A datum in the service's terms is ``model_input = tokens[:-1]`` with per-position ``target_tokens = tokens[1:]``,
``logprobs`` (the sampler's) and ``advantages``; here the datum carries the whole sequence and a per-target ``mask``
(1: a token the policy sampled, 0: prompt and observation tokens), and each implementation maps it to its own
wire format (a masked position gets advantage 0 and is left out of the loss).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

LossName = Literal["importance_sampling", "ppo"]
StopReason = Literal["stop", "length"]


class ServiceError(RuntimeError):
    """The training service failed an operation. ``infrastructure``: the service, not the policy, is at fault
    (a timeout, a throttle that outlived its retries, an expired session): the episode is kept out of its group's
    statistics and counted apart, never scored as if the policy had failed."""

    def __init__(self, message: str, *, infrastructure: bool = True) -> None:
        super().__init__(message)
        self.infrastructure = infrastructure


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclass(frozen=True)
class SampledSequence:
    """One completion: its tokens and the sampler's logprob of each (same length)."""

    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    stop_reason: StopReason

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.logprobs):
            raise ValueError(f"{len(self.tokens)} tokens but {len(self.logprobs)} logprobs")


@dataclass(frozen=True)
class Datum:
    """One sequence to train on. ``tokens`` is the whole sequence (prompt, then every turn); the per-target lists
    have ``len(tokens) - 1`` entries, one per predicted position (target ``tokens[i + 1]``)."""

    tokens: tuple[int, ...]
    mask: tuple[float, ...]
    sampling_logprobs: tuple[float, ...]
    advantages: tuple[float, ...]

    def __post_init__(self) -> None:
        targets = len(self.tokens) - 1
        if targets < 1:
            raise ValueError("a datum needs at least two tokens")
        for name in ("mask", "sampling_logprobs", "advantages"):
            if len(getattr(self, name)) != targets:
                raise ValueError(f"{name} has {len(getattr(self, name))} entries for {targets} targets")
        for name in ("sampling_logprobs", "advantages"):
            if not all(math.isfinite(value) for value in getattr(self, name)):
                raise ValueError(f"{name} must be finite")


@dataclass(frozen=True)
class ForwardBackwardResult:
    """``loss``: the batch's loss as the service reports it; ``trainer_logprobs``: per datum, the trainer's logprob of
    each target under the weights the gradient was taken at (the sampler/trainer mismatch is measured from these)."""

    loss: float
    trainer_logprobs: tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class AdamParams:
    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.0
    grad_clip_norm: float | None = 1.0


@dataclass(frozen=True)
class TokenUsage:
    """What the service bills (SageMaker: ``BillableTokenUsage``): prompt tokens read, tokens sampled, tokens
    trained on."""

    prefill: int = 0
    sample: int = 0
    train: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(self.prefill + other.prefill, self.sample + other.sample, self.train + other.train)


class ChatTokenizer(Protocol):
    """The model's tokenizer, as the loop needs it: the chat template rendered to tokens, and decoding."""

    @property
    def eos_token_ids(self) -> tuple[int, ...]: ...

    def render(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool) -> list[int]: ...

    def decode(self, tokens: Sequence[int]) -> str: ...


class TrainingService(Protocol):
    """One LoRA training run on a training service. Every call may raise ``ServiceError``."""

    @property
    def tokenizer(self) -> ChatTokenizer: ...

    def sample(self, prompt: Sequence[int], params: SamplingParams, count: int) -> list[SampledSequence]:
        """``count`` completions of ``prompt`` from the sampler's current weights, with token logprobs."""
        ...

    def forward_backward(self, data: Sequence[Datum], loss: LossName) -> ForwardBackwardResult:
        """Accumulate the gradient of ``loss`` over ``data`` (until the next ``optim_step``)."""
        ...

    def optim_step(self, adam: AdamParams) -> None:
        """Apply the accumulated gradient and clear it."""
        ...

    def save_weights_for_sampler(self, name: str) -> str:
        """Make the current weights the sampler's; returns where they were saved."""
        ...

    def save_state(self, name: str) -> str:
        """Save weights and optimizer state (for resume); returns a reference ``load_state`` accepts."""
        ...

    def load_state(self, reference: str) -> None:
        """Restore weights and optimizer state saved by ``save_state``."""
        ...

    def usage(self) -> TokenUsage:
        """Tokens billed so far in this session."""
        ...

    def close(self) -> None:
        """Release the session (idempotent; called on every path)."""
        ...
