"""What a deployment's verl runs need that the deploy itself does not supply (a trainer image, a model), and the one
command that supplies each. No dependencies: ``mtrl render``, the synth and Preflight's plan all say it the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

IMAGE_NAMES = ("verl",)  # the images the stack's builder builds (docker/verl-trainer)
BUILD_IMAGE_COMMAND = "mtrl image build verl"
IMPORT_MODEL_COMMAND = "mtrl model import <hub-id>[@revision]"


def _with_prefix(command: str, prefix: str) -> str:
    return command if prefix == "mtrl" else f"{command} --prefix {prefix}"


def missing_steps(*, prefix: str, image_uri: str | None, models: Sequence[Any]) -> list[str]:
    """What a deployment's verl runs still lack, each with the one command that supplies it."""
    missing = []
    if not image_uri:
        missing.append(
            f"no verl trainer image: build it in the account with `{_with_prefix(BUILD_IMAGE_COMMAND, prefix)}` "
            "(or set verl_image_uri)"
        )
    if not models:
        missing.append(
            "no model verl runs may train: copy one into the deployment's bucket with "
            f"`{_with_prefix(IMPORT_MODEL_COMMAND, prefix)}` (add --from DIR for a local copy; or set verl_models)"
        )
    return missing


# What the stack's builders are called and where they read and write (stacks/constructs/image_builder.py creates them;
# the CLI finds them by these names).
IMAGE_DOCKERFILE = "docker/verl-trainer/Dockerfile"
SOURCE_PREFIX = "image-builds/"  # the source archives the CLI uploads, one per build (content-addressed)
MODELS_PREFIX = "models/"  # the model copies: models/<owner>/<name>/<revision>/ with their SHA256SUMS


def image_repository_name(prefix: str) -> str:
    return f"{prefix}-verl-trainer"


def image_project_name(prefix: str) -> str:
    return f"{prefix}-verl-trainer-image"


def model_project_name(prefix: str) -> str:
    return f"{prefix}-model-import"
