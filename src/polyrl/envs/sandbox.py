"""Run untrusted Python snippets in a bubblewrap sandbox.

Every snippet is model output and therefore hostile. Isolation comes from the kernel, set up by
bubblewrap (``bwrap``, Debian package ``bubblewrap``), never from checks inside the interpreter:

* **Namespaces** — new user, pid, network, ipc, uts and cgroup namespaces (``--unshare-all
  --unshare-user``), no further user namespaces (``--disable-userns``), all capabilities dropped, a new
  session (no terminal to inject keystrokes into), uid/gid 65534 inside. The snippet's interpreter is the
  pid namespace's first process (``--as-pid-1``: no bwrap reaper inside to attach to), so when it ends,
  or is killed at the wall clock, every process of the namespace ends with it.
* **Filesystem** — a fresh root with read-only binds of ``/usr``, ``/lib*`` and the interpreter's prefix
  only (no ``/etc``, ``/root``, ``/home``, working directory or repository), the ``/proc`` of its own pid
  namespace, a minimal read-only ``/dev`` (null, zero, random, …), and a size-limited tmpfs ``/tmp`` — the
  only writable place and the working directory. It vanishes with the sandbox.
* **Processes** — a seccomp filter (:mod:`polyrl.envs.seccomp`) refuses fork, vfork and non-thread
  clone; ``RLIMIT_NPROC`` as well (which the kernel enforces for users other than root). It also refuses
  ptrace and the other calls that reach into another process, and clearing the parent-death signal.
* **Resources** — CPU seconds, address space, file size (which also caps stdout and stderr, memory files
  in the parent), open files. CPU, address space, file size and core size are set before bwrap is
  executed, so every process of the sandbox has them from its first instruction; the interpreter sets
  them again with the process and file limits. A wall clock, after which bwrap's process group and the
  namespace's first process (through a pidfd opened while it ran) are killed, and waited for.
* **Environment** — cleared; only ``PYTHON*`` encoding variables, ``HOME=/tmp`` and ``TMPDIR=/tmp``.

The interpreter is the trainer's own base interpreter (``sys._base_executable``) with ``-I -S``: the
standard library, no site-packages. Where bubblewrap is missing the sandbox refuses with a one-line
:class:`~polyrl.errors.UserError`, unless the caller opts into ``mode="unsafe_local"``: the same
interpreter, limits and wall clock, but no isolation at all.
"""

from __future__ import annotations

import functools
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import warnings
from dataclasses import dataclass
from typing import Literal, get_args

from polyrl.envs import seccomp
from polyrl.errors import UserError

SandboxMode = Literal["bwrap", "unsafe_local"]
SANDBOX_MODES: tuple[str, ...] = get_args(SandboxMode)
_MIN_BWRAP = (0, 8, 0)
_SANDBOX_UID = 65534  # "nobody" inside the user namespace
_SYSTEM_DIRS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32")
_PYTHON_ENV = {"PYTHONUTF8": "1", "PYTHONIOENCODING": "utf-8", "PYTHONDONTWRITEBYTECODE": "1"}

# Runs outside, in place of bwrap: the limits every process of the sandbox inherits, then exec bwrap.
_LIMITED_EXEC = r"""
import os, resource, sys
cpu_s, memory, file_size = map(int, sys.argv[1:4])
for limit, value in ((resource.RLIMIT_CPU, (cpu_s, cpu_s + 1)), (resource.RLIMIT_AS, (memory, memory)),
                     (resource.RLIMIT_FSIZE, (file_size, file_size)), (resource.RLIMIT_CORE, (0, 0))):
    resource.setrlimit(limit, value)
os.execv(sys.argv[4], sys.argv[4:])
"""

# Runs inside the sandbox before the snippet: set the rlimits, read the snippet from stdin, run it.
_RUNNER = r"""
import resource, sys
cpu_s, memory, file_size, open_files, processes = map(int, sys.argv[1:6])
source = sys.stdin.buffer.read()
sys.stdin.close()
for limit, value in ((resource.RLIMIT_CPU, (cpu_s, cpu_s + 1)), (resource.RLIMIT_AS, (memory, memory)),
                     (resource.RLIMIT_FSIZE, (file_size, file_size)), (resource.RLIMIT_NOFILE, (open_files, open_files)),
                     (resource.RLIMIT_NPROC, (processes, processes)), (resource.RLIMIT_CORE, (0, 0))):
    if value[0] >= 0:  # -1: leave as it is
        resource.setrlimit(limit, value)
sys.argv = ["<snippet>"]
exec(compile(source, "<snippet>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
"""


