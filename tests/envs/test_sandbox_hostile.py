"""Hostile snippets: every escape reported in issue #13 and the usual bombs, each contained, nothing left behind.

Each test runs one attack in the bubblewrap sandbox and asserts both halves: the attack failed (or only
touched the sandbox's private tmpfs), and afterwards no file exists outside (the target paths, a canary
directory on the host) and no process survives (a marker in ``/proc/*/comm`` or ``/proc/*/cmdline``).
Every snippet first names its own process with the marker, so the sandboxed interpreter itself is
checked for too.
"""

import hashlib
import os
import shutil
import socket
import struct
import sysconfig
import uuid
from pathlib import Path

import pytest
from system_packages import needs_bwrap

from polyrl.envs import seccomp
from polyrl.envs.sandbox import SandboxLimits, run_python

pytestmark = needs_bwrap
LIMITS = SandboxLimits(cpu_s=1, wall_s=15.0, memory_mb=256, output_bytes=20_000, tmp_mb=4)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def marker():
    return f"hostile{uuid.uuid4().hex[:8]}"  # 15 characters: fits in /proc/PID/comm


@pytest.fixture
def canary(tmp_path):
    """A host directory the attacks aim at; it must stay empty."""
    directory = tmp_path / "canary"
    directory.mkdir()
    yield directory
    assert list(directory.iterdir()) == []


def attack(marker: str, source: str, limits: SandboxLimits = LIMITS):
    """Run ``source`` as a marked process; assert that no marked process and no marked /tmp file survive."""
    result = run_python(f"open('/proc/self/comm', 'w').write({marker!r})\n{source}", limits)
    assert survivors(marker) == [], result
    assert [p for p in os.listdir("/tmp") if marker in p] == []
    return result


def survivors(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue  # exited while we looked
        if marker in comm or marker in cmdline:
            found.append(int(pid))
    return found


def test_fork_exec_of_bin_sh_is_refused(marker, canary):
    src = f"""
import _posixsubprocess, os
r, w = os.pipe()
_posixsubprocess.fork_exec([b'/usr/bin/sh', b'-c', b'touch {canary}/pwned; sleep 60 # {marker}'],
    [b'/usr/bin/sh'], True, (), None, None, -1, -1, -1, -1, -1, -1, r, w, True, True, -1, None, None, None, -1,
    None, False)  # the argument list of Python 3.11-3.13 (see subprocess.Popen._execute_child)
"""
    r = attack(marker, src)
    assert r.status == "error" and "PermissionError: [Errno 1] Operation not permitted" in r.stderr


def test_setsid_background_process_is_refused(marker):
    src = f"import subprocess\nsubprocess.Popen(['/usr/bin/sleep', '60', '{marker}'], start_new_session=True)"
    r = attack(marker, src)
    assert r.status == "error" and "Operation not permitted" in r.stderr


def test_fork_and_setsid_is_refused(marker):
    r = attack(marker, "import os\nif os.fork() == 0:\n    os.setsid()\n    import time\n    time.sleep(60)")
    assert r.status == "error" and "PermissionError" in r.stderr


def test_without_the_seccomp_filter_a_setsid_background_process_still_dies_with_the_sandbox(marker, monkeypatch):
    # the pid namespace is the second line of defence: its processes die when the snippet's process ends
    monkeypatch.setattr(seccomp, "no_new_processes_filter", lambda: struct.pack("=HBBI", 0x06, 0, 0, 0x7FFF0000))
    src = f"import subprocess\np = subprocess.Popen(['/usr/bin/sleep', '60', '{marker}'], start_new_session=True)\n"
    src += "print(p.pid)"
    r = attack(marker, src)
    assert r.status == "ok" and r.stdout.strip().isdigit()  # it started, and is gone (checked in attack)


def test_dir_fd_and_a_symlink_cannot_read_etc_passwd(marker):
    src = """
import os
os.symlink('/etc/passwd', 'link')
fd = os.open('/tmp', os.O_RDONLY)
print(os.read(os.open('link', os.O_RDONLY, dir_fd=fd), 100))
"""
    r = attack(marker, src)
    assert r.status == "error" and "FileNotFoundError" in r.stderr and "root:" not in r.stdout


def test_dir_fd_and_a_symlink_cannot_write_outside(marker, canary):
    src = f"""
import os
os.symlink({str(canary / "escaped")!r}, 'link')
fd = os.open('/tmp', os.O_RDONLY)
os.write(os.open('link', os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), b'escaped')
"""
    r = attack(marker, src)
    assert r.status == "error" and "FileNotFoundError" in r.stderr


@pytest.mark.parametrize(
    "make",
    [
        "os.mkfifo(target)",
        "os.mknod(target, 0o600 | stat.S_IFIFO)",
        "sqlite3.connect(target).execute('create table t (x)')",
    ],
)
def test_files_created_at_a_host_path_stay_in_the_private_tmpfs(marker, canary, make):
    # the host path does not exist in the sandbox; recreating its directories only touches the sandbox's tmpfs
    src = f"import os, sqlite3, stat\ntarget = {str(canary / 'made')!r}\nos.makedirs({str(canary)!r})\n{make}\n"
    src += "print(os.path.exists(target))"
    r = attack(marker, src)
    assert (r.status, r.stdout) == ("ok", "True\n")


def test_mknod_of_a_device_is_refused(marker, canary):
    src = f"import os, stat\nos.mknod({str(canary / 'mem')!r}, 0o600 | stat.S_IFCHR, os.makedev(1, 1))"
    r = attack(marker, src)
    assert r.status == "error" and ("PermissionError" in r.stderr or "FileNotFoundError" in r.stderr)


def test_truncating_a_file_of_the_python_installation_is_refused(marker):
    victim = Path(sysconfig.get_paths()["stdlib"]) / "this.py"  # harmless to restore should the test fail
    before = victim.read_bytes()
    try:
        r = attack(marker, f"import os\nos.open({str(victim)!r}, os.O_RDONLY | os.O_TRUNC)")
        assert r.status == "error" and "Read-only file system" in r.stderr
        assert hashlib.sha256(victim.read_bytes()).digest() == hashlib.sha256(before).digest()
    finally:
        if victim.read_bytes() != before:
            victim.write_bytes(before)


def test_replacing_main_and_hooks_changes_nothing(marker, canary):
    # the audit-hook sandbox fell to one line through sys.modules['__main__']; this one has no hook to replace
    src = f"""
import sys
sys.modules['__main__'].__dict__.clear()
sys.addaudithook(lambda *args: None)
open({str(canary / "escaped")!r}, 'w').write('escaped')
"""
    r = attack(marker, src)
    assert r.status == "error" and "FileNotFoundError" in r.stderr


def test_the_network_is_unreachable_even_to_a_listening_host_socket(marker):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.5)
        port = server.getsockname()[1]
        r = attack(marker, f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)")
        assert r.status == "error" and "ConnectionRefusedError" in r.stderr
        with pytest.raises(TimeoutError):
            server.accept()


