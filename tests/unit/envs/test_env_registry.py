"""The environment registry: discovery, loading, contract checks, the custom-env settings."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mtrl.envs import (
    EnvironmentNotFoundError,
    EpisodeResult,
    InvalidEnvironmentError,
    check_custom_environment,
    list_environments,
    load_spec,
)
from mtrl.settings import SettingsError, load_settings

REPO_ROOT = Path(__file__).resolve().parents[3]
BUILTINS = sorted(path.name for path in (REPO_ROOT / "environments").iterdir() if (path / "__init__.py").exists())


def _write_custom(root: Path, env_id: str, body: str) -> Path:
    directory = root / "custom-environments" / env_id
    directory.mkdir(parents=True)
    (directory / "__init__.py").write_text(textwrap.dedent(body), encoding="utf-8")
    return directory


GOOD_ENV = """
    from mtrl.contracts.environment import EpisodeResult, StepResult

    ENV_ID = "{env_id}"
    DESCRIPTION = "echo"
    EXAMPLE_TASK = {{"prompt": "say hi", "answer": "hi"}}
    EXAMPLE_ACTIONS = ["hi"]

    def validate_task(metadata):
        return [] if metadata.get("answer") else ["'answer' is required"]

    class Echo:
        def __init__(self):
            self.said = None
        @property
        def done(self):
            return self.said is not None
        def reset(self, task):
            self.answer = task["answer"]
            return task["prompt"]
        def step(self, action):
            self.said = action
            return StepResult("ok", True)
        def result(self):
            hit = float(self.said == self.answer)
            return EpisodeResult(reward=hit, components={{"hit": hit}}, success=bool(hit))

    def make_env(**kwargs):
        return Echo()

    def load_environment(**kwargs):
        return {{"a stand-in for": "the verifiers environment"}}
"""


def test_builtins_and_template_are_discovered() -> None:
    found = dict(list_environments())
    assert all(source == "builtin" for env_id, source in found.items() if env_id in BUILTINS)
    assert "template" not in found  # an example, not a deployable environment
    assert dict(list_environments(include_template=True))["template"] == "custom"


@pytest.mark.parametrize("env_id", [*BUILTINS, "template"])
def test_every_shipped_environment_passes_its_smoke_episode(env_id: str) -> None:
    spec = load_spec(env_id)
    assert spec.env_id == env_id
    assert spec.description
    assert spec.smoke_check() == []


def test_custom_environment_loads_from_its_directory(tmp_path: Path) -> None:
    _write_custom(tmp_path, "echo_env", GOOD_ENV.format(env_id="echo_env"))
    spec = load_spec("echo_env", root=tmp_path)
    assert spec.source == "custom"
    assert spec.validate_task({"prompt": "x"}) == ["'answer' is required"]
    _, result = spec.play({"prompt": "p", "answer": "yo"}, ["yo"])
    assert result == EpisodeResult(reward=1.0, components={"hit": 1.0}, success=True)
    assert check_custom_environment("echo_env", root=tmp_path) == []
    assert list_environments(root=tmp_path) == [("echo_env", "custom")]


def test_unknown_id_names_the_available_ones(tmp_path: Path) -> None:
    _write_custom(tmp_path, "echo_two", GOOD_ENV.format(env_id="echo_two"))
    with pytest.raises(EnvironmentNotFoundError, match=r"no environment 'nope'.*available: echo_two"):
        load_spec("nope", root=tmp_path)
    with pytest.raises(EnvironmentNotFoundError, match="not valid"):
        load_spec("../etc", root=tmp_path)
    assert "no environment 'nope'" in check_custom_environment("nope", root=tmp_path)[0]


def test_contract_violations_are_listed(tmp_path: Path) -> None:
    _write_custom(tmp_path, "half_done", 'ENV_ID = "other"\nDESCRIPTION = "x"\n')
    with pytest.raises(InvalidEnvironmentError) as caught:
        load_spec("half_done", root=tmp_path)
    assert "missing module attribute 'make_env'" in caught.value.problems
    assert "missing module attribute 'load_environment'" in caught.value.problems


def test_import_errors_and_bad_results_are_reported_not_raised(tmp_path: Path) -> None:
    _write_custom(tmp_path, "broken", "import does_not_exist_anywhere\n")
    problems = check_custom_environment("broken", root=tmp_path)
    assert len(problems) == 1
    assert "ModuleNotFoundError" in problems[0]

    nan_env = GOOD_ENV.format(env_id="nan_env").replace(
        'reward=hit, components={"hit": hit}', "reward=float('nan'), components={}"
    )
    _write_custom(tmp_path, "nan_env", nan_env)
    assert check_custom_environment("nan_env", root=tmp_path) == ["reward must be a finite number (got nan)"]


def test_metrics_list_has_typed_entries() -> None:
    result = EpisodeResult(reward=0.5, components={"a": 1.0}, metrics={"turns": 3.0}, success=False)
    assert result.metrics_list() == [
        {"name": "reward", "value": 0.5, "type": "Reward"},
        {"name": "a", "value": 1.0, "type": "Reward"},
        {"name": "turns", "value": 3.0, "type": "Metric"},
        {"name": "success", "value": 0.0, "type": "Metric"},
    ]


def test_custom_env_settings() -> None:
    assert load_settings({}, environ={}).use_custom_env is False
    chosen = load_settings({"use_custom_env": "true", "custom_env_id": "my_env"}, environ={})
    assert (chosen.use_custom_env, chosen.custom_env_id) == (True, "my_env")
    with pytest.raises(SettingsError, match=r"custom_env_id': required when use_custom_env is true"):
        load_settings({"use_custom_env": True}, environ={})
    with pytest.raises(SettingsError, match="custom_env_id"):
        load_settings({"custom_env_id": "My-Env"}, environ={})


def test_smoke_check_survives_hostile_plugins(tmp_path: Path) -> None:
    raising = GOOD_ENV.format(env_id="raising").replace(
        'return [] if metadata.get("answer") else ["\'answer\' is required"]', "raise KeyError('boom')"
    )
    _write_custom(tmp_path, "raising", raising)
    assert check_custom_environment("raising", root=tmp_path) == ["smoke episode raised KeyError: 'boom'"]
    stringy = GOOD_ENV.format(env_id="stringy").replace("reward=hit,", "reward='high',")
    _write_custom(tmp_path, "stringy", stringy)
    assert check_custom_environment("stringy", root=tmp_path) == ["reward must be a finite number (got 'high')"]


def test_use_custom_env_makes_the_custom_environment_the_run_environment() -> None:
    chosen = load_settings({"use_custom_env": "true", "custom_env_id": "template"}, environ={})
    assert chosen.run_environment == "template"  # the pipeline's Lambdas default runs to the served environment
    with pytest.raises(SettingsError, match=r"run_environment.*'wordle'.*custom_env_id 'template'"):
        load_settings({"use_custom_env": True, "custom_env_id": "template", "run_environment": "wordle"}, environ={})
    with pytest.raises(SettingsError, match=r"custom_env_id.*use_custom_env is false"):
        load_settings({"custom_env_id": "template"}, environ={})