@dataclass(frozen=True)
class SandboxLimits:
    cpu_s: int = 2
    """CPU seconds (``RLIMIT_CPU``)."""
    wall_s: float = 5.0
    """Wall-clock seconds before the process group is killed."""
    memory_mb: int = 256
    """Address-space limit (``RLIMIT_AS``)."""
    output_bytes: int = 64_000
    """Largest file the snippet may write, stdout and stderr included (``RLIMIT_FSIZE``)."""
    tmp_mb: int = 16
    """Size of the private tmpfs ``/tmp``, all files together."""
    open_files: int = 64
    """Open file descriptors (``RLIMIT_NOFILE``)."""
    processes: int = 16
    """``RLIMIT_NPROC`` inside the sandbox's user namespace, threads included (not enforced for root)."""


@dataclass
class SandboxResult:
    stdout: str
    stderr: str
    status: str
    """``ok``, ``error`` (exception or nonzero exit), ``timeout``, ``cpu_limit``, ``memory_limit``, ``output_limit``."""
    returncode: int | None
    """The snippet's exit code; negative for a signal."""
    isolated: bool
    """Whether the snippet ran inside bubblewrap (False in ``unsafe_local`` mode)."""


def interpreter() -> str:
    """The trainer's base interpreter (outside any virtual environment), symlinks resolved."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


@functools.cache
def bwrap_arguments() -> tuple[str, ...]:
    """The namespaces and read-only binds shared by every call (the mounts that depend on limits follow)."""
    args = [
        "--unshare-all",
        "--unshare-user",
        "--as-pid-1",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--uid",
        str(_SANDBOX_UID),
        "--gid",
        str(_SANDBOX_UID),
        "--hostname",
        "sandbox",
    ]
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in python_roots():
        args += ["--ro-bind", path, path]
    return (*args, "--proc", "/proc", "--dev", "/dev")


def python_roots() -> list[str]:
    """Directories the interpreter needs that the system directories do not hold: its prefix and library."""
    found = {interpreter().rsplit("/", 2)[0], sysconfig.get_config_var("LIBDIR") or "", sys.base_prefix}
    found |= {sys.base_exec_prefix}
    real = sorted({os.path.realpath(p) for p in found if p and os.path.isdir(p)})
    system = tuple(os.path.realpath(d) + "/" for d in _SYSTEM_DIRS if os.path.isdir(d))
    roots = [p for p in real if not (p + "/").startswith(system) and p != "/"]
    return [p for p in roots if not any(p.startswith(q + "/") for q in roots)]


def _bwrap_command(limits: SandboxLimits, seccomp_fd: int) -> list[str]:
    """bwrap's arguments for one call: the shared ones, the sized tmpfs, the environment, the filter, the runner."""
    tmp = ["--perms", "1777", "--size", str(limits.tmp_mb << 20), "--tmpfs", "/tmp", "--chdir", "/tmp"]
    read_only = ["--remount-ro", "/dev", "--remount-ro", "/"]  # after every mount point is made
    env = ["--clearenv"]
    for name, value in {"HOME": "/tmp", "TMPDIR": "/tmp", **_PYTHON_ENV}.items():
        env += ["--setenv", name, value]
    filters = ["--seccomp", str(seccomp_fd)]
    return [*bwrap_arguments(), *tmp, *read_only, *env, *filters, "--", *_python_command(limits)]


def _python_command(limits: SandboxLimits, isolated: bool = True) -> list[str]:
    # outside a user namespace RLIMIT_NPROC would count every process of the user, not the snippet's
    processes = limits.processes if isolated else -1
    numbers = (limits.cpu_s, limits.memory_mb << 20, limits.output_bytes, limits.open_files, processes)
    return [interpreter(), "-I", "-S", "-c", _RUNNER, *map(str, numbers)]


