"""The seccomp filter, evaluated instruction by instruction for both architectures (aarch64 cannot run here).

A small classic-BPF interpreter runs ``seccomp_program`` on a ``struct seccomp_data`` for each syscall and
argument that matters: every way out by a socket (issue 23 §2), ``clone(CLONE_PARENT)`` (§3), SysV IPC and
message queues (§6), processes for code that keeps uid 0, signals aimed elsewhere. The real kernel runs the
same program in the tier tests (test_hostile_corpus.py).
"""

from __future__ import annotations

import pytest

from mtrl.sandbox._seccomp import AUDIT_ARCH, DENIED, seccomp_program

ALLOW, KILL = 0x7FFF0000, 0x80000000
EPERM, EACCES, ENOSYS = 0x00050001, 0x0005000D, 0x00050026
MACHINES = ("x86_64", "aarch64")
GROUP = 4242
NUMBERS = {  # (x86_64, aarch64)
    "read": (0, 63),
    "write": (1, 64),
    "openat": (257, 56),
    "mmap": (9, 222),
    "socketpair": (53, 199),
    "recvmsg": (47, 212),
    "sendto": (44, 206),
    "clone": (56, 220),
    "kill": (62, 129),
    "fork": (57, None),
    "vfork": (58, None),
}
FORK_FLAGS = 0x01200011  # CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD: glibc's fork()
THREAD_FLAGS = 0x003D0F00  # what pthread_create passes (CLONE_VM | FS | FILES | SIGHAND | THREAD | ...)
CLONE_PARENT = 0x00008000
CLONE_NEWUSER = 0x10000000


def evaluate(program: list[tuple[int, int, int, int]], machine: str, nr: int, *args: int, arch: int = 0) -> int:
    """The filter's verdict for one syscall (the arguments as 64-bit values)."""
    words = {0: nr, 4: arch or AUDIT_ARCH[machine]}
    for index, value in enumerate((*args, 0, 0, 0, 0, 0, 0)[:6]):
        words[16 + 8 * index] = value & 0xFFFFFFFF
        words[20 + 8 * index] = (value >> 32) & 0xFFFFFFFF
    accumulator, pc = 0, 0
    for _ in range(len(program) + 1):
        code, jump_true, jump_false, k = program[pc]
        if code == 0x20:
            accumulator = words[k]
        elif code == 0x06:
            return k
        elif code in (0x15, 0x45, 0x35):
            taken = {0x15: accumulator == k, 0x45: bool(accumulator & k), 0x35: accumulator >= k}[code]
            pc += jump_true if taken else jump_false
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")
        pc += 1
    raise AssertionError("the program did not return")


def number(name: str, machine: str) -> int:
    value = NUMBERS[name][MACHINES.index(machine)] if name in NUMBERS else DENIED[name][MACHINES.index(machine)]
    assert value is not None
    return value


@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("allow_processes", [True, False])
def test_the_program_is_well_formed(machine: str, allow_processes: bool) -> None:
    program = seccomp_program(machine, GROUP, allow_processes=allow_processes)
    assert len(program) < 4096  # BPF_MAXINSNS
    for position, (code, jump_true, jump_false, _) in enumerate(program):
        assert max(jump_true, jump_false) < 256
        if code in (0x15, 0x45, 0x35):  # conditional jumps stay inside the program
            assert position + 1 + max(jump_true, jump_false) < len(program)
    assert program[-1] == (0x06, 0, 0, ALLOW)  # default: allow


