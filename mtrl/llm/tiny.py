"""``hf:tiny-random``: a tiny randomly initialised causal LM and its tokenizer, built in code (no download).

It exists for offline plumbing checks (tests, CI, a first ``mtrl env try`` on a new environment): every step a real
model takes — chat template, batched sampling, multi-turn context, token counts, LoRA, TRL's GRPO — runs, on a model
of ~40 k parameters that answers at random. Its scores say nothing about a reward; only a real model's do.

The tokenizer is a word-level ``tokenizers`` model over a small in-code vocabulary: role markers, a few hundred
common English words (five-letter ones included, so a random reply is sometimes a playable word), the letters, the
digits and punctuation; anything else is ``<unk>``. The chat template renders ``<|role|> content <|end|>`` turns.
"""

from __future__ import annotations

from typing import Any

TINY_RANDOM = "tiny-random"
SPECIAL_TOKENS = ("<pad>", "<unk>", "<s>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>")
EOS = "<|end|>"
_WORDS = """
a an the and or not no yes is are was be it this that to of in on at for with by from as you your i my we me
word words letter letters guess guesses reply say secret hint hints right wrong correct feedback place turn turns
one two three four five six game over try again only per english exactly nothing else answer used up did invalid
about above after again alarm alone apple arise audio beach begin being below bench black bloom board brain bread
brick bring brown build candy chair chalk charm cheap check chest child chose clean clear climb clock cloud coast
crane cream crisp crown dance delay dream drink eager early earth eight empty enjoy enter equal event fancy field
fight final flame float floor focus found fresh front fruit ghost glass globe grace grain grand grape grass great
green group guard guest happy heart heavy horse hotel house human ideal image inner irony juice knife laser later
laugh learn lemon level light limit lunch magic march match media metal might money month motor mouse mouth music
noble noise north novel ocean offer often olive opera orbit otter outer owner paint panel paper party peace pearl
phone piano pilot pious pizza plane plant plate point pound power press price pride prize proud queen quick quiet
radio raise range reach ready river robin robot rough round royal salad scale scene score sense shade shape share
sharp sheep shelf shell shine shirt shore short sight skill slate sleep smile smoke snake solid sound south space
spare speak spice spoon sport stage stair stamp stand start steam steel stone store storm story sugar sunny sweet
table taste teach thumb tiger title toast topic torch total tower track trade train treat trend trial truck trust
truth uncle union unity upper urban usual valid value video visit voice waste watch water wheat wheel white whole
woman world worry youth zebra
"""
_PUNCTUATION = [*".,!?:;'\"()[]{}-_=+*/<>@#%&|", "->"]
# The whole chat template: what `apply_chat_template` renders for a conversation (Jinja, as in a model's config).
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|> {{ message['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def vocabulary() -> list[str]:
    """Special tokens first (their ids are stable), then words, letters, digits and punctuation, each once."""
    tokens: list[str] = list(SPECIAL_TOKENS)
    for token in [
        *_WORDS.split(),
        *"abcdefghijklmnopqrstuvwxyz",
        *"ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        *"0123456789",
        *_PUNCTUATION,
    ]:
        if token not in tokens:
            tokens.append(token)
    return tokens


def build_tokenizer() -> Any:
    """A ``PreTrainedTokenizerFast`` over the in-code vocabulary, with pad/eos tokens and the chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate(vocabulary())}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins word-level tokens with spaces
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<s>",
        eos_token=EOS,
        additional_special_tokens=[t for t in SPECIAL_TOKENS if t not in {"<pad>", "<unk>", "<s>", EOS}],
        padding_side="left",  # decoder-only generation pads on the left; TRL requires it
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(tokenizer: Any, *, seed: int = 0) -> Any:
    """A two-layer Llama with 32-wide hidden states, randomly initialised from ``seed`` (float32, CPU).

    Building it sets torch to one intra-op thread: on matrices this small, handing each product to a second thread
    costs more than the product (3× the CPU time of a plumbing run on two busy cores)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    finally:
        torch.random.set_rng_state(generator_state)  # building a model must not disturb the caller's sampling
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model