def check_sandbox(mode: SandboxMode = "bwrap") -> None:
    """Raise a one-line UserError unless snippets can run in ``mode`` (call it before training starts)."""
    if mode not in SANDBOX_MODES:
        raise UserError(f"unknown python sandbox {mode!r}; choose one of {', '.join(SANDBOX_MODES)}")
    if mode == "unsafe_local":
        return
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise UserError(
            "the python tool needs bubblewrap: apt-get install bubblewrap (Debian package `bubblewrap`), "
            "or set env.python_sandbox: unsafe_local to run model-written code without isolation"
        )
    version = bwrap_version(bwrap)
    if version < _MIN_BWRAP:
        found, needed = ".".join(map(str, version)), ".".join(map(str, _MIN_BWRAP))
        raise UserError(f"bubblewrap {found} is too old for the python sandbox (needs {needed}: --disable-userns)")
    if not seccomp.supported():
        raise UserError(f"the python sandbox's seccomp filter does not support this machine ({os.uname().machine})")
    _probe_bwrap(bwrap)


@functools.cache
def bwrap_version(bwrap: str) -> tuple[int, ...]:
    """The version of the bubblewrap at path ``bwrap``, e.g. ``(0, 8, 0)``; ``(0,)`` when it does not say."""
    words = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout.split()
    digits = words[-1].split(".") if words else []
    return tuple(int(d) for d in digits if d.isdigit()) or (0,)


@functools.cache
def _probe_bwrap(bwrap: str) -> None:
    # cached per path: a probe that passed holds for the process
    result = run_python("print(6 * 7)", SandboxLimits(wall_s=30.0), mode="bwrap")
    if result.stdout != "42\n":
        reason = (result.stderr.strip().splitlines() or [result.status])[-1]
        raise UserError(f"bubblewrap cannot start the python sandbox here: {reason[:300]}")


def _warn_unsafe() -> None:
    # Python's default warning filter shows it once per process
    warnings.warn(
        "python sandbox 'unsafe_local': model-written code runs without isolation (only rlimits and a wall clock)",
        stacklevel=3,
    )


def run_python(source: str, limits: SandboxLimits | None = None, mode: SandboxMode = "bwrap") -> SandboxResult:
    """Run ``source`` under ``limits``; never raises for anything the snippet does."""
    limits = limits or SandboxLimits()
    bwrap = shutil.which("bwrap")
    if mode not in SANDBOX_MODES or (mode == "bwrap" and bwrap is None):
        check_sandbox(mode)  # raises the one-line error
    if mode == "unsafe_local":
        _warn_unsafe()
    fds = [_anonymous_file(f"polyrl-sandbox-{name}") for name in ("in", "out", "err", "bpf")]
    stdin, stdout, stderr, filter_fd = fds
    try:
        _fill(stdin, source.encode("utf-8", "surrogatepass"))
        streams = (stdin, stdout, stderr)
        if mode == "bwrap":
            _fill(filter_fd, seccomp.no_new_processes_filter())
            info_r, info_w = os.pipe()
            fds.append(info_r)  # info_w is closed by _run, as soon as bwrap has it
            command = [*_limited(limits), bwrap, "--info-fd", str(info_w), *_bwrap_command(limits, filter_fd)]
            returncode, timed_out = _run(command, limits.wall_s, streams, "/", {}, (filter_fd, info_w), info_r)
            if returncode is not None and returncode > 128:
                returncode = -(returncode - 128)  # bwrap reports a child killed by signal N as 128 + N
        else:
            with tempfile.TemporaryDirectory(prefix="polyrl-sandbox-") as scratch:
                env = {"HOME": scratch, "TMPDIR": scratch, **_PYTHON_ENV}
                returncode, timed_out = _run(_python_command(limits, False), limits.wall_s, streams, scratch, env, ())
        out, out_size = _read(stdout, limits.output_bytes)
        err, _ = _read(stderr, limits.output_bytes)
    finally:
        for fd in fds:
            os.close(fd)
    status = _status(returncode, timed_out, err, out_size >= limits.output_bytes)
    return SandboxResult(out, err, status, returncode, mode == "bwrap")