@pytest.mark.parametrize("machine", MACHINES)
def test_no_socket_can_send_anywhere(machine: str) -> None:
    program = seccomp_program(machine, GROUP)
    for family in (1, 2, 10, 16, 17, 40):  # unix, inet, inet6, netlink, packet, vsock
        assert evaluate(program, machine, number("socket", machine), family, 2, 0) == EACCES
    assert evaluate(program, machine, number("socketpair", machine), 1, 2, 0, 0) == ALLOW
    for name in ("connect", "bind", "listen", "accept", "accept4", "sendmsg", "sendmmsg"):
        assert evaluate(program, machine, number(name, machine), 3, 0x7FFF0000, 110) == EPERM, name
    sendto = number("sendto", machine)
    assert evaluate(program, machine, sendto, 3, 0x1000, 5, 0, 0, 0) == ALLOW  # send(): no address
    assert evaluate(program, machine, sendto, 3, 0x1000, 5, 0, 0x2000, 110) == EPERM  # a pathname datagram
    assert evaluate(program, machine, sendto, 3, 0x1000, 5, 0, 0x2000, 1 << 32) == ALLOW  # only the low int counts
    assert evaluate(program, machine, number("recvmsg", machine), 3, 0x1000, 0) == ALLOW


@pytest.mark.parametrize("machine", MACHINES)
def test_clone_never_makes_children_of_the_worker(machine: str) -> None:
    clone = number("clone", machine)
    for allow_processes in (True, False):
        program = seccomp_program(machine, GROUP, allow_processes=allow_processes)
        assert evaluate(program, machine, clone, FORK_FLAGS | CLONE_PARENT) == EPERM
        assert evaluate(program, machine, clone, THREAD_FLAGS | CLONE_PARENT) == EPERM
        assert evaluate(program, machine, clone, FORK_FLAGS | CLONE_NEWUSER) == EPERM
        assert evaluate(program, machine, clone, THREAD_FLAGS) == ALLOW
        assert evaluate(program, machine, number("clone3", machine), 0x1000, 88) == ENOSYS
    assert evaluate(seccomp_program(machine, GROUP), machine, clone, FORK_FLAGS) == ALLOW


@pytest.mark.parametrize("machine", MACHINES)
def test_code_that_keeps_uid_0_gets_threads_but_no_processes(machine: str) -> None:
    program = seccomp_program(machine, GROUP, allow_processes=False)
    assert evaluate(program, machine, number("clone", machine), FORK_FLAGS) == EPERM
    assert evaluate(program, machine, number("clone", machine), 0x4111) == EPERM  # vfork-style posix_spawn
    if machine == "x86_64":
        for name in ("fork", "vfork"):
            assert evaluate(program, machine, number(name, machine)) == EPERM
            assert evaluate(seccomp_program(machine, GROUP), machine, number(name, machine)) == ALLOW


@pytest.mark.parametrize("machine", MACHINES)
def test_no_ipc_object_can_outlive_the_run(machine: str) -> None:
    program = seccomp_program(machine, GROUP)
    for name in DENIED:
        if name.startswith(("shm", "sem", "msg", "mq_")):
            assert evaluate(program, machine, number(name, machine), 0, 4096, 0o1666) == EPERM, name


@pytest.mark.parametrize("machine", MACHINES)
def test_signals_reach_only_the_callers_own_group(machine: str) -> None:
    program = seccomp_program(machine, GROUP)
    kill = number("kill", machine)
    for target in (0, GROUP, -GROUP):
        assert evaluate(program, machine, kill, target, 9) == ALLOW
    for target in (1, -1, GROUP + 1, -(GROUP + 1)):
        assert evaluate(program, machine, kill, target, 9) == EPERM


@pytest.mark.parametrize("machine", MACHINES)
def test_ordinary_calls_pass_and_foreign_abis_die(machine: str) -> None:
    program = seccomp_program(machine, GROUP)
    for name in ("read", "write", "openat", "mmap"):
        assert evaluate(program, machine, number(name, machine), 0, 0, 0) == ALLOW
    assert evaluate(program, machine, number("read", machine), arch=0x40000003) == KILL  # i386 on x86_64
    if machine == "x86_64":
        assert evaluate(program, machine, 0x40000000 | 1) == KILL  # the x32 ABI
