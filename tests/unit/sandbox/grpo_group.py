"""A GRPO group of ask_to_code rollouts played by the real ``WorkerRuntime``, some of them hostile.

Shared by test_rollout_isolation.py (in the test process, each tier forced) and its probes (a worker process
as CI runs each tier), so it imports only the standard library and the project.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from environments.ask_to_code.tasks import TASKS
from mtrl.envs import load_spec
from mtrl.sandbox import Limits
from mtrl.worker import RolloutOutcome, RolloutRequest, WorkerConfig, WorkerRuntime

TASK = next(task for task in TASKS if task.task_id == "median")

# Everything a rollout's code could do to its neighbours and the worker: signal, stop, renice, re-limit every
# process it can name; children of the worker (clone(CLONE_PARENT)), a fork bomb to its limit, SysV IPC,
# datagrams, files in other runs' directories; then hog memory and CPU to its limit.
HOSTILE = r"""
import ctypes, glob, os, resource, signal, socket, time
libc = ctypes.CDLL(None, use_errno=True)
x86 = os.uname().machine == "x86_64"
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
for _ in range(14):
    if libc.syscall(56 if x86 else 220, 0x8000 | 17, 0, 0, 0, 0) == 0:  # clone(CLONE_PARENT | SIGCHLD)
        os._exit(0)
for _ in range(3):
    libc.syscall(29 if x86 else 194, 0, 16 << 20, 0o1666)  # shmget(IPC_PRIVATE, 16 MiB, IPC_CREAT)
for path in glob.glob("/tmp/*/*.sock") + glob.glob("/tmp/*.sock"):
    try:
        socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0].sendto(b"out", path)
    except OSError:
        pass
for directory in glob.glob("/tmp/mtrl-sandbox-*"):
    try:
        open(os.path.join(directory, "x"), "w").write("x" * 1000)
    except OSError:
        pass
for _ in range(256):
    try:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
    except OSError:
        break
hoard = []
try:
    while True:
        hoard.append(bytearray(16 << 20))
except MemoryError:
    pass
while True:
    pass
"""
# Honest submissions of differing quality (so their rewards differ within the group).
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
        # messages[0] is the system prompt (the one episode driver); the first observation carries the tag.
        if len(messages) == 2:
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


def play(programs: dict[str, str], tags: list[str], limits: Limits, concurrency: int) -> dict[str, Any]:
    """{rollout: (status, reward, correctness)} of one group played by the worker runtime."""
    requests = [
        RolloutRequest(tag, "g", {"prompt": f"[{tag}] {TASK.prompt}", "info": {"task_id": TASK.task_id}})
        for tag in tags
    ]
    sink = Sink()
    config = WorkerConfig(concurrency=concurrency, group_size=len(tags), env_args={"limits": limits})
    runtime = WorkerRuntime(load_spec("ask_to_code"), Source(requests), sink, GroupPolicy(programs), config)
    thread = threading.Thread(target=runtime.run)
    thread.start()
    deadline = time.monotonic() + 180
    while len(sink.outcomes) < len(tags) and time.monotonic() < deadline:
        time.sleep(0.02)
    runtime.request_shutdown()
    thread.join(30)
    return {
        outcome.rollout_id: [
            outcome.status,
            outcome.reward,
            outcome.result.components.get("correctness") if outcome.result else None,
            outcome.error,
        ]
        for outcome in sink.outcomes
    }


def alone_and_together(hostile: int, limits: Limits, concurrency: int, worker: int) -> dict[str, Any]:
    """Each honest rollout alone, then a group of 8 where ``hostile`` of them attack (interleaved)."""
    honest_count = 8 - hostile
    programs = {f"r{i}": program for i, program in enumerate(HONEST[:honest_count])}
    programs |= {f"h{i}": HOSTILE.replace("WORKER", str(worker)) for i in range(hostile)}
    honest = sorted(tag for tag in programs if tag.startswith("r"))
    attackers = sorted(tag for tag in programs if tag.startswith("h"))
    alone = {tag: play(programs, [tag], limits, concurrency=1)[tag] for tag in honest}
    order = [tag for pair in zip(honest, attackers, strict=False) for tag in pair]
    order += [tag for tag in honest if tag not in order]
    group = play(programs, order, limits, concurrency)
    return {"alone": alone, "group": group}
