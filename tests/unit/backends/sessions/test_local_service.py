"""The local training service on the tiny model, pinned to the CPU (the same numbers on every machine), checked
against independent computations: logprobs from a plain forward pass, the loss by hand, the gradient and the AdamW
step from torch.autograd; the sampler's weights, saved state and usage."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from mtrl.backends.sessions.service import AdamParams, Datum, SampledSequence, SamplingParams, ServiceError

torch = pytest.importorskip("torch", reason="the mtrl[llm] extra (make test installs it)")

from mtrl.backends.sessions.local_service import LocalTrainingService, LoraSettings  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Model has `tie_word_embeddings=True`:UserWarning")


def service(tmp_path: Path | None = None, **options: Any) -> LocalTrainingService:
    return LocalTrainingService.tiny(seed=0, device="cpu", directory=tmp_path, **options)


def prompt_of(svc: LocalTrainingService, text: str = "say a word") -> list[int]:
    return svc.tokenizer.render([{"role": "user", "content": text}], add_generation_prompt=True)


def datum_for(prompt: list[int], completion: SampledSequence, advantage: float, shift: float = 0.0) -> Datum:
    """A datum of prompt + completion; ``shift`` moves the sampling logprobs (to exercise the ratio and the clip)."""
    mask = tuple([0.0] * (len(prompt) - 1) + [1.0] * len(completion.tokens))
    sampled = tuple([0.0] * (len(prompt) - 1) + [lp + shift * (i % 3 - 1) for i, lp in enumerate(completion.logprobs)])
    return Datum(tuple(prompt) + completion.tokens, mask, sampled, tuple(advantage * m for m in mask))


def plain_logprobs(model: Any, tokens: tuple[int, ...]) -> list[float]:
    """Each target's logprob from one full forward pass, normalised by hand in float64."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens])).logits[0].double()
    values = []
    for position in range(len(tokens) - 1):
        row = logits[position]
        values.append(float(row[tokens[position + 1]] - torch.logsumexp(row, dim=0)))
    return values


def loss_by_hand(datum: Datum, logprobs: list[float], loss: str, clip: float = 0.2) -> float:
    total = 0.0
    for weight, trained, sampled, advantage in zip(
        datum.mask, logprobs, datum.sampling_logprobs, datum.advantages, strict=True
    ):
        if weight == 0:
            continue
        ratio = math.exp(trained - sampled)
        if loss == "ppo":
            total -= min(ratio * advantage, min(max(ratio, 1 - clip), 1 + clip) * advantage)
        else:
            total -= ratio * advantage
    return total


def test_sampled_logprobs_equal_a_plain_forward_pass_and_stop_reasons_are_right() -> None:
    svc = service()
    prompt = prompt_of(svc)
    completions = svc.sample(prompt, SamplingParams(max_tokens=6, seed=3), 4)
    assert len(completions) == 4
    eos = set(svc.tokenizer.eos_token_ids)
    for completion in completions:
        recomputed = plain_logprobs(svc.model, tuple(prompt) + completion.tokens)[len(prompt) - 1 :]
        assert completion.logprobs == pytest.approx(recomputed, abs=1e-5)
        stopped = completion.tokens[-1] in eos
        assert completion.stop_reason == ("stop" if stopped else "length")
        assert stopped or len(completion.tokens) == 6
        assert not eos & set(completion.tokens[:-1])  # nothing is sampled after a stop token
    # Every token a stop token: each completion ends after one token, with reason "stop".
    everything = tuple(range(len(svc.tokenizer.hf_tokenizer)))
    stopped_at_once = svc.sample(prompt, SamplingParams(max_tokens=6, seed=3, stop_token_ids=everything), 2)
    assert all(c.stop_reason == "stop" and len(c.tokens) == 1 for c in stopped_at_once)


