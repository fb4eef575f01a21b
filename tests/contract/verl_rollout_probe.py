"""The entrypoint's step following with verl's TaskRunner on a chosen node of the stand-in cluster (``verl_cluster``).

``python verl_rollout_probe.py follow <head|worker> <rollout dir>`` is the job's entrypoint, on the head as the
RayJob's is: it runs ``mtrl.backends.verl.train.train_and_follow`` (what ``train.main`` runs between staging and the
checkpoints) around a stand-in of verl's ``main_ppo`` (``MTRL_VERL_TRAINER``: this file's ``trainer`` mode) and prints
the ``signals.jsonl`` it wrote (``mtrl rollout probe: {...}``) and whether the head's own disk holds the dumps.

``trainer`` mode is that stand-in: a Ray driver that creates an actor named ``TaskRunner`` (so Ray prefixes its output
as it prefixes verl's, ``(TaskRunner pid=N[, ip=A])``, colour codes included) on the chosen node — verl 0.9.1's
``main_ppo.run_ppo`` creates it with a plain ``TaskRunner.remote()``, so Ray may choose either. The actor writes each
step's dump with verl's own writer (``RayPPOTrainer._write_generations``, what ``trainer.rollout_data_dir`` makes
``_dump_generations`` run) on its node's disk, then prints verl's step line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

STEPS = 2


def trainer(argv: list[str]) -> int:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    where = argv[0]
    arguments = dict(item.split("=", 1) for item in argv[1:] if "=" in item)
    dump_dir = arguments["trainer.rollout_data_dir"]
    ray.init()

    class TaskRunner:
        def run(self, dump_dir: str) -> str:
            import socket

            from verl.trainer.ppo.ray_trainer import RayPPOTrainer

            print(f"TaskRunner hostname: {socket.gethostname()}", flush=True)
            for step in range(1, STEPS + 1):
                # Two tasks, two samples each: task 0's scores differ, task 1's do not; one malformed sample.
                infos = {
                    "task_index": [0.0, 0.0, 1.0, 1.0],
                    "turns": [2.0, 4.0, 3.0, 3.0],
                    "malformed_actions": [0.0, 1.0, 0.0, 0.0],
                }
                scores = [1.0, 0.0, 0.5, 0.5]
                RayPPOTrainer._write_generations(["guess"] * 4, ["x"] * 4, [None] * 4, scores, infos, dump_dir, step)
                print(f"step:{step} - critic/score/mean:0.5 - actor/entropy:1.25", flush=True)
            return str(ray.get_runtime_context().get_node_id())

    nodes = [node for node in ray.nodes() if node.get("Alive")]
    gpu = [str(node["NodeID"]) for node in nodes if node["Resources"].get("GPU", 0) > 0]
    cpu_only = [str(node["NodeID"]) for node in nodes if node["Resources"].get("GPU", 0) == 0]
    (chosen,) = gpu if where == "worker" else cpu_only
    remote: Any = ray.remote(num_cpus=1)(TaskRunner)  # as verl/trainer/main_ppo_v0.py's @ray.remote TaskRunner
    runner = remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(chosen, soft=False)).remote()
    node = ray.get(runner.run.remote(dump_dir))
    print(f"verl stand-in: TaskRunner ran on node {node}", flush=True)
    return 0


class Puts:
    """What ``Progress`` writes, kept here (S3's put_object)."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put_object(self, *, Bucket: str, Key: str, Body: bytes, ContentType: str) -> None:  # boto3's names
        self.objects[Key] = Body


def follow(argv: list[str]) -> int:
    from mtrl.backends.verl import train

    where, rollout_dir = argv[0], Path(argv[1])
    document: dict[str, Any] = {"output_uri": "s3://bucket/runs/r1/", "steps": STEPS, "group_size": 2}
    launch = train.Launch(
        prepared=train.Prepared(Path("train.parquet"), None, Path("agent_loops.yaml"), train_rows=2, eval_tasks=0),
        model_path="model",
        local_dir=Path("checkpoints"),
        overrides=[f"trainer.rollout_data_dir={rollout_dir}"],
        rollout_dir=rollout_dir,
        nodes=("staged",),  # on a cluster, as stage_every_node returns it there
    )
    import os

    os.environ["MTRL_VERL_TRAINER"] = f"{sys.executable} {Path(__file__).resolve()} trainer {where}"
    s3 = Puts()
    code = train.train_and_follow(document, s3, launch)
    signals = s3.objects["runs/r1/signals.jsonl"].decode()
    report = {
        "code": code,
        "signals": signals,
        "head_holds_dumps": sorted(path.name for path in rollout_dir.glob("*.jsonl")),
    }
    print("mtrl rollout probe: " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    mode = sys.argv[1]
    sys.exit(trainer(sys.argv[2:]) if mode == "trainer" else follow(sys.argv[2:]))
