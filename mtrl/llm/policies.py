"""Chat policies: a Hugging Face causal LM (``hf:MODEL``, ``hf:tiny-random``) or an OpenAI-compatible endpoint.

A policy keeps one ``Context`` per episode. ``generate`` samples the next assistant reply for a batch of contexts;
``extend`` appends the reply and the environment's next observation. The Hugging Face policy keeps each episode as
one token sequence — the chat-templated prompt, then the model's own sampled tokens, then each observation rendered
as a user turn — so what GRPO later trains on is exactly what the model saw and produced (``env_mask`` marks the
model's tokens with 1, the environment's with 0).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Protocol

from mtrl.llm import LLMUnavailableError, require
from mtrl.llm.tiny import TINY_RANDOM, build_model, build_tokenizer


class PolicyError(ValueError):
    """A policy specification or sampling option is invalid (the message says which)."""


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 32

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and 0 < self.temperature <= 10):
            raise PolicyError(f"--temperature must be in (0, 10] (got {self.temperature})")
        if not (math.isfinite(self.top_p) and 0 < self.top_p <= 1):
            raise PolicyError(f"--top-p must be in (0, 1] (got {self.top_p})")
        if not 1 <= self.max_new_tokens <= 8192:
            raise PolicyError(f"--max-new-tokens must be between 1 and 8192 (got {self.max_new_tokens})")


@dataclass
class Reply:
    text: str
    prompt_tokens: int  # tokens the model read for this turn (the whole context)
    completion_tokens: int


@dataclass
class Context:
    """One episode's conversation; ``ids``/``mask``/``prompt_length`` only for token-level (HF) policies."""

    messages: list[dict[str, str]]
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    prompt_length: int = 0


class ChatPolicy(Protocol):
    name: str

    def begin(self, messages: list[dict[str, str]]) -> Context: ...

    def generate(self, contexts: list[Context], sampling: Sampling) -> list[Reply]: ...

    def extend(self, context: Context, reply: Reply, observation: str | None) -> None: ...


@dataclass(frozen=True)
class PolicySpec:
    kind: str  # "features", "hf" or "openai"
    target: str = ""  # model id/path, "tiny-random", or the base URL
    model: str | None = None  # the model name sent to an OpenAI-compatible endpoint

    @property
    def label(self) -> str:
        if self.kind == "features":
            return "features"
        if self.kind == "openai":
            return f"openai:{self.target} ({self.model})"
        return f"hf:{self.target}"


def parse_policy(text: str, *, model: str | None = None) -> PolicySpec:
    """``features`` | ``hf:MODEL`` (hub id or local path) | ``hf:tiny-random`` | ``openai:BASE_URL`` (+ ``model``)."""
    kind, _, target = text.partition(":")
    if text == "features":
        if model is not None:
            raise PolicyError("--model is for --policy openai:BASE_URL only")
        return PolicySpec("features")
    if kind == "hf" and target:
        if model is not None:
            raise PolicyError("--model is for --policy openai:BASE_URL; give the Hugging Face model as hf:MODEL")
        return PolicySpec("hf", target)
    if kind == "openai" and target:
        if not target.startswith(("http://", "https://")):
            raise PolicyError(
                f"openai:BASE_URL needs an http(s) URL, e.g. openai:http://127.0.0.1:8000/v1 (got {target!r})"
            )
        if not model:
            raise PolicyError("--policy openai:BASE_URL needs --model NAME (the model the endpoint serves)")
        return PolicySpec("openai", target, model)
    raise PolicyError(
        f"unknown --policy {text!r}: use features, hf:MODEL (hub id or local path), hf:tiny-random, "
        "or openai:BASE_URL with --model NAME"
    )


def load_policy(spec: PolicySpec, *, seed: int = 0) -> ChatPolicy:
    if spec.kind == "hf":
        return HFPolicy.load(spec.target, seed=seed)
    if spec.kind == "openai":
        assert spec.model is not None  # parse_policy guarantees it
        return OpenAIPolicy(spec.target, spec.model)
    raise PolicyError(f"policy {spec.label} is not a chat policy")


