"""Contract-tier fixtures: the whole app synthesized once per session as an IAM model (see iam_contract.py), and one
.venv-nova interpreter the Nova Forge package checks fork from."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.contract.forked_runs import ForkServer
from tests.contract.iam_contract import AppModel
from tests.contract.nova import NOVA_SDK_PRELOAD, bytecode_cache
from tests.contract.tier import skip_or_fail

NOVA_PYTHON = Path(__file__).resolve().parents[2] / ".venv-nova" / "bin" / "python"


@pytest.fixture(scope="session")
def app_model() -> AppModel:
    return AppModel.synth()


# A deployment that configures Nova Forge (a restricted instance group, its defaults): only it has the hyperpod
# backend's runner task (stacks/backends_stack.py), so the hyperpod backend's contract runs against it.
NOVA_FORGE_OVERRIDES = {"hyperpod_restricted_instance_group": {}}


@pytest.fixture(scope="session")
def nova_app_model() -> AppModel:
    return AppModel.synth(overrides=NOVA_FORGE_OVERRIDES)


@pytest.fixture(scope="session")
def nova_package_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    """.venv-nova's interpreter started as the package checks start it (only PATH and a HOME of its own, ``-W
    ignore``), with the suite's bytecode cache; each check is a fork of it with its own environment and folder. A
    missing .venv-nova fails in CI and skips elsewhere."""
    if not NOVA_PYTHON.exists():
        skip_or_fail(".venv-nova is missing (make nova)")
    home = tmp_path_factory.mktemp("nova-package-parent")
    with ForkServer(
        NOVA_PYTHON,
        preload=NOVA_SDK_PRELOAD,
        env={"PATH": os.environ["PATH"], "HOME": str(home), **bytecode_cache()},
        cwd=home,
        options=("-W", "ignore"),
    ) as server:
        yield server
