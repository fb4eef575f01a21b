"""The trained model as a Hugging Face model: verl 0.9.1's FSDP model merger, lean on memory and with LoRA folded in.

``python -m mtrl.backends.verl.merge merge --backend fsdp --local_dir <actor checkpoint> --target_dir <dir>`` takes
verl's own arguments (``verl.model_merger``) and differs from it in two ways:

- **Memory.** verl's ``FSDPModelMerger`` ``torch.load``s every rank's fp32 shard whole before casting each tensor to
  bf16 (``verl/model_merger/fsdp_model_merger.py``, ``_load_and_merge_state_dicts``): about 6 bytes per parameter
  resident, 42 GB for a 7B model. Here the shards are memory-mapped (``torch.load(mmap=True)``; PyTorch's
  zipfile checkpoints, the default format since 1.6): the fp32 pages are file-backed and reclaimable, so what stays
  resident is the bf16 model (2 bytes per parameter) and one tensor's concatenation at a time.
- **LoRA.** verl saves a LoRA run's base weights unchanged with the adapter in ``lora_adapter/``
  (``base_model_merger.py``, ``save_lora_adapter``), so its ``target_dir`` is the base model, not the trained one.
  Here each adapted weight is folded in before saving, ``W = W_base + (lora_alpha / r) · B·A`` (the update PEFT's
  ``merge_and_unload`` applies for a plain LoRA layer), so ``target_dir`` holds the trained model's merged weights;
  ``lora_adapter/`` stays beside it as what the run trained (already included in the weights).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, MutableMapping
from typing import Any

LORA_A = ".lora_A.default.weight"
LORA_B = ".lora_B.default.weight"
BASE = ".base_layer.weight"


class MergeError(RuntimeError):
    pass


def fold_lora(state_dict: Mapping[str, Any], *, lora_alpha: float, rank: int) -> dict[str, Any]:
    """``{base weight key: merged weight}`` for every LoRA pair in ``state_dict`` (PEFT's key names), each in its base
    weight's dtype; computed in float32."""
    if rank <= 0 or lora_alpha <= 0:
        raise MergeError(f"cannot fold LoRA weights with rank {rank} and lora_alpha {lora_alpha}")
    scale = lora_alpha / rank
    merged: dict[str, Any] = {}
    for key in state_dict:
        if not key.endswith(LORA_A):
            continue
        stem = key.removesuffix(LORA_A)
        base_key, b_key = stem + BASE, stem + LORA_B
        if base_key not in state_dict or b_key not in state_dict:
            raise MergeError(f"LoRA weight {key} has no {b_key} or {base_key} beside it")
        base, a, b = state_dict[base_key], state_dict[key], state_dict[b_key]
        merged[base_key] = (base.float() + scale * (b.float() @ a.float())).to(base.dtype)
    return merged


def _renamed(key: str) -> str:
    """verl's name for a base weight once the adapter is split off (``save_lora_adapter``)."""
    return key.replace("base_model.model.", "").replace(BASE, ".weight")


def _merger_class() -> Any:
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger  # noqa: PLC0415 - the trainer image's verl

    class FoldingMerger(FSDPModelMerger):  # type: ignore[misc]
        def save_lora_adapter(self, state_dict: MutableMapping[str, Any]) -> Any:
            lora = [key for key in state_dict if key.endswith(LORA_A)]
            if not lora:
                return super().save_lora_adapter(state_dict)
            meta = self._load_lora_train_meta() or {}
            rank = int(meta.get("r") or min(state_dict[lora[0]].shape))
            alpha = float(meta.get("lora_alpha") or 0)
            merged = fold_lora(state_dict, lora_alpha=alpha, rank=rank)  # before verl pops the adapter
            path = super().save_lora_adapter(state_dict)
            for key, tensor in merged.items():
                state_dict[_renamed(key)] = tensor
            return path

    return FoldingMerger


def main(argv: list[str] | None = None) -> int:
    import torch  # noqa: PLC0415 - the trainer image's torch
    from verl.model_merger.base_model_merger import generate_config_from_args, parse_args  # noqa: PLC0415

    sys.argv = [sys.argv[0], *(sys.argv[1:] if argv is None else argv)]
    config = generate_config_from_args(parse_args())
    if config.backend != "fsdp":
        raise MergeError(f"only verl's fsdp checkpoints are merged here (got backend {config.backend})")
    load = torch.load

    def mapped_load(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("mmap", True)
        return load(*args, **kwargs)

    torch.load = mapped_load
    try:
        merger = _merger_class()(config)
        merger.merge_and_save()
        merger.cleanup()
    finally:
        torch.load = load
    return 0


if __name__ == "__main__":
    sys.exit(main())