def test_seeded_sampling_repeats_and_greedy_and_top_p_pick_the_argmax() -> None:
    svc = service()
    prompt = prompt_of(svc)
    params = SamplingParams(max_tokens=5, seed=11)
    assert svc.sample(prompt, params, 3) == svc.sample(prompt, params, 3)
    assert svc.sample(prompt, params, 3) != svc.sample(prompt, SamplingParams(max_tokens=5, seed=12), 3)
    greedy = svc.sample(prompt, SamplingParams(max_tokens=5, temperature=0), 1)[0]
    tokens = list(prompt)
    for _ in range(len(greedy.tokens)):
        with torch.no_grad():
            tokens.append(int(svc.model(input_ids=torch.tensor([tokens])).logits[0, -1].argmax()))
    assert greedy.tokens == tuple(tokens[len(prompt) :])
    nucleus = svc.sample(prompt, SamplingParams(max_tokens=5, top_p=1e-6, seed=5), 2)
    assert all(completion.tokens == greedy.tokens for completion in nucleus)


@pytest.mark.parametrize("loss", ["importance_sampling", "ppo"])
def test_forward_backward_loss_logprobs_gradient_and_step_match_an_independent_computation(loss: str) -> None:
    svc = service()
    prompt = prompt_of(svc)
    completions = svc.sample(prompt, SamplingParams(max_tokens=5, seed=1), 2)
    data = [datum_for(prompt, completions[0], 1.5, shift=0.4), datum_for(prompt, completions[1], -0.5, shift=0.4)]
    model = svc.model
    trainable = {name: p for name, p in model.named_parameters() if p.requires_grad}
    before = {name: p.detach().clone() for name, p in trainable.items()}

    # Independent: the loss by hand from plain logprobs, and its gradient from torch.autograd on a fresh graph.
    expected_logprobs = [plain_logprobs(model, datum.tokens) for datum in data]
    expected_loss = sum(loss_by_hand(d, lps, loss) for d, lps in zip(data, expected_logprobs, strict=True))
    graph_loss = torch.zeros((), dtype=torch.float64)
    for datum in data:
        tokens = torch.tensor([datum.tokens])
        logprobs = torch.log_softmax(model(input_ids=tokens).logits[0, :-1].double(), -1)
        logprobs = logprobs.gather(1, tokens[0, 1:, None]).squeeze(1)
        for i, weight in enumerate(datum.mask):
            if weight:
                ratio = torch.exp(logprobs[i] - datum.sampling_logprobs[i])
                advantage = datum.advantages[i]
                term = ratio * advantage
                if loss == "ppo":
                    term = torch.minimum(term, torch.clamp(ratio, 0.8, 1.2) * advantage)
                graph_loss = graph_loss - term
    gradients = dict(zip(trainable, torch.autograd.grad(graph_loss, list(trainable.values())), strict=True))

    result = svc.forward_backward(data, loss)  # type: ignore[arg-type]
    assert result.loss == pytest.approx(expected_loss, abs=1e-5)
    assert float(graph_loss.detach()) == pytest.approx(expected_loss, abs=1e-6)
    for reported, expected in zip(result.trainer_logprobs, expected_logprobs, strict=True):
        assert reported == pytest.approx(expected, abs=1e-5)
    for name, parameter in trainable.items():
        assert parameter.grad is not None
        torch.testing.assert_close(parameter.grad, gradients[name], atol=1e-6, rtol=1e-4)

    learning_rate, eps = 1e-2, 1e-3  # an eps well above float noise: the step is smooth in the gradient
    svc.optim_step(AdamParams(learning_rate=learning_rate, eps=eps, grad_clip_norm=None))
    for name, parameter in trainable.items():
        # AdamW's first step (bias-corrected m = g, v = g², no weight decay): w - lr * g / (|g| + eps).
        gradient = gradients[name]
        expected = before[name] - learning_rate * gradient / (gradient.abs() + eps)
        torch.testing.assert_close(parameter.detach(), expected, atol=1e-6, rtol=1e-5)
        assert parameter.grad is None  # cleared for the next accumulation


