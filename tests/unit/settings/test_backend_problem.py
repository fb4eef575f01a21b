"""Which backends a deployment can run (``DeploySettings.backend_problem``), from their descriptors only: the stacks
deploy nothing of the others (stacks.backends.contract.deployed_sides), and each problem names the setting to change."""

from __future__ import annotations

from mtrl.settings import load_settings


def test_the_default_deployment_runs_every_backend_but_hyperpod() -> None:
    settings = load_settings({}, environ={})
    for backend in ("verl", "serverless", "sessions", "local"):
        assert settings.backend_problem(backend) is None, backend
    problem = settings.backend_problem("hyperpod")
    assert problem is not None
    assert "hyperpod_restricted_instance_group is not set" in problem


def test_a_restricted_instance_group_makes_hyperpod_runnable() -> None:
    settings = load_settings({"hyperpod_restricted_instance_group": {}}, environ={})
    assert settings.backend_problem("hyperpod") is None


def test_without_a_cluster_neither_cluster_backend_is_runnable() -> None:
    settings = load_settings({"deployment_profile": "serverless"}, environ={})
    for backend in ("verl", "hyperpod"):
        problem = settings.backend_problem(backend)
        assert problem is not None, backend
        assert "deploy_cluster=true" in problem, backend
    for backend in ("serverless", "sessions", "local"):
        assert settings.backend_problem(backend) is None, backend
