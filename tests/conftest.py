"""Shared fixtures: one in-process synth of the default app per test session (jsii start-up is slow)."""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Rich sizes its output from COLUMNS (else 80 without a terminal) and wraps long paths mid-line, so what the CLI
# tests read depended on the checkout's path. A wide, fixed width for every console the tests create.
os.environ["COLUMNS"] = "250"
# Two test workers share two cores: a thread pool per process (torch, numpy's BLAS) can only oversubscribe them, and
# the tests' models are too small to split. One thread each, for the workers and every interpreter they start.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# An interpreter a test starts that crashes (a signal in a native library) prints its Python stack to stderr, which
# the tests include in their failure messages: an exit code of -11 alone says nothing about where.
os.environ.setdefault("PYTHONFAULTHANDLER", "1")
# The interpreters the tests start share one bytecode cache, outside the sources (as `make test` sets it: see the
# Makefile), so a staged Lambda asset a test imports never gains a __pycache__.
os.environ.setdefault("PYTHONPYCACHEPREFIX", str(Path(__file__).resolve().parent.parent / ".build" / "pycache"))

import pytest

# aws-cdk-lib, the settings and the stacks are imported where a fixture first needs them, not here: xdist's controller
# process loads this file too and runs no test, and importing aws_cdk starts a jsii engine (node loading aws-cdk-lib,
# about 13 CPU-s with the interpreter's share) that it would only have thrown away.
if TYPE_CHECKING:
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from stacks.app_builder import Deployment

# Every jsii engine of the suite runs on the Node LTS package.json pins (as the Makefile sets it); a checkout whose
# node_modules predates that pin still runs on the machine's node, whose end-of-life banner is then silenced.
_PINNED_NODE = Path(__file__).resolve().parent.parent / "node_modules" / ".bin" / "node"
if _PINNED_NODE.is_file():
    os.environ.setdefault("JSII_NODE", str(_PINNED_NODE))
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

# A test process holds millions of long-lived objects (aws-cdk-lib's bindings, botocore's models, moto, torch), and
# with the default thresholds (700, 10, 10) the collector walked them in thousands of collections: measured 9 of the
# 57 CPU-s of tests/integration/test_pipeline_serverless_backend.py. Fewer, larger young collections: 52 CPU-s, with
# about 10% more memory at its peak. Only when the collector runs changes, not what it frees.
gc.set_threshold(50_000, 20, 20)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Removes the synth outdirs killed runs left; in CI the emulator tests must run: a missing emulator is a set-up
    failure there, not a reason to skip."""
    from mtrl.emulator import find_emulator

    _remove_outdirs_of_dead_processes()
    if os.environ.get("CI") and find_emulator() is None:
        pytest.exit("CI: .venv-emulator is missing, so the emulator tests would be skipped (run `make emulator`)", 1)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slowest files first (tests/durations.py): every xdist worker collects the same order from the same table."""
    from tests.durations import load_table, slowest_first

    items[:] = [items[index] for index in slowest_first((item.nodeid for item in items), load_table())]


REPO_ROOT = Path(__file__).resolve().parent.parent
TEST_ACCOUNT = "123456789012"  # documentation placeholder account
TEST_REGION = "us-east-1"
TEST_ZONES = ["us-east-1a", "us-east-1b"]

# The interface endpoint services the network stack creates (stacks/constructs/network.py INTERFACE_ENDPOINTS).
ENDPOINT_SERVICES = ("ecr.api", "ecr.dkr", "sts", "logs", "sqs", "sagemaker.api", "sagemaker.runtime", "eks", "kms")


def endpoint_service_context_key(service: str) -> str:
    """The key of CDK's endpoint-service AZ lookup (InterfaceVpcEndpoint lookup_supported_azs) for one service."""
    return (
        f"endpoint-service-availability-zones:account={TEST_ACCOUNT}:region={TEST_REGION}"
        f":serviceName=com.amazonaws.{TEST_REGION}.{service}"
    )


# What the CDK CLI would pass: path metadata (cfn-lint recognises CDK output by it), the AZ lookup and the
# endpoint services' AZ lookups (here every service is offered in every AZ).
_CLI_CONTEXT: dict[str, Any] = {
    "aws:cdk:enable-path-metadata": True,
    f"availability-zones:account={TEST_ACCOUNT}:region={TEST_REGION}": [*TEST_ZONES, "us-east-1c"],
    **{endpoint_service_context_key(service): [*TEST_ZONES, "us-east-1c"] for service in ENDPOINT_SERVICES},
}


_TEMPORARY_OUTDIRS: list[str] = []


def _remove_temporary_outdirs() -> None:
    for path in _TEMPORARY_OUTDIRS:
        shutil.rmtree(path, ignore_errors=True)


atexit.register(_remove_temporary_outdirs)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # pytest-xdist workers end without running atexit handlers, so each process also cleans up here.
    _remove_temporary_outdirs()
    iam_model = sys.modules.get("tests.contract.iam.model")
    if iam_model is not None:
        iam_model._OUTDIRS.remove()


