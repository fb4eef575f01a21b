"""The backend registry: the built-ins' descriptors, the one registration call, names checked against it, and reading
a descriptor staying cheap (no SDK, no models) so start-up and the settings layer can ask it."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path

import pytest

from mtrl.contracts.descriptor import BackendDescriptor, resolve
from mtrl.contracts.errors import ConfigurationError
from mtrl.contracts.registry import (
    BUILTIN_BACKENDS,
    UnknownBackendError,
    backend_names,
    check_backend_name,
    descriptor_for,
    register_backend,
    unregister_backend,
)
from mtrl.contracts.run_options import RunOptions, run_options_model
from mtrl.runs.adapters import adapter_for
from mtrl.settings.pipeline import PipelineSettings

REPO = Path(__file__).resolve().parents[3]
HOOKS = [f.name for f in fields(BackendDescriptor) if f.name not in {"name", "baseline", "no_baseline"}]
HOOKS.remove("needs_reward_workers")
HOOKS.remove("needs_cluster")

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_the_built_in_backends_are_the_backend_packages() -> None:
    # Every package under mtrl/backends/ with a descriptor is registered, and nothing else (a backend is its package
    # plus its one registration line).
    packages = {path.parent.name for path in (REPO_ROOT / "mtrl" / "backends").glob("*/descriptor.py")}
    assert set(backend_names()) == {*packages, "local"}
    assert backend_names()[0] == "verl"  # the default backend first
    for name in backend_names():
        assert descriptor_for(name).name == name


@pytest.mark.parametrize("name", list(BUILTIN_BACKENDS))
def test_every_hook_a_built_in_descriptor_names_exists(name: str) -> None:
    # A typo in a "module:attribute" string would otherwise surface only when a run of that backend needs it.
    descriptor = descriptor_for(name)
    for hook in HOOKS:
        target = getattr(descriptor, hook)
        if target is not None:
            assert callable(resolve(target)), (name, hook, target)
    assert issubclass(run_options_model(name), RunOptions)


def test_what_each_built_in_declares() -> None:
    assert {n for n in backend_names() if descriptor_for(n).needs_reward_workers} == {"hyperpod"}
    assert {n for n in backend_names() if descriptor_for(n).needs_cluster} == {"verl", "hyperpod"}
    assert {n for n in backend_names() if descriptor_for(n).baseline is None} == {"hyperpod"}
    assert {n for n in backend_names() if (b := descriptor_for(n).baseline) and b.phase} == {"serverless"}
    assert {n for n in backend_names() if descriptor_for(n).renderer} == {"verl"}
    # Every built-in prices its runs, and before they start (a budgeted run is refused at Preflight otherwise).
    assert {n for n in backend_names() if descriptor_for(n).cost is None} == set()
    assert {n for n in backend_names() if descriptor_for(n).budget_usage is None} == set()
    assert {n for n in backend_names() if descriptor_for(n).deploy_check} == {"hyperpod"}
    assert {n for n in backend_names() if descriptor_for(n).manifest_check} == {"serverless", "verl"}


def test_an_unknown_name_is_refused_with_the_registered_names() -> None:
    with pytest.raises(UnknownBackendError, match=r"unknown backend 'tpu' \(registered backends: verl, hyperpod"):
        check_backend_name("tpu")
    with pytest.raises(UnknownBackendError):
        descriptor_for("tpu")
    with pytest.raises(ConfigurationError, match="unknown backend 'tpu'"):
        adapter_for("tpu")
    with pytest.raises(ValueError, match=r"setting 'run_backend'|unknown backend 'tpu'"):
        PipelineSettings.model_validate({"run_backend": "tpu"})


def test_registering_adds_a_name_everywhere_and_unregistering_removes_it() -> None:
    toy = BackendDescriptor(name="toy2", adapter="tests.unit.backends.toy.adapter:ToyAdapter")
    register_backend(toy)
    try:
        assert backend_names()[-1] == "toy2"
        assert descriptor_for("toy2") is toy
        assert PipelineSettings.model_validate({"run_backend": "toy2"}).run_backend == "toy2"
        assert run_options_model("toy2") is RunOptions  # declares none: takes none
    finally:
        unregister_backend("toy2")
    with pytest.raises(UnknownBackendError, match="unknown backend 'toy2'"):
        descriptor_for("toy2")


def test_a_registration_replaces_a_built_in_until_it_is_removed() -> None:
    builtin = descriptor_for("local")
    register_backend(replace(builtin, needs_reward_workers=True))
    try:
        with pytest.raises(ValueError, match="reward workers cannot score a rollout"):
            PipelineSettings.model_validate({"run_backend": "local", "run_worker_count": 0})
    finally:
        unregister_backend("local")
    assert descriptor_for("local") is builtin
    assert PipelineSettings.model_validate({"run_backend": "local", "run_worker_count": 0}).run_worker_count == 0


def test_only_a_descriptor_can_be_registered() -> None:
    with pytest.raises(TypeError, match="takes a BackendDescriptor"):
        register_backend({"name": "dict"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="is not 'module:attribute'"):
        resolve("no.colon.here")


def test_reading_a_descriptor_loads_no_sdk_no_models_and_no_other_backend() -> None:
    code = (
        "import json, sys\n"
        "from mtrl.contracts.registry import backend_names, descriptor_for\n"
        "[descriptor_for(n) for n in ('verl', 'serverless', 'local')]\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    modules = set(json.loads(out.stdout))
    heavy = {"boto3", "botocore", "pydantic", "mtrl.backends.hyperpod", "mtrl.backends.serverless.adapter"}
    assert {m for m in modules if any(m == h or m.startswith(h + ".") for h in heavy)} == set()
    assert "mtrl.backends.serverless.descriptor" in modules
