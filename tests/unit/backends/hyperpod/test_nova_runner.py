"""The Nova Forge runner's packaging and its parts that need no SDK. The runner's behaviour against the real SDK is
tested in tests/contract/test_nova_runner_contract.py (in .venv-nova); nothing here imitates the SDK."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from aws_fakes import REGION, FakeAws
from test_nova_runner_image import dockerfile_instructions

from mtrl.backends.hyperpod import nova_runner

ROOT = Path(__file__).resolve().parents[4]
DOCKERFILE = (ROOT / "docker/nova-runner/Dockerfile").read_text()
LOCK = (ROOT / "requirements/nova-runner.txt").read_text()
BUCKET = "mtrl-data-123456789012"


def test_importing_the_runner_does_not_import_the_sdk() -> None:
    code = "import sys, mtrl.backends.hyperpod.nova_runner; print('amzn_nova_forge' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_only_the_runner_module_imports_the_sdk() -> None:
    # Issue 10 §3: the SDK is deprecated; confining it to one module keeps a replacement to one file.
    importers = [
        str(path.relative_to(ROOT))
        for top in ("mtrl", "stacks", "lambda", "environments", "app.py")
        for path in ([ROOT / top] if top.endswith(".py") else (ROOT / top).rglob("*.py"))
        if re.search(r"^\s*(from|import)\s+amzn_nova_forge", path.read_text(), re.MULTILINE)
    ]
    assert importers == ["mtrl/backends/hyperpod/nova_runner.py"]


def test_the_image_installs_exactly_the_lock_the_contract_venv_uses() -> None:
    # Same files, same pins: the Makefile's `nova` target installs nova-runner.txt --no-deps, then mtrl --no-deps.
    # (The CLI's install runs with PATH prefixed by a refusing `git`: docker/nova-runner/Dockerfile says why.)
    runs = [line.removeprefix("RUN ") for line in dockerfile_instructions() if line.startswith("RUN ")]
    pip_installs = [cmd for line in runs for cmd in re.split(r"&&", line) if "pip install" in cmd]
    assert [re.sub(r"^PATH=\S+ ", "", " ".join(cmd.split())) for cmd in pip_installs] == [
        "pip install --no-deps --requirement requirements/nova-runner.txt",
        "pip install --no-deps /opt/hyperpod-cli",
        "pip install --no-deps .",
    ]
    makefile = (ROOT / "Makefile").read_text()
    assert "--no-deps -r requirements/nova-runner.txt" in makefile
    assert "amzn-nova-forge==" not in DOCKERFILE  # the pin lives in the lock only
    assert re.search(r"^amzn-nova-forge==1\.4\.10\b", LOCK, re.MULTILINE)


def test_the_sdk_pin_was_contract_tested() -> None:
    # The contract test writes the SDK version it passed against to tests/contract/nova/sdk_version.json; a pin
    # change without a contract run leaves the two different.
    recorded = json.loads((ROOT / "tests/contract/nova/sdk_version.json").read_text())["amzn-nova-forge"]
    pinned = re.search(r"^amzn-nova-forge==(\S+)", LOCK, re.MULTILINE)
    assert pinned is not None
    assert recorded == pinned.group(1), "rerun tests/contract/test_nova_runner_contract.py against the new pin"


def test_the_hyperpod_cli_readme_no_longer_claims_submit_works_without_it() -> None:
    readme = (ROOT / "docker/nova-runner/hyperpod-cli/README.md").read_text()
    assert "setup` and `submit` work" not in readme
    assert "build fails without it" in readme


@pytest.mark.parametrize(("opt_in", "expected"), [(False, "true"), (True, "false")])
def test_telemetry_is_opted_out_unless_the_run_opts_in(opt_in: bool, expected: str) -> None:
    environ: dict[str, str] = {}
    nova_runner.apply_telemetry_choice({"nova_forge_telemetry": opt_in}, environ)
    assert environ == {"TELEMETRY_OPT_OUT": expected}


def test_status_without_a_submitted_job_is_a_clear_error(aws: FakeAws) -> None:
    aws.session.client("s3").create_bucket(Bucket=BUCKET)
    spec = {"run_id": "r1", "region": REGION, "result_prefix": f"s3://{BUCKET}/runs/r1/backend"}
    context = nova_runner.Context(aws.session, spec)
    with pytest.raises(RuntimeError, match="no submitted HyperPod job"):
        nova_runner.recorded_job_name(spec, context)
    context.write_result("submit", {"ok": True, "result": {"job_name": "mtrl-abc-1f2"}})
    assert nova_runner.recorded_job_name(spec, context) == "mtrl-abc-1f2"
    assert nova_runner.recorded_job_name({**spec, "job_name": "given"}, context) == "given"


def test_unknown_command_is_a_usage_error(aws: FakeAws) -> None:
    with pytest.raises(SystemExit) as caught:
        nova_runner.main(["train", "--spec", "s3://b/k"], session=aws.session)
    assert caught.value.code == 2
