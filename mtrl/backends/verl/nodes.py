"""The Ray nodes of a verl run and the S3 trees between them: each pod has its own disk, so what one node writes
reaches another only through S3 (inputs out to every node, checkpoints back, the merged model up)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class TrainError(RuntimeError):
    """The run cannot be trained (the message names the run and what to fix)."""


NODE_WAIT_S = 600.0  # how long the entrypoint waits for the run's GPU nodes to join the Ray cluster


def node_id() -> str:
    try:
        import ray  # noqa: PLC0415 - the image's library

        return str(ray.get_runtime_context().get_node_id()) if ray.is_initialized() else "local"
    except ImportError:
        return "local"


def on_a_cluster() -> bool:
    """Inside a Ray job (the RayJob's entrypoint): the job supervisor sets RAY_ADDRESS."""
    return bool(os.environ.get("RAY_ADDRESS"))


def cluster_nodes(*, gpu_nodes: int, timeout_s: float = NODE_WAIT_S) -> list[dict[str, Any]]:
    """The cluster's live nodes once ``gpu_nodes`` of them hold a GPU (KubeRay may start the job before every worker
    pod has joined); TrainError naming the count after ``timeout_s``."""
    import ray  # noqa: PLC0415 - the image's library

    deadline = time.monotonic() + timeout_s
    while True:
        alive = [node for node in ray.nodes() if node.get("Alive")]
        if sum(1 for node in alive if node.get("Resources", {}).get("GPU", 0) > 0) >= gpu_nodes:
            return alive
        if time.monotonic() > deadline:
            raise TrainError(
                f"only {len(alive)} Ray nodes joined in {timeout_s:.0f} s; the run needs {gpu_nodes} with GPUs"
            )
        time.sleep(2)


def run_on_nodes(function: Any, node_ids: Sequence[str], *args: Any) -> list[Any]:
    """``function(*args)`` once on each of these Ray nodes (pinned: NodeAffinitySchedulingStrategy, soft=False)."""
    import ray  # noqa: PLC0415 - the image's library
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415

    remote = ray.remote(num_cpus=0)(function)
    return list(
        ray.get(
            [
                remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote(*args)
                for node_id in node_ids
            ]
        )
    )


def run_on_node(function: Any, node: str, *args: Any, timeout_s: float) -> Any:
    """``function(*args)`` on one Ray node (pinned, as ``run_on_nodes``), waiting at most ``timeout_s``: a
    ``ray.exceptions.GetTimeoutError`` after that (the task is cancelled), or the task's own error."""
    import ray  # noqa: PLC0415 - the image's library
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415

    remote = ray.remote(num_cpus=0, max_retries=0)(function)
    pending = remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(*args)
    try:
        return ray.get(pending, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        ray.cancel(pending, force=True)
        raise


def actor_node(class_name: str, pid: int, ip: str | None) -> tuple[str | None, str]:
    """(the Ray node id of the actor of ``class_name`` whose process is ``pid``, how it was found — or None and why).

    First the state API (the head's dashboard: each actor's class, pid and node). Then what Ray's log prefix says
    (``ray/_private/worker.py`` ``print_worker_logs``): ``ip=A`` appears only when the actor's node address differs from
    the driver's, so without it the actor shares the driver's node — verl's ``main_ppo``, started on this node — and
    with it, the one live node at that address."""
    import ray  # noqa: PLC0415 - the image's library

    try:
        from ray.util.state import list_actors  # noqa: PLC0415 - ray[default], the image's

        address = str(ray.get_runtime_context().gcs_address)  # this cluster's, not any other found on the machine
        actors = list_actors(address, filters=[("pid", "=", pid)], limit=1000, raise_on_missing_output=False)
        # The state API names a class by its qualified name (``f.<locals>.TaskRunner``), the log prefix by its own.
        found = {
            str(actor.node_id)
            for actor in actors
            if actor.pid == pid and actor.node_id and str(actor.class_name).rsplit(".", 1)[-1] == class_name
        }
        if len(found) == 1:
            return found.pop(), f"{class_name} pid {pid} (Ray state API)"
        why = f"the Ray state API lists {len(found)} nodes with a {class_name} of pid {pid}"
    except Exception as error:  # any failure of the lookup: the log prefix is tried next
        why = f"the Ray state API failed ({type(error).__name__}: {error})"
    if ip is None:
        return str(ray.get_runtime_context().get_node_id()), f"this node: no ip= in the {class_name}'s log ({why})"
    at = [str(node["NodeID"]) for node in ray.nodes() if node.get("Alive") and node.get("NodeManagerAddress") == ip]
    if len(at) == 1:
        return at[0], f"the node at {ip}, from the {class_name}'s log prefix ({why})"
    return None, f"{why}, and {len(at)} live nodes are at {ip}"


def latest_actor_checkpoint(local_dir: Path) -> Path | None:
    """The actor of verl's last checkpoint (``global_step_<n>/actor``), or None."""
    steps = [
        (int(path.name.removeprefix("global_step_")), path)
        for path in local_dir.glob("global_step_*")
        if path.name.removeprefix("global_step_").isdigit()
    ]
    actor = max(steps)[1] / "actor" if steps else None
    return actor if actor is not None and actor.is_dir() else None


def merger_command(actor: Path, target: Path) -> list[str]:
    """verl's model merger with memory-mapped shards and a LoRA adapter folded into the weights
    (``mtrl.backends.verl.merge``): the FSDP checkpoint as the trained Hugging Face model, the adapter in
    ``lora_adapter/`` beside it (``MTRL_VERL_MERGER`` replaces the module, for tests)."""
    override = os.environ.get("MTRL_VERL_MERGER")
    module = shlex.split(override) if override else [sys.executable, "-m", "mtrl.backends.verl.merge"]
    return [*module, "merge", "--backend", "fsdp", "--local_dir", str(actor), "--target_dir", str(target)]


def export_model(s3: Any, local_dir: Path, target: Path, prefix_uri: str, *, run_id: Any) -> tuple[int, str | None]:
    """The trained model as ``output/huggingface/`` (merged weights, tokenizer and, for LoRA, ``lora_adapter/``): the
    run's deliverable, so a run whose export fails fails. (exit code, the problem) — the problem travels back to the
    entrypoint, which prints it (a Ray task's own output may not reach the job's log before the driver leaves)."""
    actor = latest_actor_checkpoint(local_dir)
    if actor is None:
        return 1, f"run {run_id}: the trainer exited without a checkpoint to export ({local_dir})"
    merged = subprocess.run(merger_command(actor, target), check=False)
    if merged.returncode != 0:
        return merged.returncode, f"run {run_id}: merging {actor} into a Hugging Face model failed"
    upload_tree(s3, target, prefix_uri)
    return 0, None


def upload_tree(s3: Any, root: Path, prefix_uri: str) -> int:
    if not root.is_dir():
        return 0
    files = sorted(p for p in root.rglob("*") if p.is_file())
    for path in files:
        upload_file(s3, path, prefix_uri + path.relative_to(root).as_posix())
    return len(files)


def upload_file(s3: Any, path: Path, uri: str) -> None:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    s3.upload_file(str(path), bucket, key)


def download_tree(s3: Any, prefix_uri: str, into: Path) -> int:
    """Every object under ``prefix_uri`` into ``into`` (keys that would land outside it are refused)."""
    bucket, _, prefix = prefix_uri.removeprefix("s3://").partition("/")
    root = into.resolve()
    count = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            target = into / item["Key"][len(prefix) :]
            if not target.resolve().is_relative_to(root):
                raise TrainError(f"{prefix_uri}: object {item['Key']!r} would land outside {into}")
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, item["Key"], str(target))
            count += 1
    return count
