"""The verl descriptor's ``readiness`` hook: what a deployment whose default backend is verl still lacks.

Offline (the synth, ``mtrl config show``) only the settings count; given an SSM client (``mtrl submit``) what the
deployment registered after deploy counts too (mtrl.backends.verl.catalog, loaded only then: it needs the AWS SDK).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mtrl.backends.verl.supply import missing_steps

if TYPE_CHECKING:
    from mtrl.settings.deploy import DeploySettings


def readiness(settings: DeploySettings, ssm: Any | None = None) -> list[str]:
    """The descriptor's ``readiness`` hook: what the deployment's verl runs still lack (its settings, and with an SSM
    client what it has registered), each naming the command that supplies it; empty when runs can start."""
    values: dict[str, Any] = {
        "verl_image_uri": settings.verl_image_uri,
        "verl_models": [model.model_dump(mode="json") for model in settings.verl_models],
    }
    if ssm is not None:
        from mtrl.backends.verl.catalog import read_catalog, with_registered  # noqa: PLC0415 (needs the AWS SDK)

        values = with_registered(values, read_catalog(ssm, settings.prefix))
    return missing_steps(prefix=settings.prefix, image_uri=values["verl_image_uri"], models=values["verl_models"])