def _limited(limits: SandboxLimits) -> list[str]:
    """The command that sets the inherited limits and then executes the rest of the command line (bwrap):
    util-linux's ``prlimit`` (about 2 ms), else the interpreter (about 30 ms)."""
    memory = limits.memory_mb << 20
    prlimit = shutil.which("prlimit")
    if prlimit is not None:
        spans = (f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}", f"--as={memory}", f"--fsize={limits.output_bytes}")
        return [prlimit, *spans, "--core=0", "--"]
    numbers = (limits.cpu_s, memory, limits.output_bytes)
    return [interpreter(), "-I", "-S", "-c", _LIMITED_EXEC, *map(str, numbers)]


def _namespace_pidfd(info_r: int, bwrap_pid: int, deadline: float) -> int | None:
    """A pidfd of the sandbox's first process, from the ``{"child-pid": N}`` bwrap writes to its info pipe.

    It is opened while bwrap (that process's parent, which alone can reap it) runs, and checked to be bwrap's
    child, so it can only name that process; None when bwrap failed before it started one."""
    data = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([info_r], [], [], max(deadline - time.monotonic(), 0))
        chunk = os.read(info_r, 4096) if ready else b""
        if not chunk:
            return None
        data += chunk
        try:
            child = int(json.loads(data)["child-pid"])
        except (ValueError, KeyError, TypeError):
            continue  # not the whole object yet
        try:
            pidfd = os.pidfd_open(child)
            with open(f"/proc/{child}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        if parent == bwrap_pid:
            return pidfd
        os.close(pidfd)
        return None
    return None


def _kill_namespace(pidfd: int | None, timeout_s: float = 2.0) -> None:
    """SIGKILL the sandbox's first process and wait until it has exited, and with it every process of its pid
    namespace (the kernel kills and reaps them before their pid 1 exits). bwrap's own exit does not imply it:
    ``--die-with-parent`` is a signal delivered asynchronously."""
    if pidfd is None:
        return
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        select.select([pidfd], [], [], timeout_s)  # a pidfd is readable once its process has exited
    except ProcessLookupError:
        pass  # exited already
    finally:
        os.close(pidfd)


def _anonymous_file(name: str) -> int:
    """A file descriptor of a file with no name: in memory on Linux, an unlinked temporary file elsewhere."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create(name, os.MFD_CLOEXEC)
    fd, path = tempfile.mkstemp(prefix=name)
    os.unlink(path)
    return fd


def _fill(fd: int, data: bytes) -> None:
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)


def _run(
    command: list[str],
    wall_s: float,
    streams: tuple[int, int, int],
    cwd: str,
    env: dict,
    pass_fds: tuple[int, ...],
    info_r: int | None = None,
) -> tuple[int | None, bool]:
    """Run ``command`` in a new session; after ``wall_s`` (or at exit) SIGKILL its whole process group and,
    given bwrap's info pipe ``info_r``, the sandbox's first process."""
    deadline = time.monotonic() + wall_s
    try:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=streams[0],
            stdout=streams[1],
            stderr=streams[2],
            pass_fds=pass_fds,
            start_new_session=True,
        )
    finally:
        for fd in pass_fds[1:] if info_r is not None else ():
            os.close(fd)  # the write end of the info pipe is bwrap's now: its exit ends the pipe
    pidfd = None
    timed_out = False
    try:
        if info_r is not None:
            pidfd = _namespace_pidfd(info_r, proc.pid, deadline)
        proc.wait(timeout=max(deadline - time.monotonic(), 0))
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        if pidfd is not None:  # the sandbox first, so that bwrap, its parent, reaps it and exits
            _kill_namespace(pidfd)
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
        _kill_group(proc)
    return proc.returncode, timed_out


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _read(fd: int, limit: int) -> tuple[str, int]:
    size = os.fstat(fd).st_size
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, min(size, limit)).decode("utf-8", "replace"), size


def _status(rc: int | None, timed_out: bool, stderr: str, output_full: bool) -> str:
    if timed_out:
        return "timeout"
    if rc == -signal.SIGXCPU or rc == -signal.SIGKILL:
        return "cpu_limit"
    if rc == -signal.SIGXFSZ or output_full:
        return "output_limit"
    if "MemoryError" in stderr:
        return "memory_limit"
    return "ok" if rc == 0 else "error"
