"""Folding a LoRA adapter into its base weights (mtrl.backends.verl.merge; issue 35 item 9). The merge through verl's
real merger, against PEFT's own ``merge_and_unload``, is tests/contract/test_verl_trainer_runtime.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from mtrl.backends.verl.merge import MergeError, fold_lora  # noqa: E402


def _lora_state(dtype: object) -> dict[str, object]:
    torch.manual_seed(0)
    stem = "base_model.model.model.layers.0.self_attn.q_proj"
    return {
        f"{stem}.base_layer.weight": torch.randn(6, 4).to(dtype),
        f"{stem}.lora_A.default.weight": torch.randn(2, 4),
        f"{stem}.lora_B.default.weight": torch.randn(6, 2),
        "base_model.model.model.norm.weight": torch.ones(4),
    }


def test_each_adapted_weight_becomes_base_plus_alpha_over_r_times_b_a() -> None:
    state = _lora_state(torch.float32)
    stem = "base_model.model.model.layers.0.self_attn.q_proj"
    merged = fold_lora(state, lora_alpha=4, rank=2)
    assert set(merged) == {f"{stem}.base_layer.weight"}
    expected = state[f"{stem}.base_layer.weight"] + 2.0 * (
        state[f"{stem}.lora_B.default.weight"] @ state[f"{stem}.lora_A.default.weight"]
    )
    assert torch.allclose(merged[f"{stem}.base_layer.weight"], expected)


def test_the_merged_weight_keeps_its_base_dtype() -> None:
    merged = fold_lora(_lora_state(torch.bfloat16), lora_alpha=16, rank=2)
    assert all(tensor.dtype == torch.bfloat16 for tensor in merged.values())


def test_an_incomplete_pair_or_a_missing_alpha_is_refused() -> None:
    state = _lora_state(torch.float32)
    with pytest.raises(MergeError, match="lora_alpha 0"):
        fold_lora(state, lora_alpha=0, rank=2)
    del state["base_model.model.model.layers.0.self_attn.q_proj.lora_B.default.weight"]
    with pytest.raises(MergeError, match="has no"):
        fold_lora(state, lora_alpha=4, rank=2)
