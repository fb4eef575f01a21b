"""The runtime a pipeline function builds from its environment: built once, a registry per invocation."""

from __future__ import annotations

import pytest

from mtrl.runs.runtime import ENV_BUCKET, ENV_TABLE, runtime_from_env
from mtrl.settings.pipeline import PIPELINE_SETTINGS_ENV, PipelineSettings


@pytest.fixture
def environ(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return {ENV_TABLE: "runs", ENV_BUCKET: "data", PIPELINE_SETTINGS_ENV: PipelineSettings().model_dump_json()}


def test_each_invocation_shares_the_clients_and_gets_a_registry_of_its_own(environ: dict[str, str]) -> None:
    first, second = runtime_from_env(environ), runtime_from_env(environ)
    assert first.dynamodb is second.dynamodb  # built once per configuration
    assert first.s3 is second.s3
    assert first.registry is first.registry  # one registry for all of an invocation's phases and adapters
    assert first.registry is not second.registry  # nothing one invocation saw of a record reaches the next
    assert runtime_from_env(environ).registry is not second.registry


def test_a_function_missing_its_environment_says_what_is_missing(environ: dict[str, str]) -> None:
    del environ[ENV_TABLE]
    with pytest.raises(RuntimeError, match=ENV_TABLE):
        runtime_from_env(environ)
