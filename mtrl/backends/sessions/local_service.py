"""The local training service: the ``TrainingService`` interface on torch and a PEFT LoRA adapter over a causal LM in
this process (CPU in tests and the offline demo, ``cuda`` where there is one).

What it decides, where the interface leaves a choice:

- **Sampler weights.** The sampler keeps its own copy of the adapter weights, taken by ``save_weights_for_sampler``
  (and restored by ``load_state``); ``sample`` swaps it in for the call. An ``optim_step`` alone never reaches the
  sampler, as on a remote service, where the sampler serves the weights last saved for it.
- **Logprobs.** ``sample`` reports each sampled token's logprob under the model's own distribution (temperature 1,
  no top-p), which is what the trainer computes; temperature and top-p only choose the token. With temperature 1 and
  top-p 1 (the loop's default) the importance ratio then corrects exactly for sampler/trainer drift.
- **Loss normalisation: a sum**, as Tinker defines its losses: over every masked-in target token of every datum,
  with no division by token or datum count. Successive ``forward_backward`` calls add their gradients until
  ``optim_step``. ``importance_sampling``: ``-(exp(lp - lp_sampler) * advantage)``; ``ppo``:
  ``-min(ratio * advantage, clip(ratio, 1 - clip, 1 + clip) * advantage)``.
- **Usage.** ``prefill``: prompt tokens read, once per completion asked for; ``sample``: tokens generated;
  ``train``: tokens of every datum given to ``forward_backward``.

torch, transformers and peft are imported here only, inside functions: the Lambda layer has none of them.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtrl.backends.sessions.chat_tokenizer import HFChatTokenizer
from mtrl.backends.sessions.service import (
    AdamParams,
    Datum,
    ForwardBackwardResult,
    LossName,
    SampledSequence,
    SamplingParams,
    ServiceError,
    StopReason,
    TokenUsage,
)

DEFAULT_PPO_CLIP = 0.2
STATE_FILE = "state.pt"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class LoraSettings:
    """The adapter: rank (1–256, the range ``CreateTrainingSession`` accepts), scale and which layers."""

    rank: int = 8
    alpha: float = 16.0
    target_modules: str | tuple[str, ...] = "all-linear"

    def __post_init__(self) -> None:
        if not 1 <= self.rank <= 256:
            raise ValueError(f"LoRA rank must be between 1 and 256, got {self.rank}")


def policy_loss(
    trainer_logprobs: Any, sampling_logprobs: Any, advantages: Any, mask: Any, *, loss: LossName, clip: float
) -> Any:
    """The summed loss of one datum (torch tensors, one entry per target). Masked-out targets contribute nothing,
    whatever their sampling logprob (the ratio is taken only where the mask is set)."""
    import torch  # noqa: PLC0415

    included = mask > 0
    ratio = torch.exp(torch.where(included, trainer_logprobs - sampling_logprobs, torch.zeros_like(trainer_logprobs)))
    if loss == "importance_sampling":
        objective = ratio * advantages
    elif loss == "ppo":
        objective = torch.minimum(ratio * advantages, torch.clamp(ratio, 1 - clip, 1 + clip) * advantages)
    else:
        raise ServiceError(f"unknown loss {loss!r}", infrastructure=False)
    return -(objective * mask).sum()


class LocalTrainingService:
    """One LoRA training run on ``model`` (a ``transformers`` causal LM) and its chat ``tokenizer``.

    ``directory`` holds the sampler weights and saved states (a temporary one, removed on ``close``, when None);
    ``seed`` seeds the adapter's initialisation and the sampling of calls that give no seed."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        lora: LoraSettings | None = None,
        device: str | None = None,
        seed: int = 0,
        ppo_clip: float = DEFAULT_PPO_CLIP,
        directory: str | Path | None = None,
        extra_eos_ids: Sequence[int] = (),
    ) -> None:
        import torch  # noqa: PLC0415
        from peft import LoraConfig, get_peft_model  # noqa: PLC0415

        if not 0 < ppo_clip < 1:
            raise ValueError(f"ppo_clip must be in (0, 1), got {ppo_clip}")
        settings = lora or LoraSettings()
        self._torch = torch
        self._device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self._tokenizer = HFChatTokenizer(tokenizer, extra_eos_ids=extra_eos_ids)
        self._ppo_clip = ppo_clip
        self._seed = seed
        targets = settings.target_modules
        config = LoraConfig(
            r=settings.rank,
            lora_alpha=settings.alpha,
            lora_dropout=0.0,
            target_modules=targets if isinstance(targets, str) else list(targets),
            task_type="CAUSAL_LM",
        )
        rng_state = torch.random.get_rng_state()
        try:
            torch.manual_seed(seed)  # the adapter's A matrices are random: the same seed, the same run
            self._model: Any = get_peft_model(model, config).to(self._device)
        finally:
            torch.random.set_rng_state(rng_state)
        self._model.eval()  # no dropout: sampling and training compute the same function
        self._trainable = [(name, p) for name, p in self._model.named_parameters() if p.requires_grad]
        self._sampler_weights = self._snapshot()
        self._optimizer: Any = None
        self._sample_calls = 0
        self._usage = TokenUsage()
        self._owns_directory = directory is None
        self._directory = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="mtrl-sessions-"))
        self._closed = False

    @classmethod
    def tiny(cls, *, seed: int = 0, **options: Any) -> LocalTrainingService:
        """On ``hf:tiny-random`` (``mtrl.llm.tiny``): built in code, offline, CPU-sized."""
        from mtrl.llm.tiny import build_model, build_tokenizer  # noqa: PLC0415

        tokenizer = build_tokenizer()
        return cls(build_model(tokenizer, seed=seed), tokenizer, seed=seed, **options)

    @classmethod
    def from_pretrained(cls, model_id: str, **options: Any) -> LocalTrainingService:
        """A hub id or a local directory holding a chat model and its tokenizer."""
        from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

        tokenizer = AutoTokenizer.from_pretrained(model_id)
        return cls(AutoModelForCausalLM.from_pretrained(model_id), tokenizer, **options)

    @property
    def tokenizer(self) -> HFChatTokenizer:
        return self._tokenizer

    @property
    def model(self) -> Any:
        """The PEFT model (the trainer's current weights); for checks and inspection."""
        self._check_open()
        return self._model

    # -- sampling -------------------------------------------------------------------------------------------------

    def sample(self, prompt: Sequence[int], params: SamplingParams, count: int) -> list[SampledSequence]:
        self._check_open()
        if count < 1 or not prompt:
            raise ServiceError("sample needs a non-empty prompt and count >= 1", infrastructure=False)
        torch = self._torch
        seed = params.seed if params.seed is not None else self._seed * 1_000_003 + self._sample_calls
        self._sample_calls += 1
        generator = torch.Generator(device=self._device).manual_seed(seed)
        stops = set(self._tokenizer.eos_token_ids) | set(params.stop_token_ids)
        tokens: list[list[int]] = [[] for _ in range(count)]
        logprobs: list[list[float]] = [[] for _ in range(count)]
        reasons: list[StopReason | None] = [None] * count
        with self._out_of_memory_is_infrastructure(), self._sampler_loaded(), torch.no_grad():
            output = self._model(input_ids=torch.tensor([list(prompt)] * count, device=self._device), use_cache=True)
            for _ in range(params.max_tokens):
                logits = output.logits[:, -1, :].float()
                chosen = self._choose(logits, params, generator)
                chosen_logprobs = torch.log_softmax(logits, dim=-1).gather(1, chosen[:, None]).squeeze(1)
                for row, (token, logprob) in enumerate(zip(chosen.tolist(), chosen_logprobs.tolist(), strict=True)):
                    if reasons[row] is None:
                        tokens[row].append(int(token))
                        logprobs[row].append(float(logprob))
                        if token in stops:
                            reasons[row] = "stop"
                if all(reason is not None for reason in reasons):
                    break
                output = self._model(input_ids=chosen[:, None], past_key_values=output.past_key_values, use_cache=True)
        sequences = [
            SampledSequence(tuple(row_tokens), tuple(row_logprobs), reason or "length")
            for row_tokens, row_logprobs, reason in zip(tokens, logprobs, reasons, strict=True)
        ]
        self._usage += TokenUsage(prefill=len(prompt) * count, sample=sum(len(s.tokens) for s in sequences))
        return sequences

    def _choose(self, logits: Any, params: SamplingParams, generator: Any) -> Any:
        torch = self._torch
        if params.temperature == 0:
            return logits.argmax(dim=-1)
        probabilities = torch.softmax(logits / params.temperature, dim=-1)
        if params.top_p < 1:  # nucleus: the most likely tokens until their mass reaches top_p
            ordered, order = probabilities.sort(dim=-1, descending=True)
            ordered = torch.where(ordered.cumsum(dim=-1) - ordered >= params.top_p, 0.0, ordered)
            probabilities = torch.zeros_like(probabilities).scatter(1, order, ordered)
        return torch.multinomial(probabilities, 1, generator=generator).squeeze(1)

    # -- training -------------------------------------------------------------------------------------------------

    def forward_backward(self, data: Sequence[Datum], loss: LossName) -> ForwardBackwardResult:
        self._check_open()
        if not data:
            raise ServiceError("forward_backward needs at least one datum", infrastructure=False)
        torch = self._torch
        total = 0.0
        trainer_logprobs: list[tuple[float, ...]] = []
        with self._out_of_memory_is_infrastructure():
            for datum in data:  # one sequence at a time: no padding, and the summed loss adds up the same
                tokens = torch.tensor([datum.tokens], device=self._device)
                logits = self._model(input_ids=tokens).logits[0, :-1].float()
                logprobs = torch.log_softmax(logits, dim=-1).gather(1, tokens[0, 1:, None]).squeeze(1)
                value = policy_loss(
                    logprobs,
                    self._tensor(datum.sampling_logprobs),
                    self._tensor(datum.advantages),
                    self._tensor(datum.mask),
                    loss=loss,
                    clip=self._ppo_clip,
                )
                value.backward()
                total += float(value.item())
                trainer_logprobs.append(tuple(float(x) for x in logprobs.detach().cpu().tolist()))
        self._usage += TokenUsage(train=sum(len(datum.tokens) for datum in data))
        return ForwardBackwardResult(loss=total, trainer_logprobs=tuple(trainer_logprobs))

    def optim_step(self, adam: AdamParams) -> None:
        self._check_open()
        torch = self._torch
        parameters = [p for _, p in self._trainable]
        hyper = {
            "lr": adam.learning_rate,
            "betas": (adam.beta1, adam.beta2),
            "eps": adam.eps,
            "weight_decay": adam.weight_decay,
        }
        if self._optimizer is None:
            self._optimizer = torch.optim.AdamW(parameters, **hyper)
        for group in self._optimizer.param_groups:
            group.update(hyper)
        if adam.grad_clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(parameters, adam.grad_clip_norm)
        self._optimizer.step()
        self._optimizer.zero_grad(set_to_none=True)

    # -- weights and state ----------------------------------------------------------------------------------------

    def save_weights_for_sampler(self, name: str) -> str:
        self._check_open()
        self._sampler_weights = self._snapshot()
        where = self._directory / "sampler" / _checked_name(name)
        self._model.save_pretrained(str(where))
        return str(where)

    def save_state(self, name: str) -> str:
        self._check_open()
        where = self._directory / "state" / _checked_name(name)
        where.mkdir(parents=True, exist_ok=True)
        state = {
            "trainer": self._snapshot(),
            "sampler": self._sampler_weights,
            "optimizer": self._optimizer.state_dict() if self._optimizer is not None else None,
            "sample_calls": self._sample_calls,
        }
        self._torch.save(state, where / STATE_FILE)
        return str(where)

    def load_state(self, reference: str) -> None:
        self._check_open()
        path = Path(reference) / STATE_FILE
        if not path.is_file():
            raise ServiceError(f"no saved state at {reference}", infrastructure=False)
        state = self._torch.load(path, map_location=self._device, weights_only=True)
        self._load(state["trainer"])
        self._sampler_weights = {name: tensor.clone() for name, tensor in state["sampler"].items()}
        self._sample_calls = int(state["sample_calls"])
        self._optimizer = None
        for _, parameter in self._trainable:
            parameter.grad = None
        if state["optimizer"] is not None:  # the hyperparameters come back with it; optim_step sets the given ones
            self._optimizer = self._torch.optim.AdamW([p for _, p in self._trainable])
            self._optimizer.load_state_dict(state["optimizer"])

    def usage(self) -> TokenUsage:
        return self._usage

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._model = None
        self._trainable = []
        self._optimizer = None
        if self._owns_directory:
            shutil.rmtree(self._directory, ignore_errors=True)

    # -- internals ------------------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ServiceError("the training service is closed", infrastructure=False)

    def _tensor(self, values: Sequence[float]) -> Any:
        return self._torch.tensor(values, dtype=self._torch.float32, device=self._device)

    def _snapshot(self) -> dict[str, Any]:
        return {name: parameter.detach().clone() for name, parameter in self._trainable}

    def _load(self, weights: dict[str, Any]) -> None:
        with self._torch.no_grad():
            for name, parameter in self._trainable:
                parameter.copy_(weights[name])

    @contextmanager
    def _sampler_loaded(self) -> Iterator[None]:
        trainer = self._snapshot()
        self._load(self._sampler_weights)
        try:
            yield
        finally:
            self._load(trainer)

    @contextmanager
    def _out_of_memory_is_infrastructure(self) -> Iterator[None]:
        try:
            yield
        except self._torch.OutOfMemoryError as error:  # the machine, not the policy: kept out of the statistics
            raise ServiceError(f"out of memory: {error}") from error


def _checked_name(name: str) -> str:
    if not _NAME.match(name):
        raise ServiceError(f"invalid checkpoint name {name!r} (letters, digits, . _ -)", infrastructure=False)
    return name