def test_root_and_the_repository_are_not_visible(marker):
    src = f"""
import os
print(os.path.exists({str(REPO / "README.md")!r}), os.path.exists('/work'), os.path.exists('/etc'))
print(sorted(os.listdir('/root')) if os.path.exists('/root') else [])
"""
    r = attack(marker, src)
    first, second = r.stdout.splitlines()
    assert first == "False False False"
    assert second in ("[]", "['.pyenv']")  # at most the path to a pyenv interpreter, nothing of /root itself


def test_reading_a_file_of_root_fails(marker):
    if not any(Path("/root").glob(".*rc")):
        pytest.skip("no dotfile in /root to aim at")
    target = next(Path("/root").glob(".*rc"))
    r = attack(marker, f"print(open({str(target)!r}).read())")
    assert r.status == "error" and "FileNotFoundError" in r.stderr and r.stdout == ""


def test_a_fork_bomb_is_refused(marker):
    r = attack(marker, "import os\nwhile True:\n    os.fork()")
    assert r.status == "error" and "PermissionError" in r.stderr


def test_a_memory_bomb_hits_the_memory_limit(marker):
    r = attack(marker, "chunks = []\nwhile True:\n    chunks.append(bytearray(1 << 24))")
    assert r.status == "memory_limit"


def test_an_infinite_loop_hits_the_cpu_limit(marker):
    assert attack(marker, "while True:\n    pass").status == "cpu_limit"


def test_sleeping_forever_hits_the_wall_clock(marker):
    r = attack(marker, "import time\ntime.sleep(60)", SandboxLimits(wall_s=1.0))
    assert r.status == "timeout"


def test_huge_output_is_cut_at_the_output_limit(marker):
    r = attack(marker, "import sys\nfor _ in range(10_000):\n    sys.stdout.write('x' * 100_000)")
    assert r.status == "output_limit" and len(r.stdout) == LIMITS.output_bytes


def test_filling_tmp_stops_at_the_tmpfs_size(marker):
    src = f"""
for i in range(1000):
    with open('/tmp/{marker}-' + str(i), 'wb') as f:
        f.write(b'x' * 19_000)
"""
    r = attack(marker, src)  # 1000 files of 19 kB = 19 MB > tmp_mb (4 MB)
    assert r.status == "error" and "No space left on device" in r.stderr


def test_the_trainer_cannot_be_signalled_and_only_the_sandbox_processes_are_visible(marker):
    # the trainer and its parent; a parent that is init (pytest started with setsid) is pid 1, which inside the
    # sandbox's PID namespace is the sandbox's own first process, so it is left out
    targets = [pid for pid in (os.getpid(), os.getppid()) if pid != 1]
    src = f"""
import os, signal
for pid in {targets}:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        print(pid, 'not visible')
print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))
"""
    r = attack(marker, src)
    assert r.stdout.splitlines() == [*(f"{pid} not visible" for pid in targets), "[1]"]


