"""Each step's rollout dump is read on the node verl's TaskRunner runs on, with Ray's node lookups faked.

verl 0.9.1 writes ``<trainer.rollout_data_dir>/<step>.jsonl`` inside its TaskRunner actor
(``verl/trainer/ppo/ray_trainer.py`` ``RayPPOTrainer._dump_generations``), which ``verl/trainer/main_ppo.py``
``run_ppo`` creates with a plain ``TaskRunner.remote()``: Ray may place it on a GPU worker, whose disk the head (where
the entrypoint follows the log) cannot see. Ray names the actor's node address in its log prefix when it is not the
driver's (``ray/_private/worker.py`` ``print_worker_logs``: ``(TaskRunner pid=N, ip=A)``). Here each "node" is a
folder; the fake ``run_on_node`` runs the reader in the folder of the node it is pinned to. The real lookups and the
pinned read run on a real two-node Ray cluster in tests/contract/test_verl_rollout_dump_node.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mtrl.backends.verl import progress as verl_progress
from mtrl.backends.verl import rollout_rows
from mtrl.backends.verl.rollouts import ROLLOUT_PROBLEM, Rollouts
from mtrl.health.signals import parse_signals
from tests.unit.backends.verl.test_verl_rollout_rows import sample
from tests.unit.backends.verl.test_verl_train import BUCKET, s3  # noqa: F401 - the fixture

DUMPS = Path("/var/lib/mtrl-verl/r1/rollouts")  # the same path on every node's own disk
WORKER_PREFIX = "\x1b[36m(TaskRunner pid=41, ip=10.0.0.7)\x1b[0m"  # as Ray prints it into the entrypoint's pipe


class FakeCluster:
    """Two nodes, each with its own disk (a folder); records the lookups and the pinned reads."""

    def __init__(self, root: Path, *, taskrunner_on: str | None = "worker") -> None:
        self.disks = {"head": root / "head", "worker": root / "worker"}
        self.taskrunner_on = taskrunner_on
        self.lookups: list[tuple[str, int, str | None]] = []
        self.reads: list[tuple[str, int]] = []
        self.fail_reads = 0

    def dump(self, node: str, step: int, *lines: str) -> None:
        folder = self.disks[node] / DUMPS.relative_to("/")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{step}.jsonl").write_text("\n".join(lines) + "\n")

    def locate(self, class_name: str, pid: int, ip: str | None) -> tuple[str | None, str]:
        self.lookups.append((class_name, pid, ip))
        if self.taskrunner_on is None:
            return None, "the Ray state API failed (ConnectionError: dashboard down), and 0 live nodes are at 10.0.0.7"
        return self.taskrunner_on, "state API"

    def run_on_node(self, function: Any, node: str, directory: Path, step: int, *, timeout_s: float) -> Any:
        self.reads.append((node, step))
        assert timeout_s > 0
        if self.fail_reads:
            self.fail_reads -= 1
            raise TimeoutError("Get timed out: some object(s) not ready")
        return function(self.disks[node] / directory.relative_to("/"), step)


def _signals(s3: Any) -> list[Any]:  # noqa: F811
    body = s3.get_object(Bucket=BUCKET, Key="runs/r1/signals.jsonl")["Body"].read().decode()
    return list(parse_signals(body).rows)


def _follow(s3: Any, cluster: FakeCluster, lines: list[str]) -> list[Any]:  # noqa: F811
    rollouts = Rollouts(DUMPS, cluster=True, locate=cluster.locate, run_on_node=cluster.run_on_node)
    progress = verl_progress.Progress(s3, f"s3://{BUCKET}/runs/r1/", planned_steps=2, group_size=2, rollouts=rollouts)
    progress.start()
    assert list(verl_progress.follow(lines, progress)) == lines
    progress.finish()
    rollouts.close()
    return _signals(s3)


def test_a_taskrunner_on_a_worker_has_its_dumps_read_on_that_worker(s3: Any, tmp_path: Path) -> None:  # noqa: F811
    cluster = FakeCluster(tmp_path)
    for step in (1, 2):
        cluster.dump("worker", step, sample(0, 1.0), sample(0, 0.0, malformed_actions=1.0))
    lines = [
        f"{WORKER_PREFIX} TaskRunner hostname: worker-0, PID: 41\n",
        f"{WORKER_PREFIX} step:1 - critic/score/mean:0.5\n",
        f"{WORKER_PREFIX} step:2 - critic/score/mean:0.5\n",
    ]
    rows = _follow(s3, cluster, lines)
    assert cluster.lookups == [("TaskRunner", 41, "10.0.0.7")]  # once, at its first line, while it is alive
    assert cluster.reads == [("worker", 1), ("worker", 2)]
    assert [row.malformed_share for row in rows] == [0.5, 0.5]
    assert [row.zero_spread_share for row in rows] == [0.0, 0.0]
    assert all(ROLLOUT_PROBLEM not in row.extra for row in rows)
    assert not cluster.disks["head"].exists()  # the head's own disk never held a dump


def test_a_taskrunner_on_the_head_is_read_there(s3: Any, tmp_path: Path) -> None:  # noqa: F811
    cluster = FakeCluster(tmp_path, taskrunner_on="head")
    cluster.dump("head", 1, sample(0, 1.0), sample(0, 1.0))
    rows = _follow(
        s3,
        cluster,
        ["(TaskRunner pid=41) TaskRunner hostname: head-0\n", "(TaskRunner pid=41) step:1 - critic/score/mean:1.0\n"],
    )
    assert cluster.lookups == [("TaskRunner", 41, None)]
    assert (cluster.reads, rows[0].zero_spread_share) == ([("head", 1)], 1.0)


def test_an_unknown_node_degrades_the_rows_and_says_why(s3: Any, tmp_path: Path) -> None:  # noqa: F811
    cluster = FakeCluster(tmp_path, taskrunner_on=None)
    cluster.dump("worker", 1, sample(0, 1.0))
    rows = _follow(s3, cluster, [f"{WORKER_PREFIX} step:1 - critic/score/mean:0.5\n"])
    assert rows[0].reward_mean == 0.5  # the trainer's side stands
    assert rows[0].malformed_share is None
    assert "dashboard down" in rows[0].extra[ROLLOUT_PROBLEM]
    assert cluster.reads == []


def test_a_failed_read_is_tried_again_and_a_missing_dump_says_so(s3: Any, tmp_path: Path) -> None:  # noqa: F811
    cluster = FakeCluster(tmp_path)
    cluster.fail_reads = 1  # step 1's first read (at step 2's line) times out; the one at the end succeeds
    cluster.dump("worker", 1, sample(0, 1.0), sample(0, 0.0))
    lines = [f"{WORKER_PREFIX} step:1 - critic/score/mean:0.5\n", f"{WORKER_PREFIX} step:2 - critic/score/mean:0.5\n"]
    rows = _follow(s3, cluster, lines)
    assert cluster.reads == [("worker", 1), ("worker", 1), ("worker", 2)]
    assert rows[0].zero_spread_share == 0.0
    assert ROLLOUT_PROBLEM not in rows[0].extra  # the note of the failed read goes with the figures
    assert rows[1].zero_spread_share is None  # verl never wrote step 2's dump
    assert rows[1].extra[ROLLOUT_PROBLEM].startswith(f"no rollout dump {DUMPS}/2.jsonl on node worker")


def test_a_node_that_keeps_failing_is_given_up_after_a_few_reads(s3: Any, tmp_path: Path) -> None:  # noqa: F811
    cluster = FakeCluster(tmp_path)
    cluster.fail_reads = 100
    lines = [f"{WORKER_PREFIX} step:{step} - critic/score/mean:0.5\n" for step in range(1, 6)]
    rows = _follow(s3, cluster, lines)
    assert sum(1 for node, step in cluster.reads if step == 1) == verl_progress.READ_TRIES
    # One read that may time out per step line and one at the end, never one per pending step.
    assert len(cluster.reads) <= len(lines) + 1
    assert all("TimeoutError" in row.extra[ROLLOUT_PROBLEM] for row in rows)


def test_a_dump_over_the_bound_is_not_read_and_a_huge_line_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rollout_rows, "MAX_LINE_BYTES", 1000)
    (tmp_path / "1.jsonl").write_text(sample(0, 1.0) + "\n" + sample(0, 0.0, prompt="x" * 5000) + "\n" + sample(0, 0.0))
    row = rollout_rows.read_step(tmp_path, 1)
    assert row is not None
    assert not isinstance(row, str)
    assert row.reward_mean == pytest.approx(0.5)  # the line over the bound is left out, the others read
    monkeypatch.setattr(rollout_rows, "MAX_DUMP_BYTES", 100)
    problem = rollout_rows.read_step(tmp_path, 1)
    assert isinstance(problem, str)
    assert "over the 100-byte bound" in problem
    assert rollout_rows.read_step(tmp_path, 2) is None


def test_step_lines_from_verls_driver_itself_are_read_on_this_node(
    s3: Any,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No TaskRunner printed (the trainer ran in verl's driver, started on this node): the dump is here."""
    cluster = FakeCluster(tmp_path)
    cluster.dump("head", 1, sample(0, 1.0), sample(0, 1.0))
    monkeypatch.chdir(cluster.disks["head"])
    rollouts = Rollouts(DUMPS.relative_to("/"), cluster=True, locate=cluster.locate, run_on_node=cluster.run_on_node)
    progress = verl_progress.Progress(s3, f"s3://{BUCKET}/runs/r1/", planned_steps=1, group_size=2, rollouts=rollouts)
    progress.start()
    list(verl_progress.follow(["step:1 - critic/score/mean:1.0\n"], progress))
    progress.finish()
    (row,) = _signals(s3)
    assert (cluster.lookups, cluster.reads, row.zero_spread_share) == ([], [], 1.0)
