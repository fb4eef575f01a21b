"""The Nova Forge contract tests' fakes (fakeenv/, bin/) and what their .venv-nova interpreters import once."""

import os

# Third-party libraries the SDK imports besides itself (about three quarters of a runner's start-up), imported once by
# the forking parent (tests/contract/forked_runs.py). None reads the environment a run sets or calls AWS at import;
# the SDK (amzn_nova_forge) and mtrl are imported by each run, after the runner has made its telemetry choice.
NOVA_SDK_PRELOAD = (
    "boto3",
    "sagemaker",
    "pandas",
    "matplotlib.pyplot",
    "sagemaker.train.model_trainer",
    "sagemaker.core.jumpstart",
    "graphene",
    "omegaconf",
)


def bytecode_cache() -> dict[str, str]:
    """The environment entry that gives a .venv-nova interpreter the suite's one bytecode cache (PYTHONPYCACHEPREFIX,
    set by the Makefile and tests/conftest.py): the SDK's modules compile once, not in every interpreter, and nothing
    is written into the venv or the checkout. Without a prefix, no bytecode is written at all."""
    prefix = os.environ.get("PYTHONPYCACHEPREFIX")
    return {"PYTHONPYCACHEPREFIX": prefix} if prefix else {"PYTHONDONTWRITEBYTECODE": "1"}
