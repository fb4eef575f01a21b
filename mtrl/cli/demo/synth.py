"""Step 1: the app's emulator variant synthesized with the project's CDK CLI, reused while its inputs are unchanged."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

from rich.console import Console

from mtrl.cli.demo import REPO_ROOT
from mtrl.cli.demo.plan import DemoError

# The demo's deployment: the emulator variant, its training polled every second instead of every few minutes (a
# poll of the local backend trains the next slice, so a longer wait only idles).
SYNTH_CONTEXT = {
    "emulator": "true",
    "status_poll_seconds": "1",
    "slot_poll_seconds": "2",
    "slot_max_wait_minutes": "10",
    "run_timeout_minutes": "30",
}

# What the CDK CLI would spend on the demo's offline synth for nothing it shows: the notices download and the
# telemetry upload (both need the network), and aws-cdk-lib's built-in CloudFormation check, whose findings are
# only ever warnings (~10 s of CPU to start its engine; cdk-nag, the check that fails a synth, still runs).
SYNTH_ENVIRONMENT = {
    "CDK_DISABLE_CLI_TELEMETRY": "true",
    "CDK_VALIDATION": "false",
}
# The Node LTS package.json pins ("node"), which `make setup` installs; the CLI and the app's jsii engine run on it.
PINNED_NODE = REPO_ROOT / "node_modules" / ".bin" / "node"


def node_environment(environ: dict[str, str]) -> dict[str, str]:
    """``environ`` with the pinned Node first on PATH and as jsii's engine (JSII_NODE); unchanged without it."""
    if not PINNED_NODE.is_file():
        return environ
    return {
        **environ,
        "PATH": f"{PINNED_NODE.parent}{os.pathsep}{environ.get('PATH', '')}",
        "JSII_NODE": str(PINNED_NODE),
    }


def cdk_command() -> list[str]:
    """The project's CDK CLI (``node_modules/.bin/cdk``, what ``npx cdk`` resolves to, without npx's start-up), on the
    pinned Node when it is installed."""
    local = REPO_ROOT / "node_modules" / ".bin" / "cdk"
    if local.is_file():
        return [str(PINNED_NODE), str(local)] if PINNED_NODE.is_file() else [str(local)]
    npx = shutil.which("npx")
    if npx is None:
        raise DemoError("npx not found: install Node.js 20+ and run `make setup`")
    return [npx, "cdk"]


# What the synth reads: a work directory's cdk.out synthesized from the same files, settings and pinned tools is
# reused (a second `mtrl demo` in the same work directory deploys it again without synthesizing it again).
SYNTH_INPUTS = (
    "app.py",
    "cdk.json",
    "cdk.context.json",
    "package-lock.json",
    "requirements",
    "stacks",
    "statemachine",
    "lambda",
    "mtrl",
    "environments",
    "custom-environments",
)
BUILT_INPUTS = (".build/lambda-deps",)  # made by `make setup`; identified by name, size and time (171 MB)
SYNTH_STAMP = "mtrl-demo-inputs.sha256"


def synth_inputs_digest(root: Path = REPO_ROOT) -> str:
    """A digest of everything the demo's synth depends on: sources, pinned tools, context and the environment."""
    digest = hashlib.sha256()
    environment = sorted((k, v) for k, v in os.environ.items() if k.startswith(("CDK_", "MTRL_", "AWS_", "JSII_")))
    digest.update(json.dumps([SYNTH_CONTEXT, SYNTH_ENVIRONMENT, environment, cdk_command()]).encode())
    for name in (*SYNTH_INPUTS, *BUILT_INPUTS):
        top = root / name
        for path in [top] if top.is_file() else sorted(top.rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            if name in BUILT_INPUTS:
                stat = path.stat()
                content = f"{stat.st_size} {stat.st_mtime_ns}".encode()
            else:
                content = path.read_bytes()
            digest.update(str(path.relative_to(root)).encode() + b"\0" + content + b"\0")
    return digest.hexdigest()


def synthesize(out_dir: Path, console: Console) -> None:
    shown = out_dir.relative_to(REPO_ROOT) if out_dir.is_relative_to(REPO_ROOT) else out_dir
    inputs = synth_inputs_digest()
    stamp = out_dir / SYNTH_STAMP
    if stamp.is_file() and stamp.read_text(encoding="utf-8") == inputs:
        console.print(f"    {shown} was synthesized from these same sources and settings: deploying it as it is")
        return
    command = [*cdk_command(), "synth", "--quiet", "--no-notices", "-o", str(out_dir)]
    for key, value in SYNTH_CONTEXT.items():
        command += ["-c", f"{key}={value}"]
    env = node_environment({**os.environ, **SYNTH_ENVIRONMENT})
    env.pop("CDK_DEFAULT_ACCOUNT", None)
    shutil.rmtree(out_dir, ignore_errors=True)
    completed = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise DemoError(f"cdk synth failed:\n{completed.stderr[-3000:]}")
    stamp.write_text(inputs, encoding="utf-8")
    templates = sorted(path.name for path in out_dir.glob("*.template.json"))
    console.print(f"    synthesized {', '.join(templates)} into {shown}")
