"""Token in, token out: the sequence the loop trains on is what the sampler produced plus the template's rendering
of each observation, for templates that render earlier turns differently from the last one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from loop_toys import chatter_spec

from mtrl.backends.sessions.chat_tokenizer import HFChatTokenizer
from mtrl.backends.sessions.figures import sampler_kl
from mtrl.backends.sessions.loop import LoopSettings, play_episodes
from mtrl.backends.sessions.service import (
    ChatTokenizer,
    ForwardBackwardResult,
    SampledSequence,
    SamplingParams,
    TokenUsage,
)
from mtrl.backends.sessions.trajectory import observation_tokens

pytest.importorskip("transformers", reason="the mtrl[llm] extra (make test installs it)")

from mtrl.llm.tiny import build_tokenizer

# Qwen2.5-style: a separator (Qwen2.5 writes a newline) after every turn's end token, the last one's too.
SEPARATED = (
    "{% for message in messages %}<|{{ message['role'] }}|> {{ message['content'] }} <|end|> ; {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# Qwen3-style: an earlier assistant turn loses its reasoning (everything up to '->'); the last one keeps it.
DROPS_REASONING = (
    "{% for message in messages %}{% set content = message['content'] %}"
    "{% if message['role'] == 'assistant' and not loop.last %}{% set content = content.split('->')[-1] %}{% endif %}"
    "<|{{ message['role'] }}|> {{ content }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def tokenizer_with(template: str) -> HFChatTokenizer:
    tokenizer = build_tokenizer()
    tokenizer.chat_template = template
    return HFChatTokenizer(tokenizer)


def ids(tokenizer: HFChatTokenizer, *tokens: str) -> list[int]:
    return [int(i) for i in tokenizer.hf_tokenizer.convert_tokens_to_ids(list(tokens))]


class ScriptedService:
    """A training service whose sampler replays scripted completions and records every prompt it was given."""

    def __init__(self, tokenizer: HFChatTokenizer, completions: Sequence[SampledSequence]) -> None:
        self._tokenizer = tokenizer
        self._completions = list(completions)
        self.prompts: list[tuple[int, ...]] = []

    @property
    def tokenizer(self) -> ChatTokenizer:
        return self._tokenizer

    def sample(self, prompt: Sequence[int], params: SamplingParams, count: int) -> list[SampledSequence]:
        self.prompts.append(tuple(prompt))
        return [self._completions.pop(0) for _ in range(count)]

    def forward_backward(self, data: Any, loss: Any) -> ForwardBackwardResult:
        raise NotImplementedError

    def optim_step(self, adam: Any) -> None:
        raise NotImplementedError

    def save_weights_for_sampler(self, name: str) -> str:
        raise NotImplementedError

    def save_state(self, name: str) -> str:
        raise NotImplementedError

    def load_state(self, reference: str) -> None:
        raise NotImplementedError

    def usage(self) -> TokenUsage:
        return TokenUsage()

    def close(self) -> None:
        pass


def completion(tokenizer: HFChatTokenizer, *tokens: str, stopped: bool) -> SampledSequence:
    token_ids = ids(tokenizer, *tokens)
    return SampledSequence(
        tuple(token_ids), tuple(-0.25 * (i + 1) for i in range(len(token_ids))), "stop" if stopped else "length"
    )


CONVERSATION = [{"role": "system", "content": "play"}, {"role": "user", "content": "hello"}]


def test_observation_tokens_keep_the_separator_after_the_sampled_end_token() -> None:
    tokenizer = tokenizer_with(SEPARATED)
    end = ids(tokenizer, "<|end|>")[0]
    after_stop = observation_tokens(tokenizer, CONVERSATION, "try again", last_stop=end)
    assert after_stop == ids(tokenizer, ";", "<|user|>", "try", "again", "<|end|>", ";", "<|assistant|>")
    # Cut off at max_tokens: the turn's end token is the template's, not sampled, and comes first.
    assert observation_tokens(tokenizer, CONVERSATION, "try again", last_stop=None) == [end, *after_stop]


def test_observation_tokens_do_not_depend_on_how_earlier_turns_are_re_rendered() -> None:
    tokenizer = tokenizer_with(DROPS_REASONING)
    end = ids(tokenizer, "<|end|>")[0]
    earlier = [*CONVERSATION, {"role": "assistant", "content": "hint -> apple"}, {"role": "user", "content": "no"}]
    assert observation_tokens(tokenizer, earlier, "try again", last_stop=end) == ids(
        tokenizer, "<|user|>", "try", "again", "<|end|>", "<|assistant|>"
    )


@pytest.mark.parametrize("template", [SEPARATED, DROPS_REASONING], ids=["separated", "drops-reasoning"])
def test_the_datum_is_exactly_the_sampled_tokens_and_the_rendered_observations(template: str) -> None:
    tokenizer = tokenizer_with(template)
    completions = [
        completion(tokenizer, "hint", "->", "apple", "<|end|>", stopped=True),
        completion(tokenizer, "guess", "->", "house", stopped=False),  # cut off at max_tokens
        completion(tokenizer, "->", "<|end|>", stopped=True),
    ]
    service = ScriptedService(tokenizer, completions)
    settings = LoopSettings(steps=1, max_tokens=3)
    (record,) = play_episodes(
        service, chatter_spec(3), [("t", {"prompt": "hello"})], settings, settings.sampling(), seed=0
    )
    trajectory = record.trajectory
    assert trajectory is not None
    assert record.rollout.turns == 3

    messages = record.rollout.messages
    separator = [";"] if template == SEPARATED else []

    def observed(turn: int, *, cut_off: bool) -> list[int]:
        user = ["<|user|>", "turn", str(turn), "over", ",", "say", "again", "<|end|>", *separator, "<|assistant|>"]
        return ids(tokenizer, *(["<|end|>"] if cut_off else []), *separator, *user)

    expected = tokenizer.render(messages[:2], add_generation_prompt=True)
    observations = [observed(1, cut_off=False), observed(2, cut_off=True)]
    for turn, sampled in enumerate(completions):
        assert service.prompts[turn] == tuple(expected)  # the model conditioned on exactly the kept sequence
        expected += sampled.tokens
        if turn < 2:
            expected += observations[turn]
    assert trajectory.tokens == expected
    assert trajectory.sampled_tokens == tuple(token for c in completions for token in c.tokens)
    assert [lp for lp, s in zip(trajectory.logprobs, trajectory.sampled, strict=True) if s] == [
        lp for c in completions for lp in c.logprobs
    ]
    datum = trajectory.datum(0.5)
    assert datum.tokens == tuple(expected)
    assert datum.mask == tuple(1.0 if s else 0.0 for s in trajectory.sampled[1:])
    assert datum.advantages == tuple(0.5 * m for m in datum.mask)

    rerendered = tokenizer.render(messages[:-1], add_generation_prompt=False)
    if template == DROPS_REASONING:  # re-rendering would have shown the model a history it never produced
        assert ids(tokenizer, "hint")[0] not in rerendered
        assert ids(tokenizer, "hint")[0] in trajectory.tokens


@pytest.mark.filterwarnings("ignore:Model has `tie_word_embeddings=True`:UserWarning")
@pytest.mark.parametrize("template", [SEPARATED, DROPS_REASONING], ids=["separated", "drops-reasoning"])
def test_the_trainer_scores_the_kept_sequence_as_the_sampler_did(template: str) -> None:
    # With the real model: the trainer's logprobs of the kept sequence equal the sampler's at every sampled token
    # (KL ~ 0), which holds only if the sequence is the one the model conditioned on.
    from mtrl.backends.sessions.local_service import LocalTrainingService
    from mtrl.llm.tiny import build_model

    tokenizer = build_tokenizer()
    tokenizer.chat_template = template
    service = LocalTrainingService(build_model(tokenizer, seed=1), tokenizer, seed=1, device="cpu")
    settings = LoopSettings(steps=1, group_size=2, max_tokens=4)
    records = play_episodes(
        service, chatter_spec(3), [("t", {"prompt": "hello"})] * 2, settings, settings.sampling(), seed=7
    )
    data = [r.trajectory.datum(1.0) for r in records if r.trajectory is not None]
    assert len(data) == 2
    assert all(r.rollout.turns == 3 for r in records)
    outcome = service.forward_backward(data, "importance_sampling")
    kl = sampler_kl(data, outcome.trainer_logprobs)
    assert kl is not None
    assert kl < 1e-8


def test_a_template_that_hides_assistant_turns_is_refused() -> None:
    hides = "{% for m in messages %}{% if m['role'] != 'assistant' %}<|{{ m['role'] }}|> {{ m['content'] }} {% endif %}"
    tokenizer = tokenizer_with(hides + "{% endfor %}<|assistant|>")
    with pytest.raises(ValueError, match="does not render an assistant turn"):
        observation_tokens(tokenizer, CONVERSATION, "try again", last_stop=None)
