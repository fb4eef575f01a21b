"""A two-node Ray cluster on one machine, shaped as the RayJob's: a head with no GPU and a worker declaring one.

Each node is ``ray start --block`` (the real ``ray`` of ``.venv-verl``, the lock's 2.60.0) in a private mount namespace
(``unshare --mount``, root only) with its own tmpfs over every directory a pod has to itself: ``/tmp`` (Ray's session
directory, caches), the trainer's work directory ``/var/lib/mtrl-verl`` (``mtrl.backends.verl.train.WORK_DIR``), its
home, ``/dev/shm`` and, on the head, the ConfigMap's mount ``/etc/mtrl``. What one node writes there the other cannot
see: they share only the network (S3, the emulator, at 127.0.0.1) and the image (this checkout and ``.venv-verl``, the
same on every pod).

The job is submitted as KubeRay's submitter pod submits it (``ray job submit --address http://<head>:8265 --
<spec.entrypoint>``, KubeRay 1.7.0 ``ray-operator/controllers/ray/common/job.go``): the Ray job supervisor runs the
entrypoint on the head.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VERL_BIN = ROOT / ".venv-verl" / "bin"
WORK_DIR = "/var/lib/mtrl-verl"  # mtrl.backends.verl.train.WORK_DIR: the pod's own disk
CONFIG_DIR = "/etc/mtrl"  # the ConfigMap's mount (mtrl.backends.verl.rayjob.CONFIG_DIR), on the head
PRIVATE_DIRS = ("/tmp", WORK_DIR, "/dev/shm")
# Where a node keeps the image while its tmpfs mounts go up, when the checkout lies under one of them (a clone in
# /tmp, as CI's may be): outside every private directory, and only a mount point (mounts stay in the namespace).
IMAGE_HOLDER = Path("/var/tmp/mtrl-standin-image")


def _hidden_by_private_dirs(path: Path) -> bool:
    return any(path.is_relative_to(directory) for directory in PRIVATE_DIRS)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def can_isolate() -> bool:
    """Private mount namespaces need root (``unshare --mount``)."""
    if os.geteuid() != 0:
        return False
    return subprocess.run(["unshare", "--mount", "true"], check=False, capture_output=True).returncode == 0


def _node_script(ray_start: list[str], *, config_dir: Path | None) -> str:
    """The shell a node runs inside its namespace: tmpfs over its private directories, the ConfigMap's mount (a
    read-only bind of a folder the test writes, as the kubelet projects a ConfigMap from outside the pod), then Ray."""
    lines = ["set -eu"]
    image, holder = shlex.quote(str(ROOT)), shlex.quote(str(IMAGE_HOLDER))
    hidden = _hidden_by_private_dirs(ROOT)
    if hidden:  # the image (this checkout, .venv-verl) is the same on every pod: held aside, put back after the tmpfs
        IMAGE_HOLDER.mkdir(parents=True, exist_ok=True)
        lines.append(f"mount --bind {image} {holder}")
    if config_dir is not None:  # first: the folder may lie under /tmp, which the node's own tmpfs hides next
        lines.append(f"mkdir -p {CONFIG_DIR} && mount --bind {shlex.quote(str(config_dir))} {CONFIG_DIR}")
        lines.append(f"mount -o remount,bind,ro {CONFIG_DIR}")
    for directory in PRIVATE_DIRS:
        lines.append(f"mkdir -p {directory} && mount -t tmpfs -o mode=1777 tmpfs {directory}")
    if hidden:
        lines.append(f"mkdir -p {image} && mount --bind {holder} {image}")
    lines.append("mkdir -p /tmp/home")
    lines.append("exec " + shlex.join(ray_start))
    return "\n".join(lines)


@dataclass
class Node:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            # The node's own process group (started with start_new_session): ray start, GCS, raylet, workers.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


@dataclass
class Cluster:
    """The head (no GPU) and one worker (one logical GPU), with the environment every pod of the RayJob gets."""

    environment: dict[str, str]
    logs: Path
    config_dir: Path | None = None  # what the head sees at /etc/mtrl (the ConfigMap's run.json)
    gcs_port: int = field(default_factory=free_port)
    dashboard_port: int = field(default_factory=free_port)
    nodes: list[Node] = field(default_factory=list)

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def _env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {
            **self.environment,
            "PATH": f"{VERL_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": "/tmp/home",
            "RAY_USAGE_STATS_ENABLED": "0",
            **(extra or {}),
        }

    def _start(self, name: str, ray_args: list[str], config_dir: Path | None) -> Node:
        ray_start = [str(VERL_BIN / "ray"), "start", "--block", "--disable-usage-stats", *ray_args]
        script = _node_script(ray_start, config_dir=config_dir)
        log = self.logs / f"{name}.log"
        process = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            env=self._env(),
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd="/",
        )
        node = Node(name, process, log)
        self.nodes.append(node)
        return node

    def start(self, *, worker_gpus: int = 1, timeout_s: float = 90.0) -> None:
        # Ports of their own for everything a node listens on: two raylets share this machine's network.
        def own_ports() -> list[str]:
            return [
                f"--node-manager-port={free_port()}",
                f"--object-manager-port={free_port()}",
                f"--metrics-export-port={free_port()}",
                f"--dashboard-agent-listen-port={free_port()}",
                f"--dashboard-agent-grpc-port={free_port()}",
                f"--runtime-env-agent-port={free_port()}",
                "--min-worker-port=0",
                "--max-worker-port=0",
                "--object-store-memory=300000000",
            ]

        head = [
            "--head",
            f"--port={self.gcs_port}",
            "--num-gpus=0",  # as the RayJob's head (rayStartParams num-gpus: "0")
            "--num-cpus=2",
            "--include-dashboard=true",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={self.dashboard_port}",
            f"--ray-client-server-port={free_port()}",
            *own_ports(),
        ]
        self._start("head", head, self.config_dir)
        self._wait_for_dashboard(timeout_s)
        worker = [f"--address=127.0.0.1:{self.gcs_port}", f"--num-gpus={worker_gpus}", "--num-cpus=4", *own_ports()]
        self._start("worker", worker, None)
        self._wait_for_nodes(2, timeout_s)

    def _wait_for_dashboard(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._check_alive()
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.dashboard_port), 1):
                return
            time.sleep(1)
        raise TimeoutError(f"the head's dashboard did not start in {timeout_s} s: {self.tail('head')}")

    def alive_nodes(self) -> list[dict[str, object]]:
        """The cluster's live nodes, from the head's state API (a driver outside the nodes' namespaces cannot attach
        to a raylet: its socket lives in the node's own /tmp)."""
        with urllib.request.urlopen(f"{self.dashboard}/api/v0/nodes?limit=100", timeout=10) as response:
            body = json.load(response)
        nodes: list[dict[str, object]] = body["data"]["result"]["result"]
        return [node for node in nodes if node.get("state") == "ALIVE"]

    def node_ids(self) -> dict[str, list[object]]:
        """The live nodes' ids by role: ``head`` and ``worker``."""
        nodes = self.alive_nodes()
        return {
            "head": [n["node_id"] for n in nodes if n.get("is_head_node")],
            "worker": [n["node_id"] for n in nodes if not n.get("is_head_node")],
        }

    def _wait_for_nodes(self, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._check_alive()
            with contextlib.suppress(OSError, KeyError, ValueError):
                if len(self.alive_nodes()) >= count:
                    return
            time.sleep(1)
        raise TimeoutError(f"{count} Ray nodes did not join in {timeout_s} s: {self.tail('worker')}")

    def _check_alive(self) -> None:
        for node in self.nodes:
            if node.process.poll() is not None:
                raise RuntimeError(f"Ray node {node.name} exited ({node.process.returncode}): {self.tail(node.name)}")

    def tail(self, name: str, chars: int = 3000) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def submit(
        self, entrypoint: str, *, timeout_s: float, env_vars: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``ray job submit`` of the entrypoint (``env_vars``: the job's runtime environment), waiting for its end; its
        output is the job's log."""
        runtime = ["--runtime-env-json", json.dumps({"env_vars": dict(env_vars)})] if env_vars else []
        command = [str(VERL_BIN / "ray"), "job", "submit", f"--address={self.dashboard}", *runtime, "--"]
        return subprocess.run(
            [*command, *shlex.split(entrypoint)],
            env=self._env(),
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout_s,
            cwd="/",
        )

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()


@contextlib.contextmanager
def running_cluster(cluster: Cluster, **start: float | int) -> Iterator[Cluster]:
    try:
        cluster.start(**start)  # type: ignore[arg-type]
        yield cluster
    finally:
        cluster.stop()