_OUTDIR_PREFIX = "mtrl-test-cdk.out-"


def _temporary_outdir() -> str:
    # The owner's pid in the name lets a later session remove what a killed run (no atexit, no sessionfinish) left.
    path = tempfile.mkdtemp(prefix=f"{_OUTDIR_PREFIX}{os.getpid()}-")
    _TEMPORARY_OUTDIRS.append(path)
    return path


def _remove_outdirs_of_dead_processes(*, older_than_seconds: float = 600) -> None:
    # Also older than ten minutes: a pid from another pid namespace sharing /tmp looks dead from here.
    cutoff = time.time() - older_than_seconds
    for path in Path(tempfile.gettempdir()).glob(f"{_OUTDIR_PREFIX}*-*"):
        owner = path.name.removeprefix(_OUTDIR_PREFIX).split("-", 1)[0]
        if not owner.isdigit() or path.stat().st_mtime > cutoff:
            continue  # not named by this scheme (not ours to judge), or too recent to judge
        try:
            os.kill(int(owner), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except PermissionError:
            pass  # alive, another user's


# The staged assets (cdk.out/asset.<hash>) this process's synths have copied, by name. A staged asset is named by
# the hash of its content, so every outdir holds the same one; linked into a new outdir, CDK finds it in place and
# skips the copy (the dependency layer alone is about 220 MB: about a third of each whole-app build).
_STAGED_ASSETS: dict[str, Path] = {}


def _link_staged_assets(outdir: Path) -> None:
    for name, staged in _STAGED_ASSETS.items():
        if staged.is_dir() and not os.path.lexists(outdir / name):
            (outdir / name).symlink_to(staged, target_is_directory=True)


def _remember_staged_assets(outdir: Path) -> None:
    for entry in outdir.iterdir():
        if entry.name.startswith("asset.") and entry.is_dir() and not entry.is_symlink():
            _STAGED_ASSETS.setdefault(entry.name, entry)


def make_app(overrides: Mapping[str, Any] | None = None, *, outdir: Path | None = None) -> tuple[cdk.App, Deployment]:
    """Build the whole app in-process with cdk.json context plus overrides (as `-c` would)."""
    import json

    import aws_cdk as cdk

    from mtrl.settings import DeploySettings, load_settings
    from stacks.app_builder import build_deployment

    file_context = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    context = {**file_context, "account": TEST_ACCOUNT, "region": TEST_REGION, **_CLI_CONTEXT, **(overrides or {})}
    # Without an outdir CDK synthesizes into a fresh /tmp/cdk.out* (about 220 MB of assets) that nothing removes:
    # over one suite run that filled the disk. Each test process removes its own at exit.
    target = outdir if outdir else Path(_temporary_outdir())
    target.mkdir(parents=True, exist_ok=True)
    _link_staged_assets(target)
    # aws-cdk-lib's built-in CloudFormation check only ever warns, and nothing here reads its warnings: starting its
    # engine cost each synth about 10 CPU-s. cfn-lint checks every template (test_compliance), cdk-nag still runs, and
    # the CLI synth tests (test_app_entrypoint) keep the check a user's `npx cdk synth` runs.
    app = cdk.App(context=context, outdir=str(target), builtin_cloud_formation_validation=False)
    settings: DeploySettings = load_settings(app.node.get_all_context(), environ={})
    deployment = build_deployment(app, settings)  # assets are staged as their constructs are created
    _remember_staged_assets(target)
    return app, deployment


@pytest.fixture(scope="session")
def app_factory() -> Callable[..., tuple[cdk.App, Deployment]]:
    return make_app


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> tuple[Deployment, cdk.cx_api.CloudAssembly]:
    """The default deployment, synthesized once (cdk-nag runs as part of this synth)."""
    app, deployment = make_app(outdir=tmp_path_factory.mktemp("cdk.out"))
    return deployment, app.synth()


@pytest.fixture(scope="session")
def deployment(synthesized: tuple[Deployment, Any]) -> Deployment:
    return synthesized[0]


@pytest.fixture(scope="session")
def data_template(deployment: Deployment) -> Template:
    from aws_cdk.assertions import Template

    return Template.from_stack(deployment.data)


@pytest.fixture(scope="session")
def network_template(deployment: Deployment) -> Template:
    from aws_cdk.assertions import Template

    assert deployment.network is not None  # only the emulator variant has no network stack
    return Template.from_stack(deployment.network)


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake identity in us-east-1, no user profile or endpoint (tests/aws_fixtures.py)."""
    from tests.aws_fixtures import use_fake_credentials

    use_fake_credentials(monkeypatch)


@pytest.fixture
def mocked_aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto's in-memory AWS for one test, under the fake identity: every call answered, no real account reachable."""
    from tests.aws_fixtures import fake_aws

    with fake_aws(monkeypatch):
        yield
