"""A seccomp-BPF program that forbids creating processes and tracing them, while allowing threads.

bubblewrap loads it (``bwrap --seccomp FD``) right before it executes the sandboxed interpreter. It is
the kernel-enforced bound on processes: ``RLIMIT_NPROC`` is never enforced for host root (the kernel
exempts uid 0 even inside a user namespace), and the Python tool is often run as root in containers.

The program (classic BPF over ``struct seccomp_data``, see ``seccomp(2)`` and
``Documentation/userspace-api/seccomp_filter.rst``):

* an architecture other than the one it was built for is killed (no 32-bit or x32 syscall tables);
* ``clone3`` fails with ``ENOSYS`` — its flags live in memory a filter cannot read, and glibc then falls
  back to ``clone``;
* ``fork``, ``vfork`` and a ``clone`` without ``CLONE_THREAD`` fail with ``EPERM``; a ``clone`` with
  ``CLONE_THREAD`` (``pthread_create``) is allowed;
* ``ptrace``, ``process_vm_readv``/``writev``, ``pidfd_getfd`` and ``process_madvise`` fail with ``EPERM``:
  the snippet can neither trace nor read, write or steal from another process (issue #25: a snippet
  attached to the sandbox's first process, which had no limits, and injected code into it);
* ``prctl(PR_SET_PDEATHSIG, …)`` fails with ``EPERM``, so the snippet cannot undo ``--die-with-parent``;
* every other syscall is allowed (files, memory and signals are bounded by the namespaces and rlimits).
"""

from __future__ import annotations

import errno
import platform
import struct

# BPF opcodes (linux/bpf_common.h) and seccomp return values (linux/seccomp.h)
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_CLONE_THREAD = 0x00010000
_PR_SET_PDEATHSIG = 1
_X32_SYSCALL_BIT = 0x40000000
# offsets in struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little endian)
_NR, _ARCH, _ARG0_LOW = 0, 4, 16

# machine -> (AUDIT_ARCH_*, clone, clone3, prctl, syscalls refused outright: the ones that always create a
# process (fork, vfork) and the ones that reach into another process (ptrace, process_vm_readv/writev,
# pidfd_getfd, process_madvise)) — numbers from the kernel's syscall tables of each architecture
_ARCHES = {
    "x86_64": (0xC000003E, 56, 435, 157, (57, 58, 101, 310, 311, 438, 440)),
    "aarch64": (0xC00000B7, 220, 435, 167, (117, 270, 271, 438, 440)),  # arm64 has no fork or vfork syscall
}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def supported() -> bool:
    """Whether a filter can be built for this machine."""
    return platform.machine() in _ARCHES


def no_new_processes_filter() -> bytes:
    """The BPF program (``struct sock_filter[]``) for this machine's architecture."""
    arch, clone, clone3, prctl, refused = _ARCHES[platform.machine()]
    eperm, enosys = _RET_ERRNO | errno.EPERM, _RET_ERRNO | errno.ENOSYS
    # (code, k, jump if true, jump if false): a jump is 0 (the next instruction) or the name of a label below
    program = [
        (_LD_W_ABS, _ARCH, 0, 0),
        (_JEQ_K, arch, 0, "kill"),
        (_LD_W_ABS, _NR, 0, 0),
        (_JGE_K, _X32_SYSCALL_BIT, "kill", 0),
        (_JEQ_K, clone3, "enosys", 0),
        *[(_JEQ_K, nr, "eperm", 0) for nr in refused],
        (_JEQ_K, prctl, "prctl", 0),
        (_JEQ_K, clone, 0, "allow"),
        (_LD_W_ABS, _ARG0_LOW, 0, 0),
        (_JSET_K, _CLONE_THREAD, "allow", "eperm"),
        "prctl",
        (_LD_W_ABS, _ARG0_LOW, 0, 0),
        (_JEQ_K, _PR_SET_PDEATHSIG, "eperm", "allow"),
        "allow",
        (_RET_K, _RET_ALLOW, 0, 0),
        "eperm",
        (_RET_K, eperm, 0, 0),
        "enosys",
        (_RET_K, enosys, 0, 0),
        "kill",
        (_RET_K, _RET_KILL_PROCESS, 0, 0),
    ]
    return _assemble(program)


def _assemble(program: list) -> bytes:
    """Instructions with jumps to labels (the strings in ``program``) → BPF with relative jump offsets."""
    at, n = {}, 0
    for item in program:
        if isinstance(item, str):
            at[item] = n
        else:
            n += 1
    code, i = b"", 0
    for item in program:
        if isinstance(item, str):
            continue
        op, k, jt, jf = item
        jt = at[jt] - i - 1 if isinstance(jt, str) else jt
        jf = at[jf] - i - 1 if isinstance(jf, str) else jf
        code += _insn(op, k, jt, jf)
        i += 1
    return code
