"""The sandbox's seccomp-BPF filter (x86_64 and aarch64): built here, installed last by the harness.

Sent to the sandbox child with the harness (``runner.HARNESS_CODE``) and run in the same namespace, so it is
standard library only and import-light. Works without privileges (Fargate, Lambda) and in every tier:

- no network and no way out by any socket: ``socket()`` is refused for every family (EACCES); the only sockets
  the code can have are a ``socketpair``'s, which it may not ``connect``/``bind``/``listen``/``accept`` nor
  address: ``sendto`` only without an address, no ``sendmsg``/``sendmmsg`` (their address is behind a pointer);
- signals and resource calls only for the caller itself or its own process group (never another process,
  never -1, never a whole uid); no leaving the group (``setsid``/``setpgid``); no ``clone(CLONE_PARENT)``
  (which would make children of the worker, left as its zombies) and no namespace flags; ``clone3`` answers
  ENOSYS (its flags are behind a pointer; libc falls back to ``clone``);
- with ``allow_processes=False`` (code that keeps uid 0, for which the kernel enforces no RLIMIT_NPROC) only
  threads: ``fork``, ``vfork`` and ``clone`` without ``CLONE_THREAD`` are refused;
- no SysV IPC or POSIX message queues (their objects outlive the process, and only the full tier has an IPC
  namespace), no ptrace/process_vm/kcmp/pidfd/io_uring, mounts, chroot, keyrings, bpf, perf, userfaultfd,
  fanotify, file handles.
"""

# ruff: noqa: PLC0415 - ctypes is imported only where the filter is installed
from __future__ import annotations

import os

TYPE_CHECKING = False  # not ``typing``: importing it costs start-up time in every sandbox
if TYPE_CHECKING:
    from collections.abc import Callable

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# name: (x86_64, aarch64). Calls that are denied outright (EPERM; socket: EACCES, clone3: ENOSYS).
DENIED = {
    "socket": (41, 198),
    "connect": (42, 203),
    "bind": (49, 200),
    "listen": (50, 201),
    "accept": (43, 202),
    "accept4": (288, 242),
    "sendmsg": (46, 211),
    "sendmmsg": (307, 269),
    "tkill": (200, 130),
    "setsid": (112, 157),
    "setpgid": (109, 154),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "kcmp": (312, 272),
    "pidfd_open": (434, 434),
    "pidfd_send_signal": (424, 424),
    "pidfd_getfd": (438, 438),
    "process_madvise": (440, 440),
    "process_mrelease": (448, 448),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "unshare": (272, 97),
    "setns": (308, 268),
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "chroot": (161, 51),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "keyctl": (250, 219),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "fanotify_init": (300, 262),
    "name_to_handle_at": (303, 264),
    "open_by_handle_at": (304, 265),
    "shmget": (29, 194),
    "shmat": (30, 196),
    "shmctl": (31, 195),
    "shmdt": (67, 197),
    "semget": (64, 190),
    "semop": (65, 193),
    "semctl": (66, 191),
    "semtimedop": (220, 192),
    "msgget": (68, 186),
    "msgsnd": (69, 189),
    "msgrcv": (70, 188),
    "msgctl": (71, 187),
    "mq_open": (240, 180),
    "mq_unlink": (241, 181),
    "mq_timedsend": (242, 182),
    "mq_timedreceive": (243, 183),
    "mq_notify": (244, 184),
    "mq_getsetattr": (245, 185),
    "clone3": (435, 435),  # its flags are behind a pointer: ENOSYS makes libc fall back to clone()
}
# Denied only for code that may start threads but no processes (aarch64 has neither call).
PROCESS_CALLS: dict[str, tuple[int | None, int | None]] = {"fork": (57, None), "vfork": (58, None)}
# Calls allowed only when the target (argument ``index``) is the caller itself (0) or its own group leader.
OWN_TARGET = {
    "kill": ((62, 129), 0),
    "rt_sigqueueinfo": ((129, 138), 0),
    "tgkill": ((234, 131), 0),
    "rt_tgsigqueueinfo": ((297, 240), 0),
    "prlimit64": ((302, 261), 0),
    "sched_setaffinity": ((203, 122), 0),
    "sched_setscheduler": ((144, 119), 0),
    "sched_setparam": ((142, 118), 0),
    "sched_setattr": ((314, 274), 0),
    "migrate_pages": ((256, 238), 0),
    "move_pages": ((279, 239), 0),
    "setpriority": ((141, 140), 1),  # (which, who, prio); which == PRIO_USER is denied first
    "ioprio_set": ((251, 30), 1),  # (which, who, ioprio); which == IOPRIO_WHO_USER is denied first
}
USER_WIDE = {"setpriority": 2, "ioprio_set": 3}  # PRIO_USER / IOPRIO_WHO_USER: every process of the uid
CLONE = (56, 220)
SENDTO = (44, 206)  # sendto(fd, buf, len, flags, addr, addr_len): allowed only with addr_len == 0
NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
CLONE_PARENT, CLONE_THREAD = 0x00008000, 0x00010000
_RET_KILL, _RET_ALLOW = 0x80000000, 0x7FFF0000
_EPERM, _EACCES, _ENOSYS = 0x00050000 | 1, 0x00050000 | 13, 0x00050000 | 38
LD, JEQ, JSET, JGE, RET = 0x20, 0x15, 0x45, 0x35, 0x06
Instruction = tuple[int, int, int, int]


