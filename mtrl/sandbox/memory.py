"""The memory a whole run holds, in the tiers without a cgroup (fargate, lambda).

``Limits.memory_mb`` bounds each process's address space (RLIMIT_AS); without a memory cgroup a program that forks
could hold ``max_processes × memory_mb`` together. The runner therefore also bounds the run's total: every sandboxed
process stays in the run's session (seccomp refuses ``setsid``/``setpgid``), so the resident memory of the processes
whose session is the run's — read from ``/proc/<pid>/stat``, which every uid may read — is summed while the run
goes on, and the whole process group is killed once it is over ``memory_mb``, the same total the full tier's cgroup
enforces. Between two samples (``SAMPLE_S``) the total may briefly exceed the limit, never past ``max_processes ×
memory_mb``, the per-process limits' product.
"""

from __future__ import annotations

import os
import time

SAMPLE_S = 0.05
_PAGE = os.sysconf("SC_PAGE_SIZE")
_SESSION, _RSS = 3, 21  # /proc/<pid>/stat fields 6 and 24, counted from the first field after the command name


def session_rss_bytes(session: int) -> int:
    """Resident bytes of every process in ``session`` (processes that vanish while being read are skipped)."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                text = stat.read()
        except OSError:
            continue
        fields = text[text.rfind(b")") + 2 :].split()
        if len(fields) > _RSS and int(fields[_SESSION]) == session:
            total += int(fields[_RSS]) * _PAGE
    return total


class RunMemory:
    """Samples a run's total resident memory at most every ``SAMPLE_S``; ``over()`` is the total once it passed the
    limit (0 while it has not)."""

    def __init__(self, session: int, limit_bytes: int) -> None:
        self.session, self.limit_bytes = session, limit_bytes
        self._sampled = 0.0
        self.peak = 0

    def over(self) -> int:
        now = time.monotonic()
        if now - self._sampled < SAMPLE_S:
            return 0
        self._sampled = now
        total = session_rss_bytes(self.session)
        self.peak = max(self.peak, total)
        return total if total > self.limit_bytes else 0
