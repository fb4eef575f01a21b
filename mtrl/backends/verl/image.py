"""What the verl trainer image (docker/verl-trainer/Dockerfile) holds, in the one place the code that runs in it reads.

- **Attention.** verl 0.9.1 loads the actor with ``attn_implementation=flash_attention_2`` unless the model's
  ``override_config`` names another (``verl/workers/config/model.py``, ``HFModelConfig.__post_init__``). The image
  has no ``flash_attn`` (verl's ``fsdp`` extra pins a flash-attn wheel built for one torch/CUDA pair, and its sdist
  needs nvcc), so the trainer asks for PyTorch's own ``sdpa``, which every torch build has. verl's remove-padding
  path packs a micro-batch into one row and relies on flash-attention's variable-length kernels to keep sequences
  apart; with ``sdpa`` the batch stays padded (``use_remove_padding=False``), so each row attends only to itself.
  vLLM picks its own attention backend (its wheel bundles its FlashAttention build).
- **NCCL.** The image has no libfabric and no aws-ofi-nccl plugin (the PyPI wheels bring NCCL alone), so NCCL runs
  over its socket transport: ``NCCL_NET=Socket`` names that choice (NCCL fails at start if the named network is
  missing, instead of picking one silently), and no ``FI_*`` or EFA device is requested. EFA would need AWS's EFA
  installer (libfabric and aws-ofi-nccl, "Get started with EFA and NCCL", Amazon EC2 User Guide) in the image.
- **CUDA.** torch 2.11.0 from PyPI is its CUDA 13.0 build (``nvidia-*-cu13`` wheels in the lock); CUDA 13.0 needs an
  NVIDIA driver of at least 580 (NVIDIA CUDA Toolkit release notes, "CUDA Toolkit and Corresponding Driver
  Versions"). The driver comes from the node: HyperPod's EKS AMI ships NVIDIA's data-center driver with the
  NVIDIA container toolkit (SageMaker HyperPod release notes, "HyperPod AMI releases for Amazon EKS"); a group on an
  AMI whose driver is older than 580 cannot run this image.

``python -m mtrl.backends.verl.image`` checks the running image against all of it; the Dockerfile runs it at build.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys
from collections.abc import Sequence

from mtrl.backends.verl.hydra import hydra_value

ATTENTION_IMPLEMENTATION = "sdpa"
# Remove-padding (sequence packing) needs flash-attention's varlen kernels to keep packed sequences apart.
USE_REMOVE_PADDING = False
# NCCL's socket transport; the interfaces exclude loopback, Docker's bridge and EKS Pod Identity's link-local link.
NCCL_ENVIRONMENT = {"NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "^lo,docker,pod-id-link0"}
# The CUDA of the lock's torch wheel (PyPI's torch 2.11.0 is cu130) and the least NVIDIA driver it runs on.
TORCH_CUDA = "13.0"
MIN_NVIDIA_DRIVER = 580
# The shared library aws-ofi-nccl installs; NCCL_NET=ofi needs it on the loader path.
OFI_PLUGIN = "libnccl-net-ofi.so"


def model_overrides() -> list[str]:
    """verl Hydra overrides that load the actor (and its reference) with the image's attention."""
    return [
        # override_config is an empty mapping in verl's hf_model.yaml: a new key needs '+'.
        f"+actor_rollout_ref.model.override_config.attn_implementation={hydra_value(ATTENTION_IMPLEMENTATION)}",
        f"actor_rollout_ref.model.use_remove_padding={hydra_value(USE_REMOVE_PADDING)}",
    ]


def _ofi_plugin_present() -> bool:
    paths = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    paths += ["/usr/lib", "/usr/lib64", "/usr/local/lib", "/opt/amazon/ofi-nccl/lib", "/opt/amazon/ofi-nccl/lib64"]
    return any(glob.glob(os.path.join(path, OFI_PLUGIN)) for path in paths)


def image_problems(nccl_environment: dict[str, str] | None = None) -> list[str]:
    """What this Python environment lacks of the choices above (empty: the image can run them)."""
    problems: list[str] = []
    import torch  # noqa: PLC0415 - the image's torch, imported only when checking
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS  # noqa: PLC0415

    if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        problems.append(f"torch {torch.__version__} has no scaled_dot_product_attention (attention 'sdpa')")
    if ATTENTION_IMPLEMENTATION not in ALL_ATTENTION_FUNCTIONS:
        problems.append(f"transformers does not register attention '{ATTENTION_IMPLEMENTATION}'")
    if ATTENTION_IMPLEMENTATION.startswith("flash_attention") and importlib.util.find_spec("flash_attn") is None:
        problems.append(f"attention '{ATTENTION_IMPLEMENTATION}' needs flash_attn, which is not installed")
    cuda = torch.version.cuda
    if cuda is not None and cuda != TORCH_CUDA:
        problems.append(f"torch is built for CUDA {cuda}, not {TORCH_CUDA} (MIN_NVIDIA_DRIVER assumes {TORCH_CUDA})")
    network = (nccl_environment or NCCL_ENVIRONMENT).get("NCCL_NET", "")
    if network.lower() == "ofi" and not _ofi_plugin_present():
        problems.append(f"NCCL_NET=ofi needs the aws-ofi-nccl plugin ({OFI_PLUGIN}), which this image lacks")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    del argv
    problems = image_problems()
    for problem in problems:
        print(f"trainer image: {problem}", file=sys.stderr)
    if not problems:
        print(f"trainer image: attention {ATTENTION_IMPLEMENTATION}, NCCL_NET {NCCL_ENVIRONMENT['NCCL_NET']}: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