class HFPolicy:
    """A causal LM through ``transformers``: chat template applied, batched sampling, CPU or GPU."""

    def __init__(self, model: Any, tokenizer: Any, *, name: str) -> None:
        import torch

        self.name = name
        self.model = model
        self.tokenizer = tokenizer
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model.to(self.device)
        if getattr(tokenizer, "chat_template", None) is None:
            raise PolicyError(f"{name}: the tokenizer has no chat template; use an instruction-tuned (chat) model")
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"

    @classmethod
    def load(cls, target: str, *, seed: int = 0) -> HFPolicy:
        for module in ("torch", "transformers"):
            require(module)
        if target == TINY_RANDOM:  # build_model keeps torch to one thread: the tiny model's matrices are too small
            tokenizer = build_tokenizer()
            return cls(build_model(tokenizer, seed=seed), tokenizer, name=f"hf:{TINY_RANDOM}")
        from transformers import AutoModelForCausalLM, AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(target)
            model = AutoModelForCausalLM.from_pretrained(target)
        except (OSError, ValueError) as error:
            raise PolicyError(
                f"cannot load hf:{target} (a hub id needs network access; a local path must hold "
                f"a saved model and tokenizer): {error}"
            ) from error
        return cls(model, tokenizer, name=f"hf:{target}")

    def _render(self, messages: list[dict[str, str]], *, generation_prompt: bool) -> str:
        text: str = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt
        )
        return text

    def _encode(self, text: str) -> list[int]:
        ids: list[int] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids

    def begin(self, messages: list[dict[str, str]]) -> Context:
        ids = self._encode(self._render(messages, generation_prompt=True))
        return Context(messages=list(messages), ids=list(ids), mask=[], prompt_length=len(ids))

    def generate(self, contexts: list[Context], sampling: Sampling) -> list[Reply]:
        import torch

        if not contexts:
            return []
        pad = int(self.tokenizer.pad_token_id)
        width = max(len(context.ids) for context in contexts)
        input_ids = torch.full((len(contexts), width), pad, dtype=torch.long)
        attention = torch.zeros((len(contexts), width), dtype=torch.long)
        for row, context in enumerate(contexts):
            input_ids[row, width - len(context.ids) :] = torch.tensor(context.ids)
            attention[row, width - len(context.ids) :] = 1
        with torch.no_grad():
            output = self.model.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=attention.to(self.device),
                do_sample=True,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=0,
                max_new_tokens=sampling.max_new_tokens,
                pad_token_id=pad,
                eos_token_id=self.tokenizer.eos_token_id,
            )
        replies: list[Reply] = []
        eos = self.tokenizer.eos_token_id
        for row, context in enumerate(contexts):
            new = [int(token) for token in output[row, width:].tolist()]
            if eos in new:
                new = new[: new.index(eos) + 1]  # everything after the first end-of-turn is padding
            text = self.tokenizer.decode(new, skip_special_tokens=True).strip()
            reply = Reply(text=text, prompt_tokens=len(context.ids), completion_tokens=len(new))
            context.ids += new
            context.mask += [1] * len(new)
            replies.append(reply)
        return replies

    def extend(self, context: Context, reply: Reply, observation: str | None) -> None:
        """Append the reply (already in ``ids``) and, unless the episode ended, the observation as a user turn."""
        before = [*context.messages, {"role": "assistant", "content": reply.text}]
        context.messages = before
        if observation is None:
            return
        eos = self.tokenizer.eos_token_id
        if not context.ids or context.ids[-1] != eos:  # cut off at max_new_tokens: close the turn for the model
            context.ids.append(eos)
            context.mask.append(0)
        after = [*before, {"role": "user", "content": observation}]
        rendered_before = self._render(before, generation_prompt=False)
        rendered_after = self._render(after, generation_prompt=True)
        if rendered_after.startswith(rendered_before):
            segment = rendered_after[len(rendered_before) :]
        else:  # a template that re-renders earlier turns: render the new user turn on its own
            segment = self._render([{"role": "user", "content": observation}], generation_prompt=True)
        ids = self._encode(segment)
        context.ids += ids
        context.mask += [0] * len(ids)
        context.messages = after


class OpenAIPolicy:
    """Any OpenAI-compatible chat-completions endpoint (vLLM, Ollama, llama.cpp server, a hosted endpoint)."""

    def __init__(self, base_url: str, model: str, *, timeout_s: float = 120.0) -> None:
        require("openai")
        from openai import OpenAI

        self.name = f"openai:{base_url} ({model})"
        self.model = model
        # Local servers accept any key; a real one is read from OPENAI_API_KEY, never from a file of ours.
        self.client = OpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "unused"), timeout=timeout_s)

    def begin(self, messages: list[dict[str, str]]) -> Context:
        return Context(messages=list(messages))

    def generate(self, contexts: list[Context], sampling: Sampling) -> list[Reply]:
        from openai import OpenAIError

        replies: list[Reply] = []
        for context in contexts:
            try:
                response = self.client.chat.completions.create(
                    model=self.model,
                    messages=context.messages,
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    max_tokens=sampling.max_new_tokens,
                )
            except OpenAIError as error:
                raise LLMUnavailableError(f"{self.name}: the endpoint failed: {error}") from error
            text = (response.choices[0].message.content or "").strip() if response.choices else ""
            usage = response.usage
            replies.append(
                Reply(
                    text=text,
                    prompt_tokens=int(usage.prompt_tokens) if usage else 0,
                    completion_tokens=int(usage.completion_tokens) if usage else 0,
                )
            )
        return replies

    def extend(self, context: Context, reply: Reply, observation: str | None) -> None:
        context.messages.append({"role": "assistant", "content": reply.text})
        if observation is not None:
            context.messages.append({"role": "user", "content": observation})
