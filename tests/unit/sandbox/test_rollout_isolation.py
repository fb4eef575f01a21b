"""One rollout cannot lower another's reward: a hostile member of a GRPO group of 8, played by the real
WorkerRuntime with concurrency 4, leaves the other 7 scoring exactly what each scores alone — in every tier.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from environments.ask_to_code.tasks import TASKS
from mtrl.envs import load_spec
from mtrl.sandbox import Limits
from mtrl.worker import RolloutOutcome, RolloutRequest, WorkerConfig, WorkerRuntime

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="forcing every tier needs root (as in CI)")
ASK_TO_CODE = load_spec("ask_to_code")
TASK = next(task for task in TASKS if task.task_id == "median")

# Everything a rollout's code could do to its neighbours and the worker: signal, stop, renice, re-limit
# every process it can name, write into other runs' work directories, then hog memory and CPU to its limit.
HOSTILE = """
import glob, os, resource, signal
pids = []
try:
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
except OSError:
    pass
for pid in set(pids + [WORKER, os.getppid(), 1]):
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    for call in (lambda: resource.prlimit(pid, resource.RLIMIT_CPU, (0, 0)),
                 lambda: os.setpriority(os.PRIO_PROCESS, pid, 19)):
        try:
            call()
        except (OSError, ValueError):
            pass
for call in (lambda: os.kill(-1, signal.SIGKILL), lambda: os.setpriority(os.PRIO_USER, 0, 19)):
    try:
        call()
    except OSError:
        pass
for directory in glob.glob("/tmp/mtrl-sandbox-*"):
    try:
        open(os.path.join(directory, "x"), "w").write("x" * 1000)
    except OSError:
        pass
hoard = []
try:
    while True:
        hoard.append(bytearray(16 << 20))
except MemoryError:
    pass
while True:
    pass
"""
# Seven honest submissions of differing quality (so their rewards differ within the group).
HONEST = [
    TASK.solution,
    TASK.naive,
    "def median(values):\n    return None\n",
    "def median(values):\n    return sorted(values)[len(values) // 2] if values else None\n",
    TASK.solution,
    "def median(values):\n    raise ValueError\n",
    TASK.naive,
]


class GroupPolicy:
    """Asks once, then submits the program of the rollout named in the prompt."""

    def __init__(self, programs: dict[str, str]) -> None:
        self.programs = programs

    def act(self, messages: list[dict[str, str]], *, timeout_s: float) -> str:
        if len(messages) == 1:
            return "What should happen for an empty list?"
        tag = messages[1]["content"].split("]", 1)[0].strip("[")
        return f"```python\n{self.programs[tag]}```"


class Source:
    def __init__(self, requests: list[RolloutRequest]) -> None:
        self.pending = list(requests)
        self.lock = threading.Lock()

    def receive(self, max_count: int, wait_s: float) -> list[RolloutRequest]:
        with self.lock:
            taken, self.pending = self.pending[:max_count], self.pending[max_count:]
        if not taken:
            time.sleep(0.01)
        return taken

    def ack(self, request: RolloutRequest) -> None:
        pass

    def release(self, request: RolloutRequest) -> None:
        pass


class Sink:
    def __init__(self) -> None:
        self.outcomes: list[RolloutOutcome] = []

    def publish(self, outcome: RolloutOutcome) -> None:
        self.outcomes.append(outcome)


def play(programs: dict[str, str], tags: list[str], tier: str, concurrency: int) -> dict[str, float]:
    requests = [
        RolloutRequest(tag, "g", {"prompt": f"[{tag}] {TASK.prompt}", "info": {"task_id": TASK.task_id}})
        for tag in tags
    ]
    sink = Sink()
    limits = Limits(timeout_s=4.0, cpu_s=2, memory_mb=256, max_processes=8, isolation=tier)  # type: ignore[arg-type]
    config = WorkerConfig(concurrency=concurrency, group_size=len(tags), env_args={"limits": limits})
    runtime = WorkerRuntime(ASK_TO_CODE, Source(requests), sink, GroupPolicy(programs), config)
    thread = threading.Thread(target=runtime.run)
    thread.start()
    deadline = time.monotonic() + 120
    while len(sink.outcomes) < len(tags) and time.monotonic() < deadline:
        time.sleep(0.02)
    runtime.request_shutdown()
    thread.join(30)
    assert len(sink.outcomes) == len(tags)
    assert all(outcome.status == "completed" for outcome in sink.outcomes), [o.error for o in sink.outcomes]
    return {outcome.rollout_id: outcome.reward for outcome in sink.outcomes}


@pytest.mark.parametrize("tier", ["full", "fargate", "lambda"])
def test_a_hostile_rollout_does_not_change_its_group_mates_rewards(tier: str) -> None:
    programs = {f"r{i}": program for i, program in enumerate(HONEST)}
    programs["hostile"] = HOSTILE.replace("WORKER", str(os.getpid()))
    alone = {tag: play(programs, [tag], tier, concurrency=1)[tag] for tag in sorted(set(programs) - {"hostile"})}
    group = play(programs, ["r0", "r1", "hostile", "r2", "r3", "r4", "r5", "r6"], tier, concurrency=4)
    assert {tag: group[tag] for tag in alone} == alone
    assert len(set(alone.values())) > 2  # the group does discriminate
    assert group["hostile"] < max(alone.values())
