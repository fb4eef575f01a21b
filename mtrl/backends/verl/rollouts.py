"""Where the entrypoint reads each step's rollout dump: on the Ray node verl's TaskRunner runs on.

verl writes ``<trainer.rollout_data_dir>/<step>.jsonl`` inside its TaskRunner actor (verl 0.9.1
``verl/trainer/ppo/ray_trainer.py``: ``RayPPOTrainer._log_rollout_data`` → ``_dump_generations`` →
``_write_generations``), and ``main_ppo`` creates that actor with a plain ``TaskRunner.remote()``
(``verl/trainer/main_ppo.py`` ``run_ppo``; ``main_ppo_v0.TaskRunner`` is ``@ray.remote`` with no resources and no
scheduling strategy, and no config key places it). Ray may put it on the head or on a GPU worker, and no pod sees
another's disk. So the entrypoint learns the actor's node from its console prefix (``(TaskRunner pid=N[, ip=A])``,
``mtrl.backends.verl.nodes.actor_node``) and runs ``rollout_rows.read_step`` there (a Ray task pinned to that node),
which returns only the step's row. Off a cluster (no Ray job), or when the step lines come from verl's driver itself
(no TaskRunner prefix: the driver runs on this node), the dump is on this machine.

Health is advisory: nothing here raises. A dump that cannot be read leaves the row's environment side empty and the
row says why (``ROLLOUT_PROBLEM``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtrl.backends.verl.rollout_rows import read_step
from mtrl.health.signals import SignalRow

READ_TIMEOUT_S = 60.0  # one read on the TaskRunner's node (the entrypoint stops following the log meanwhile)
ROLLOUT_PROBLEM = "rollout_problem"  # the row field that says why its environment side is missing

Locate = Callable[[str, int, str | None], tuple[str | None, str]]
RunOnNode = Callable[..., Any]


@dataclass(frozen=True)
class Trainer:
    """verl's TaskRunner as its console prefix names it."""

    class_name: str
    pid: int
    ip: str | None


def _ray_locate(class_name: str, pid: int, ip: str | None) -> tuple[str | None, str]:
    from mtrl.backends.verl.nodes import actor_node  # noqa: PLC0415 - Ray only on a cluster

    return actor_node(class_name, pid, ip)


def _ray_run_on_node(function: Any, node: str, *args: Any, timeout_s: float) -> Any:
    from mtrl.backends.verl.nodes import run_on_node  # noqa: PLC0415 - Ray only on a cluster

    return run_on_node(function, node, *args, timeout_s=timeout_s)


class Rollouts:
    """Reads step dumps from ``directory`` on the TaskRunner's node (``cluster``) or on this machine."""

    def __init__(
        self,
        directory: Path,
        *,
        cluster: bool = False,
        locate: Locate | None = None,
        run_on_node: RunOnNode | None = None,
        timeout_s: float = READ_TIMEOUT_S,
    ) -> None:
        self.directory = directory
        self.cluster = cluster
        self.locate = locate or _ray_locate
        self.run_on_node = run_on_node or _ray_run_on_node
        self.timeout_s = timeout_s
        self.trainer: Trainer | None = None
        self.node: str | None = None
        self.where = "this machine"
        self._connected = False

    def trainer_seen(self, class_name: str, pid: int, ip: str | None) -> None:
        """verl's TaskRunner printed its first line: its node is looked up now, while it is alive."""
        if self.trainer is None:
            self.trainer = Trainer(class_name, pid, ip)
            if self.cluster:
                self._node()

    def read(self, step: int) -> SignalRow | str | None:
        """``step``'s row from its dump, None while verl has not written it, or why it could not be read."""
        if not self.cluster:
            return read_step(self.directory, step)
        if self.trainer is None:  # the step lines came from verl's driver itself, which runs on this node
            self.where = "this node (verl's step lines came from its driver, not a TaskRunner)"
            return read_step(self.directory, step)
        node, where = self._node()
        if node is None:
            return f"step {step}'s rollout dump was not read: {where}"
        try:
            found = self.run_on_node(read_step, node, self.directory, step, timeout_s=self.timeout_s)
        except Exception as error:  # a node gone, a timeout, Ray itself: the row says so
            return f"step {step}'s rollout dump on node {node} was not read ({type(error).__name__}: {error})"
        if found is None or isinstance(found, SignalRow | str):
            return found
        return f"step {step}'s rollout dump on node {node}: the reader returned {type(found).__name__}"

    def missing(self, step: int) -> str:
        """Why ``step`` has no environment side when the trainer has exited without its dump."""
        return f"no rollout dump {self.directory / f'{step}.jsonl'} on {self.where}"

    def _node(self) -> tuple[str | None, str]:
        if self.node is not None or not self.cluster or self.trainer is None:
            return self.node, self.where
        try:
            self._connect()
            node, how = self.locate(self.trainer.class_name, self.trainer.pid, self.trainer.ip)
        except Exception as error:  # advisory: the next read tries again
            node, how = None, f"the TaskRunner's node could not be looked up ({type(error).__name__}: {error})"
        if node is not None:
            self.node, how = node, f"node {node} ({how})"
        self.where = how
        return node, how

    def _connect(self) -> None:
        if self.locate is not _ray_locate or self._connected:
            return
        import ray  # noqa: PLC0415 - the image's library

        if not ray.is_initialized():
            ray.init()
            self._connected = True

    def close(self) -> None:
        """Leave the Ray cluster if this reader joined it (the entrypoint's later steps join it again)."""
        if self._connected:
            self._connected = False
            try:
                import ray  # noqa: PLC0415 - the image's library

                ray.shutdown()
            except Exception as error:  # advisory
                print(f"leaving Ray after reading rollout dumps failed: {error}", flush=True)
