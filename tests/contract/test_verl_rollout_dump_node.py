"""verl's rollout dumps are read on the node its TaskRunner runs on (issue 35: the head cannot see a worker's disk).

verl 0.9.1 writes ``<trainer.rollout_data_dir>/<step>.jsonl`` inside its TaskRunner actor
(``verl/trainer/ppo/ray_trainer.py``: ``RayPPOTrainer._log_rollout_data`` → ``_dump_generations`` →
``_write_generations``), and ``verl/trainer/main_ppo.py`` ``run_ppo`` creates that actor with a plain
``task_runner_class.remote()`` (``main_ppo_v0.TaskRunner`` is ``@ray.remote`` with no resources and no scheduling
strategy): Ray puts it on the head or on a GPU worker, and the RayJob's head advertises CPUs (``num-gpus: "0"`` only).

On the two-node stand-in (``tests/contract/verl_cluster.py``: each node its own ``/var/lib/mtrl-verl``), the job's
entrypoint on the head runs ``train.train_and_follow`` — what ``train.main`` runs around verl's trainer — with a
stand-in ``main_ppo`` whose ``TaskRunner`` is placed on the GPU worker, then on the head
(``tests/contract/verl_rollout_probe.py``; the dumps are written by verl's own writer there). Each step's health row
must get its environment side from the dump on the TaskRunner's node. Before the fix the entrypoint read the head's
own directory (empty when the TaskRunner is on the worker) and did not recognise Ray's coloured log prefix at all.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mtrl.health.signals import parse_signals
from tests.contract.tier import skip_or_fail
from tests.contract.verl_cluster import ROOT, VERL_BIN, WORK_DIR, Cluster, can_isolate, running_cluster

PROBE = ROOT / "tests" / "contract" / "verl_rollout_probe.py"
PLACEMENTS = ("worker", "head")


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The probe job's output with the TaskRunner on each node (one cluster for both)."""
    if not (VERL_BIN / "python").exists():
        skip_or_fail(".venv-verl is missing (make verl)")
    if not can_isolate():
        skip_or_fail("private mount namespaces need root (unshare --mount)")
    logs = tmp_path_factory.mktemp("verl-rollout-dumps")
    cluster = Cluster(environment={"PYTHONPATH": str(ROOT)}, logs=logs)
    results: dict[str, Any] = {}
    with running_cluster(cluster):
        results["nodes"] = cluster.node_ids()
        for where in PLACEMENTS:
            entrypoint = f"{VERL_BIN / 'python'} {PROBE} follow {where} {WORK_DIR}/r1-{where}/rollouts"
            results[where] = cluster.submit(entrypoint, timeout_s=240)
    return results


def _report(job: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    found = re.search(r"mtrl rollout probe: (\{.*\})", job.stdout)
    assert found, (job.stdout + job.stderr)[-5000:]
    report: dict[str, Any] = json.loads(found.group(1))
    return report


@pytest.mark.parametrize("where", PLACEMENTS)
def test_each_steps_row_gets_its_environment_side_from_the_taskrunners_node(where: str, probes: dict[str, Any]) -> None:
    job: subprocess.CompletedProcess[str] = probes[where]
    output = job.stdout + job.stderr
    (node,) = probes["nodes"][where]
    assert f"verl stand-in: TaskRunner ran on node {node}" in job.stdout, output[-5000:]
    report = _report(job)
    assert report["code"] == 0, output[-5000:]
    # On the worker, the head's own disk holds no dump: only a read on the worker's node finds them.
    assert report["head_holds_dumps"] == ([] if where == "worker" else ["1.jsonl", "2.jsonl"])
    rows = parse_signals(report["signals"]).rows
    assert [row.step for row in rows] == [1, 2], output[-5000:]
    for row in rows:
        assert "rollout_problem" not in row.extra, row.extra
        assert (row.reward_mean, row.entropy) == (0.5, 1.25)  # the trainer's own figures
        assert row.zero_spread_share == 0.5, (row, output[-5000:])  # task 1's scores are equal, task 0's are not
        assert row.malformed_share == 0.25
        assert row.mean_turns == 3.0


LOOKUP_SCRIPT = """
import json, os, ray
from mtrl.backends.verl.nodes import actor_node

ray.init(num_cpus=2)
here = ray.get_runtime_context().get_node_id()

def make():  # a class made in a function: the state API names it 'make.<locals>.TaskRunner'
    @ray.remote(num_cpus=1)
    class TaskRunner:
        def pid(self):
            return os.getpid()
    return TaskRunner

pid = ray.get(make().remote().pid.remote())
print("lookups: " + json.dumps({
    "here": here,
    "found": actor_node("TaskRunner", pid, None),
    "other_class": actor_node("TaskRunnerV1", pid, None),
    "unknown_pid_no_ip": actor_node("TaskRunner", pid + 1_000_000, None),
    "unknown_pid_unknown_ip": actor_node("TaskRunner", pid + 1_000_000, "203.0.113.9"),
}))
"""


def test_the_taskrunners_node_is_looked_up_on_a_real_ray_cluster(tmp_path: Path) -> None:
    """``nodes.actor_node`` against Ray 2.60.0 itself (one local node): the state API finds the actor by pid and the
    class name its log prefix shows; without a match, no ``ip=`` in the prefix means the driver's node
    (``ray/_private/worker.py`` ``print_worker_logs`` omits the address when it is the driver's), and an address no live
    node has leaves the node unknown, saying why."""
    if not (VERL_BIN / "python").exists():
        skip_or_fail(".venv-verl is missing (make verl)")
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0", "HOME": str(tmp_path)}
    environment.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [str(VERL_BIN / "python"), "-c", LOOKUP_SCRIPT],
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
        cwd=tmp_path,
        env=environment,
    )
    found = re.search(r"lookups: (\{.*\})", done.stdout)
    assert found, (done.stdout + done.stderr)[-5000:]
    lookups = json.loads(found.group(1))
    assert lookups["found"][0] == lookups["here"]
    assert lookups["found"][1].endswith("(Ray state API)")
    assert lookups["other_class"][0] == lookups["here"]  # no match: no ip= in its prefix, so the driver's node
    assert "lists 0 nodes with a TaskRunnerV1" in lookups["other_class"][1]
    assert lookups["unknown_pid_no_ip"][0] == lookups["here"]
    assert lookups["unknown_pid_unknown_ip"][0] is None
    assert "0 live nodes are at 203.0.113.9" in lookups["unknown_pid_unknown_ip"][1]