def _arg(index: int) -> Instruction:
    return (LD, 0, 0, 16 + 8 * index)  # low 32 bits (little endian): what the kernel reads for an int argument


def _guarded(number: int, checks: list[Instruction]) -> list[Instruction]:
    """``checks`` run only for syscall ``number`` (they end by falling through); A is the number again after."""
    return [(JEQ, 0, len(checks), number), *checks, (LD, 0, 0, 0)]


def seccomp_program(machine: str, own_group: int, *, allow_processes: bool = True) -> list[Instruction]:
    """The BPF filter as (code, jt, jf, k) tuples. Module-level so tests can inspect and evaluate it."""
    program, slots = _template(machine, allow_processes)
    for index, negate in slots:
        code, jump_true, jump_false, _ = program[index]
        program[index] = (code, jump_true, jump_false, (-own_group if negate else own_group) & 0xFFFFFFFF)
    return program


def seccomp_image(machine: str, *, allow_processes: bool) -> tuple[bytes, list[tuple[int, bool]]]:
    """The filter as ``struct sock_filter`` bytes (little-endian) with its process-group slots left at 0: built
    once in the worker, so a child only writes its own group into the slots (``install_seccomp``)."""
    program, slots = _template(machine, allow_processes)
    image = b"".join(
        code.to_bytes(2, "little") + bytes((jt, jf)) + k.to_bytes(4, "little") for code, jt, jf, k in program
    )
    return image, slots


def _template(machine: str, allow_processes: bool) -> tuple[list[Instruction], list[tuple[int, bool]]]:
    """The program with every comparison against the caller's process group at k=0, and where they are."""
    column = 0 if machine == "x86_64" else 1
    program = [
        (LD, 0, 0, 4),  # A = arch
        (JEQ, 1, 0, AUDIT_ARCH[machine]),
        (RET, 0, 0, _RET_KILL),
        (LD, 0, 0, 0),  # A = syscall number
        (JGE, 0, 1, 0x40000000),  # x32 ABI numbers: refuse outright
        (RET, 0, 0, _RET_KILL),
    ]
    slots: list[tuple[int, bool]] = []
    targets = (None, False, True)  # the caller itself (0), its group leader (pgid), its group (-pgid)
    for name, (numbers, index) in OWN_TARGET.items():
        block: list[Instruction] = []
        if name in USER_WIDE:
            block += [_arg(0), (JEQ, len(targets) + 1, 0, USER_WIDE[name])]  # -> deny
        block.append(_arg(index))
        for position, negate in enumerate(targets):
            if negate is not None:
                slots.append((len(program) + 1 + len(block), negate))
            block.append((JEQ, len(targets) - position, 0, 0))  # -> allow
        block += [(RET, 0, 0, _EPERM), (RET, 0, 0, _RET_ALLOW)]
        program.append((JEQ, 0, len(block), numbers[column]))
        program += block
    if allow_processes:
        clone = [_arg(0), (JSET, 0, 1, NAMESPACE_FLAGS | CLONE_PARENT), (RET, 0, 0, _EPERM)]
    else:  # refused unless it starts a thread, and never with those flags
        clone = [
            _arg(0),
            (JSET, 1, 0, NAMESPACE_FLAGS | CLONE_PARENT),
            (JSET, 1, 0, CLONE_THREAD),
            (RET, 0, 0, _EPERM),
        ]
    program += _guarded(CLONE[column], clone)
    program += _guarded(SENDTO[column], [_arg(5), (JEQ, 1, 0, 0), (RET, 0, 0, _EPERM)])
    denied: dict[str, tuple[int | None, int | None]] = dict(DENIED)
    if not allow_processes:
        denied.update(PROCESS_CALLS)
    for name, pair in denied.items():
        number = pair[column]
        if number is None:
            continue
        error = _EACCES if name == "socket" else _ENOSYS if name == "clone3" else _EPERM
        program += [(JEQ, 0, 1, number), (RET, 0, 0, error)]
    program.append((RET, 0, 0, _RET_ALLOW))
    return program, slots


def install_seccomp(fail: Callable[[str], None], image: bytes, slots: list[tuple[int, bool]]) -> None:
    """Install ``seccomp_image``'s filter, with this process's group, for it and everything it starts."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    group = os.getpgrp()
    filters = bytearray(image)
    for index, negate in slots:
        filters[index * 8 + 4 : index * 8 + 8] = ((-group if negate else group) & 0xFFFFFFFF).to_bytes(4, "little")

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buffer = (ctypes.c_char * len(filters)).from_buffer(filters)
    fprog = Program(len(filters) // 8, ctypes.addressof(buffer))
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        fail("prctl(NO_NEW_PRIVS): " + os.strerror(ctypes.get_errno()))
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        fail("seccomp filter: " + os.strerror(ctypes.get_errno()))
