"""helm and kubectl against the cluster: the commands an install runs, and the runner that runs them.

helm and kubectl come from the CDK kubectl layer (/opt/helm, /opt/kubectl). The runner talks to the cluster's API
endpoint (the private one by default: the function runs in the VPC, stacks/constructs/kubernetes_access.py) with a
short-lived IAM token and the cluster's CA, so it needs no kubeconfig and no AWS CLI.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

LOGGER = logging.getLogger()

HELM = os.environ.get("HELM_BINARY", "/opt/helm/helm")
KUBECTL = os.environ.get("KUBECTL_BINARY", "/opt/kubectl/kubectl")
# Seconds kept back from the Lambda deadline to report to CloudFormation even when helm overruns.
RESPONSE_MARGIN_S = 60

Runner = Callable[[Sequence[str]], str]


class HelmError(RuntimeError):
    """A helm command failed; the message carries its output."""


def set_flags(values: Mapping[str, Any]) -> list[str]:
    """``--set`` flags in a stable order; booleans become true/false as helm expects, a list one ``key[i]`` each."""
    flags: list[str] = []
    for key in sorted(values):
        value = values[key]
        items = [(f"{key}[{i}]", item) for i, item in enumerate(value)] if isinstance(value, list) else [(key, value)]
        for name, item in items:
            text = ("true" if item else "false") if isinstance(item, bool) else str(item)
            if "," in text or "\n" in text:
                raise ValueError(f"helm value for {key!r} must not contain ',' or newlines")
            flags += ["--set", f"{name}={text}"]
    return flags


def upgrade_install_command(
    *, release: str, namespace: str, chart_dir: str, values: Mapping[str, Any], timeout_s: int, skip_crds: bool = False
) -> list[str]:
    """``skip_crds``: the chart's crds/ were applied first (apply_crds), which, unlike helm, also upgrades them."""
    return [
        HELM,
        "upgrade",
        release,
        chart_dir,
        "--install",
        "--namespace",
        namespace,
        "--create-namespace",  # a release's own namespace (the KubeRay operator's); an existing one is left as it is
        "--history-max",
        "5",
        "--timeout",
        f"{max(timeout_s, 30)}s",
        *(["--skip-crds"] if skip_crds else []),
        *set_flags(values),
    ]


def apply_crds(run: Runner, chart_dir: Path) -> None:
    """Server-side apply of the chart's crds/: helm installs them once and never upgrades them, and the KubeRay CRDs
    exceed the size client-side apply's last-applied annotation allows."""
    crds = chart_dir / "crds"
    if not crds.is_dir() or not any(crds.glob("*.yaml")):
        raise ValueError("ApplyCrds is set but the chart has no crds/*.yaml")
    run([KUBECTL, "apply", "--server-side", "--force-conflicts", "--field-manager", "mtrl-helm", "-f", str(crds)])


def recover_pending_release(run: Runner, *, release: str, namespace: str) -> str | None:
    """Unblock a release an interrupted helm run left in pending-*; returns what was done (or None)."""
    try:
        status = json.loads(run([HELM, "status", release, "--namespace", namespace, "--output", "json"]))
    except HelmError as error:
        if "not found" in str(error).lower():
            return None
        raise
    state = str(status.get("info", {}).get("status", ""))
    if not state.startswith("pending"):
        return None
    revision = int(status.get("version", 1))
    if state == "pending-install" or revision <= 1:
        run([HELM, "uninstall", release, "--namespace", namespace, "--ignore-not-found"])
        return f"removed release stuck in {state}"
    run([HELM, "rollback", release, str(revision - 1), "--namespace", namespace])
    return f"rolled back release stuck in {state} to revision {revision - 1}"


def make_runner(
    *, endpoint: str, token: str, ca_file: str, env: Mapping[str, str], seconds_left: Callable[[], float]
) -> Runner:
    """Run helm against the cluster with an explicit API server, token and CA (no kubeconfig)."""

    def run(command: Sequence[str]) -> str:
        args = list(command)
        if args[0] == KUBECTL:
            args += ["--server", endpoint, "--token", token, "--certificate-authority", ca_file]
        elif args[1] not in {"dependency", "repo", "version"}:
            args += ["--kube-apiserver", endpoint, "--kube-token", token, "--kube-ca-file", ca_file]
        LOGGER.info("running: %s", " ".join(a for a in args if a != token))
        budget = seconds_left() - RESPONSE_MARGIN_S
        if budget < 10:
            raise TimeoutError("no time left before the Lambda deadline; CloudFormation may retry the update")
        completed = subprocess.run(args, capture_output=True, text=True, env=dict(env), timeout=budget, check=False)
        if completed.returncode != 0:
            raise HelmError(f"{' '.join(args[:3])} failed: {completed.stderr.strip() or completed.stdout.strip()}")
        return completed.stdout

    return run


def helm_env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.startswith(("AWS_", "LANG", "TZ"))}
    env.update(
        {
            "PATH": "/opt/helm:/opt/kubectl:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(workdir),
            "HELM_CACHE_HOME": str(workdir / ".cache"),
            "HELM_CONFIG_HOME": str(workdir / ".config"),
            "HELM_DATA_HOME": str(workdir / ".data"),
        }
    )
    return env
