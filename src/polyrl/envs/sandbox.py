"""Run untrusted Python snippets in a separate, limited process.

What is enforced, and by what:

* **CPU time** (``RLIMIT_CPU``), **address space** (``RLIMIT_AS``) and **file size** (``RLIMIT_FSIZE``,
  which also caps the output: stdout and stderr go to files in the sandbox directory) — by the kernel.
* **Wall clock** — the parent kills the child's whole process group after ``wall_s``.
* **Working directory** — a fresh temporary directory, deleted afterwards.
* **Network** — where the kernel allows it (root, or unprivileged user namespaces), the child runs in a
  new, empty network namespace (``unshare(CLONE_NEWNET)``): no interface but a downed loopback. Always,
  an audit hook (PEP 578) refuses every ``socket`` event, and proxies are cleared from the environment.
* **Files, processes, native code** — the audit hook refuses opens for writing outside the sandbox
  directory, opens for reading and directory listings outside it and the Python installation, removal
  and renames outside it, ``fork``/``exec``/``system``/``subprocess``/``posix_spawn``, ``ctypes`` and signals.
  ``RLIMIT_NPROC`` is set to the current process count too (the kernel ignores it for root).

Audit hooks stop Python-level access, which is what a language model writes; they are not a security
boundary against code written to escape them (e.g. through a native extension already loaded). Run
policies you do not trust with root privileges inside a container or VM as well.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

_CLONE_NEWNET = 0x40000000

# Runs in the child before the snippet: install the audit hook, then exec the snippet from a file.
_RUNNER = r"""
import os, sys
ROOT = os.path.realpath(sys.argv[1])
READ_OK = tuple({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)})
DENY = ("socket.", "os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "subprocess.",
        "ctypes.", "os.kill", "os.killpg", "signal.pthread_kill", "pty.", "os.setuid", "os.chroot", "sys.remote_exec")
PATH_EVENTS = {"os.remove", "os.rmdir", "os.rename", "os.replace", "os.mkdir", "os.chmod", "os.chown", "os.symlink",
               "os.link", "os.truncate", "os.chdir", "os.utime", "shutil.rmtree",
               "os.chflags", "os.lchflags", "os.setxattr", "os.removexattr"}
def inside(path, roots):
    if isinstance(path, int):
        return True  # already-open descriptors were checked when they were opened
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    real = os.path.realpath(os.path.join(ROOT, path))
    return any(real == r or real.startswith(r + os.sep) for r in roots)
def hook(event, args):
    if event.startswith(DENY) or (event == "import" and args[0] in ("ctypes", "_ctypes")):
        raise PermissionError(f"sandbox: {event} {args[0] + ' ' if event == 'import' else ''}is not allowed")
    if event == "open":
        path, mode, flags = args
        if path is None:
            return
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (flags or 0) & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
        if not inside(path, (ROOT,) if writing else (ROOT,) + READ_OK):
            raise PermissionError(f"sandbox: access to {path!r} is not allowed")
    elif event in ("os.listdir", "os.scandir"):  # the import system lists the stdlib directories
        if isinstance(args[0], (str, bytes)) and not inside(args[0], (ROOT,) + READ_OK):
            raise PermissionError(f"sandbox: listing {args[0]!r} is not allowed")
    elif event in PATH_EVENTS:
        for arg in args[:2]:
            if isinstance(arg, (str, bytes)) and not inside(arg, (ROOT,)):
                raise PermissionError(f"sandbox: {event} outside the sandbox is not allowed")
source = open(os.path.join(ROOT, "snippet.py")).read()
code = compile(source, "<snippet>", "exec")
sys.addaudithook(hook)
exec(code, {"__name__": "__main__"})
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


@dataclass
class SandboxResult:
    stdout: str
    stderr: str
    status: str
    """``ok``, ``error`` (exception or nonzero exit), ``timeout``, ``cpu_limit``, ``memory_limit``, ``output_limit``."""
    returncode: int | None
    network_namespace: bool


_libc = None


def _unshare_network() -> bool:
    global _libc
    try:
        _libc = _libc or ctypes.CDLL(None, use_errno=True)
        return _libc.unshare(_CLONE_NEWNET) == 0
    except (OSError, AttributeError):
        return False


def _limit_child(limits: SandboxLimits, netns_flag: str) -> None:
    # runs in the child between fork and exec; keep it to async-signal-safe-ish calls
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_mb << 20, limits.memory_mb << 20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.output_bytes, limits.output_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
    if _unshare_network():
        Path(netns_flag).touch()


def run_python(source: str, limits: SandboxLimits | None = None) -> SandboxResult:
    """Run ``source`` under ``limits``; never raises for anything the snippet does."""
    limits = limits or SandboxLimits()
    with tempfile.TemporaryDirectory(prefix="polyrl-sandbox-") as tmp:
        root = Path(tmp)
        (root / "snippet.py").write_text(source)
        netns_flag = str(root.parent / f"{root.name}.netns")
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": tmp,
            "TMPDIR": tmp,
            "no_proxy": "*",
            "NO_PROXY": "*",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONIOENCODING": "utf-8",
        }
        with open(root / "stdout", "wb") as out, open(root / "stderr", "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _RUNNER, tmp],
                cwd=tmp,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                preexec_fn=lambda: _limit_child(limits, netns_flag),
            )
            timed_out = False
            try:
                proc.wait(timeout=limits.wall_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(proc)
        netns = os.path.exists(netns_flag)
        if netns:
            os.unlink(netns_flag)
        stdout, stderr = _read(root / "stdout", limits), _read(root / "stderr", limits)
        rc = proc.returncode
        status = _status(rc, timed_out, stderr, os.path.getsize(root / "stdout") >= limits.output_bytes)
        return SandboxResult(stdout, stderr, status, rc, netns)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _read(path: Path, limits: SandboxLimits) -> str:
    with open(path, "rb") as f:
        return f.read(limits.output_bytes).decode("utf-8", "replace")


def _status(rc: int | None, timed_out: bool, stderr: str, output_full: bool) -> str:
    if timed_out:
        return "timeout"
    if rc == -signal.SIGXCPU or (rc == -signal.SIGKILL and not timed_out):
        return "cpu_limit"
    if rc == -signal.SIGXFSZ or output_full:
        return "output_limit"
    if "MemoryError" in stderr:
        return "memory_limit"
    return "ok" if rc == 0 else "error"
