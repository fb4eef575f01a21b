"""hf:tiny-random through the environment contract: chat template, batched multi-turn rollouts, token masks."""

from __future__ import annotations

import pytest

from mtrl.envs.registry import load_spec
from mtrl.llm.policies import HFPolicy, PolicyError, Sampling, parse_policy
from mtrl.llm.rollout import play_groups
from mtrl.llm.tiny import build_tokenizer


def test_tiny_tokenizer_has_a_chat_template_and_round_trips_words() -> None:
    tokenizer = build_tokenizer()
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": "guess the word"}, {"role": "user", "content": "crane"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert text.startswith("<|system|> guess the word <|end|>")
    assert text.endswith("<|assistant|>")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True).split() == ["guess", "the", "word", "crane"]
    assert tokenizer.unk_token_id not in ids


@pytest.mark.parametrize("env_id", ["wordle", "template"])
def test_groups_of_rollouts_keep_the_models_tokens_apart_from_the_environments(env_id: str) -> None:
    spec = load_spec(env_id)
    policy = HFPolicy.load("tiny-random", seed=3)
    groups = play_groups(
        spec, policy, [spec.example_task] * 2, group_size=3, sampling=Sampling(max_new_tokens=2), max_turns=3
    )
    assert [len(group) for group in groups] == [3, 3]
    for episode in (e for group in groups for e in group):
        context = episode.context
        assert 1 <= episode.turns <= 3
        assert len(context.ids) == context.prompt_length + len(context.mask)
        # Every generated token is marked 1; the environment's replies (and closing tokens) 0.
        assert sum(context.mask) == episode.completion_tokens
        assert 0 < episode.completion_tokens <= 2 * episode.turns
        roles = [turn["role"] for turn in episode.transcript]
        assert roles == ["user"] + ["assistant", "user"] * episode.turns
        assert episode.result.problems() == []
        # The system prompt (the environment's, or the default) and the first observation open the conversation.
        assert context.messages[-1]["role"] == "assistant"
        assert context.messages[0] == {"role": "system", "content": spec.system_prompt}
        assert context.messages[1]["content"] == episode.transcript[0]["content"]


def test_policy_specs_are_checked() -> None:
    assert parse_policy("hf:tiny-random").target == "tiny-random"
    assert parse_policy("openai:http://127.0.0.1:9/v1", model="m").model == "m"
    with pytest.raises(PolicyError, match="--model"):
        parse_policy("openai:http://127.0.0.1:9/v1")
    with pytest.raises(PolicyError, match="http"):
        parse_policy("openai:localhost:9", model="m")
    with pytest.raises(PolicyError, match="unknown --policy"):
        parse_policy("gpt")
    with pytest.raises(PolicyError, match="top-p"):
        Sampling(top_p=0)
    with pytest.raises(PolicyError, match="max-new-tokens"):
        Sampling(max_new_tokens=0)
