"""The Nova Forge contract tests' fakes (fakeenv/, bin/) and what their .venv-nova interpreters import once."""

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