# -- issue #25: the snippet attached to the sandbox's first process (bwrap, without limits) with ptrace,
# injected code that cleared its parent-death signal, mapped 600 MB and outlived the call under host init
PTRACE_EVERYTHING = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]

def errno_of(result):
    return 0 if result == 0 else ctypes.get_errno()

for pid in sorted(int(p) for p in os.listdir('/proc') if p.isdigit()):
    for request, name in ((16, 'attach'), (0x4206, 'seize')):
        print(pid, name, errno_of(libc.ptrace(request, pid, None, None)))
print('traceme', errno_of(libc.ptrace(0, 0, None, None)))
buf = ctypes.create_string_buffer(8)
iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
process_vm_readv = 310 if os.uname().machine == 'x86_64' else 270
print('vm_readv', errno_of(0 if libc.syscall(process_vm_readv, 1, iov, 1, iov, 1, 0) >= 0 else -1))
"""


def test_no_process_can_be_traced_from_inside_the_sandbox(marker):
    r = attack(marker, PTRACE_EVERYTHING)
    lines = r.stdout.splitlines()
    assert r.status == "ok", r
    assert lines[0].startswith("1 attach")  # the sandbox's first process is visible, and cannot be attached to
    assert all(line.rsplit(" ", 1)[1] == "1" for line in lines), lines  # every request: EPERM


def test_the_parent_death_signal_cannot_be_cleared(marker):
    src = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print(libc.prctl(1, 0, 0, 0, 0), ctypes.get_errno())  # PR_SET_PDEATHSIG 0
"""
    assert attack(marker, src).stdout.split() == ["-1", "1"]


def test_the_issues_attack_leaves_nothing_alive_and_stays_within_its_limits(marker):
    src = """
import ctypes, mmap, os, time
libc = ctypes.CDLL(None, use_errno=True)
print('attach', libc.ptrace(16, 1, 0, 0), 'clear pdeathsig', libc.prctl(1, 0, 0, 0, 0), flush=True)
try:
    region = mmap.mmap(-1, 600 << 20)
    print('mapped 600 MB', flush=True)
except OSError as exc:
    print('map refused', exc.errno, flush=True)
time.sleep(60)
"""
    r = attack(marker, src, SandboxLimits(cpu_s=1, wall_s=2.0, memory_mb=256))
    assert r.status == "timeout"
    assert r.stdout.splitlines() == ["attach -1 clear pdeathsig -1", "map refused 12"]  # ENOMEM


LIMITS_OF_ALL = """
import os
for pid in sorted(int(p) for p in os.listdir('/proc') if p.isdigit()):
    for line in open(f'/proc/{pid}/limits'):
        if line.startswith(('Max cpu time', 'Max address space', 'Max processes')):
            print(pid, ' '.join(line.split()[:-1]))
"""


def test_every_process_inside_the_sandbox_has_the_limits_from_its_first_instruction(marker):
    r = attack(marker, LIMITS_OF_ALL, SandboxLimits(cpu_s=1, wall_s=15.0, memory_mb=256, processes=16))
    assert r.stdout.splitlines() == [
        "1 Max cpu time 1 2",
        "1 Max processes 16 16",
        f"1 Max address space {256 << 20} {256 << 20}",
    ]


@pytest.mark.parametrize("prlimit", ["prlimit", "the interpreter"])
def test_bwrap_itself_runs_under_the_cpu_and_memory_limits(marker, monkeypatch, prlimit):
    """The limits are set before bwrap is executed (by util-linux's prlimit, else by the interpreter): bwrap,
    outside the sandbox's pid namespace, has them too."""
    import threading

    from polyrl.envs import sandbox

    if prlimit != "prlimit":
        which = shutil.which
        monkeypatch.setattr(sandbox.shutil, "which", lambda name: None if name == "prlimit" else which(name))

    results = []
    thread = threading.Thread(target=lambda: results.append(attack(marker, "import time\ntime.sleep(3)")))
    thread.start()
    seen = {}
    while thread.is_alive() and not seen:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
                if (
                    Path(f"/proc/{pid}/comm").read_text().strip() == "bwrap"
                    and int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid()
                ):
                    seen[pid] = Path(f"/proc/{pid}/limits").read_text()
            except (OSError, ValueError):
                continue
    thread.join()
    assert results[0].status == "ok" and seen
    for limits in seen.values():
        rows = {
            " ".join(line.split()[:-3]): line.split()[-3:-1]
            for line in limits.splitlines()[1:]
            if len(line.split()) > 3
        }
        assert rows["Max cpu time"] == [str(LIMITS.cpu_s), str(LIMITS.cpu_s + 1)]
        assert rows["Max address space"] == [str(LIMITS.memory_mb << 20)] * 2