def test_gradients_accumulate_over_calls_until_the_optimizer_step() -> None:
    together, apart = service(), service()
    prompt = prompt_of(together)
    completions = together.sample(prompt, SamplingParams(max_tokens=4, seed=2), 2)
    data = [datum_for(prompt, completions[0], 1.0), datum_for(prompt, completions[1], -1.0)]
    whole = together.forward_backward(data, "importance_sampling")
    first = apart.forward_backward(data[:1], "importance_sampling")
    second = apart.forward_backward(data[1:], "importance_sampling")
    assert whole.loss == pytest.approx(first.loss + second.loss, abs=1e-6)
    for (name, a), (_, b) in zip(together.model.named_parameters(), apart.model.named_parameters(), strict=True):
        if a.requires_grad:
            torch.testing.assert_close(a.grad, b.grad, atol=1e-7, rtol=1e-5, msg=name)


def test_the_sampler_sees_new_weights_only_after_save_weights_for_sampler(tmp_path: Path) -> None:
    svc = service(tmp_path)
    prompt = prompt_of(svc)
    params = SamplingParams(max_tokens=4, seed=9)
    original = svc.sample(prompt, params, 2)
    svc.forward_backward([datum_for(prompt, c, 1.0) for c in original], "importance_sampling")
    svc.optim_step(AdamParams(learning_rate=0.5))
    assert svc.sample(prompt, params, 2) == original  # trained, but the sampler still serves the old weights
    # ...while the trainer already computes with the new ones
    moved = plain_logprobs(svc.model, tuple(prompt) + original[0].tokens)[len(prompt) - 1 :]
    assert moved != pytest.approx(list(original[0].logprobs), abs=1e-4)
    where = svc.save_weights_for_sampler("step-1")
    assert Path(where).is_dir()
    assert Path(where).is_relative_to(tmp_path)
    refreshed = svc.sample(prompt, params, 2)
    assert [c.logprobs for c in refreshed] != [c.logprobs for c in original]
    recomputed = plain_logprobs(svc.model, tuple(prompt) + refreshed[0].tokens)[len(prompt) - 1 :]
    assert refreshed[0].logprobs == pytest.approx(recomputed, abs=1e-5)


def test_save_and_load_state_resume_the_same_next_step(tmp_path: Path) -> None:
    def one_step(svc: LocalTrainingService, seed: int) -> None:
        prompt = prompt_of(svc)
        completions = svc.sample(prompt, SamplingParams(max_tokens=4, seed=seed), 2)
        data = [datum_for(prompt, completions[0], 1.0), datum_for(prompt, completions[1], -1.0)]
        svc.forward_backward(data, "ppo")
        svc.optim_step(AdamParams(learning_rate=0.05, weight_decay=0.01))
        svc.save_weights_for_sampler(f"s{seed}")

    first = service(tmp_path / "first")
    one_step(first, 1)
    reference = first.save_state("after-1")
    one_step(first, 2)
    expected = {n: p.detach().clone() for n, p in first.model.named_parameters() if p.requires_grad}

    resumed = service(tmp_path / "second", lora=LoraSettings())  # a fresh session, a different adapter init
    resumed.load_state(reference)
    one_step(resumed, 2)
    for name, parameter in resumed.model.named_parameters():
        if parameter.requires_grad:
            torch.testing.assert_close(parameter.detach(), expected[name], msg=name)
    with pytest.raises(ServiceError) as missing:
        resumed.load_state(str(tmp_path / "nowhere"))
    assert not missing.value.infrastructure


def test_usage_counts_tokens_and_close_is_idempotent() -> None:
    svc = service()
    prompt = prompt_of(svc)
    completions = svc.sample(prompt, SamplingParams(max_tokens=3, seed=0), 2)
    datum = datum_for(prompt, completions[0], 1.0)
    svc.forward_backward([datum], "importance_sampling")
    usage = svc.usage()
    assert usage.prefill == 2 * len(prompt)
    assert usage.sample == sum(len(c.tokens) for c in completions)
    assert usage.train == len(datum.tokens)
    svc.close()
    svc.close()
    with pytest.raises(ServiceError):
        svc.sample(prompt, SamplingParams(max_tokens=1), 1)
    with pytest.raises(ServiceError):
        service().save_state("../escape")
