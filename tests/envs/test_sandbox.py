"""The sandbox runs ordinary snippets, reports limits, and refuses to run unisolated unless asked.

Hostile snippets (escapes, bombs) are in test_sandbox_hostile.py. Limits are small so the shared machine
never feels them; wall clocks are generous because CPU seconds arrive slowly on a loaded machine.
"""

import struct

import pytest
from system_packages import needs_bwrap

from polyrl.envs import EnvConfig, get_env_task, seccomp
from polyrl.envs.sandbox import (
    SandboxLimits,
    bwrap_arguments,
    check_sandbox,
    python_roots,
    run_python,
)
from polyrl.envs.tool_use import python_tool
from polyrl.envs.tools import ToolError
from polyrl.errors import UserError

LIMITS = SandboxLimits(cpu_s=1, wall_s=15.0, memory_mb=256, output_bytes=20_000)


@pytest.fixture
def no_bwrap(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # shutil.which("bwrap") finds nothing


@needs_bwrap
def test_plain_code_runs_and_prints():
    r = run_python("print(sum(range(10)))", LIMITS)
    assert (r.status, r.stdout, r.isolated) == ("ok", "45\n", True)


@needs_bwrap
def test_the_snippet_runs_as_nobody_in_tmp_with_a_cleared_environment():
    r = run_python("import os\nprint(os.getuid(), os.getcwd(), sorted(os.environ))", LIMITS)
    assert r.stdout.split(" ", 2)[:2] == ["65534", "/tmp"]
    assert "PATH" not in r.stdout and "HOME" in r.stdout


@needs_bwrap
def test_threads_are_allowed():
    src = "import threading\nt = threading.Thread(target=print, args=('from a thread',))\nt.start()\nt.join()"
    assert run_python(src, LIMITS).stdout == "from a thread\n"


@needs_bwrap
def test_files_in_tmp_work_within_one_call_and_are_gone_in_the_next():
    first = run_python("open('note.txt', 'w').write('hi')\nprint(open('/tmp/note.txt').read())", LIMITS)
    second = run_python("import os\nprint(os.path.exists('/tmp/note.txt'))", LIMITS)
    assert (first.stdout, second.stdout) == ("hi\n", "False\n")


@needs_bwrap
def test_an_exception_is_an_error_with_the_traceback_on_stderr():
    r = run_python("1 / 0", LIMITS)
    assert (r.status, r.returncode) == ("error", 1) and r.stderr.strip().endswith(
        "ZeroDivisionError: division by zero"
    )


@needs_bwrap
def test_the_exit_code_of_the_snippet_is_reported():
    r = run_python("import sys\nsys.exit(3)", LIMITS)
    assert (r.status, r.returncode) == ("error", 3)


@needs_bwrap
def test_the_standard_library_imports():
    r = run_python("import fractions, json, math, re, sqlite3\nprint(math.comb(10, 3))", LIMITS)
    assert r.stdout == "120\n"


def test_only_the_system_directories_and_the_interpreter_are_bound():
    args = bwrap_arguments()
    sources = {args[i + 1] for i, a in enumerate(args) if a == "--ro-bind"}
    assert sources <= {"/usr", "/lib", "/lib32", "/lib64", "/libx32", *python_roots()}
    assert not any(s.startswith(("/etc", "/home", "/work")) or s == "/root" for s in sources)
    assert {"--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session"} <= set(args)


def test_the_seccomp_program_is_whole_instructions_ending_in_returns():
    if not seccomp.supported():
        pytest.skip("no seccomp filter for this architecture")
    program = seccomp.no_new_processes_filter()
    insns = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    assert len(program) % 8 == 0 and all(code == 0x06 for code, *_ in insns[-4:])
    # every jump lands inside the program
    assert all(i + 1 + max(jt, jf) < len(insns) for i, (code, jt, jf, _) in enumerate(insns) if code & 0x07 == 0x05)


def test_without_bwrap_the_sandbox_refuses_naming_the_package(no_bwrap):
    with pytest.raises(UserError, match="apt-get install bubblewrap") as err:
        run_python("print(1)", LIMITS)
    assert "\n" not in str(err.value) and "unsafe_local" in str(err.value)


def test_without_bwrap_env_python_fails_when_the_task_is_resolved(no_bwrap):
    with pytest.raises(UserError, match="bubblewrap"):
        get_env_task("env/python:addition", EnvConfig())


@pytest.fixture
def fake_bwrap(monkeypatch, tmp_path):
    """Put a shell script named bwrap first on PATH; returns a function that sets the script's body."""

    def install(body: str):
        fake = tmp_path / "bwrap"
        fake.write_text(f"#!/bin/sh\n{body}\n")
        fake.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")

    return install


def test_a_bubblewrap_older_than_0_8_is_a_one_line_error(fake_bwrap):
    fake_bwrap("echo bubblewrap 0.6.1")
    with pytest.raises(UserError, match=r"bubblewrap 0.6.1 is too old for the python sandbox \(needs 0.8.0"):
        check_sandbox("bwrap")


def test_a_bubblewrap_that_cannot_create_namespaces_fails_the_start_up_check(fake_bwrap):
    fake_bwrap('[ "$1" = --version ] && echo bubblewrap 0.8.0 && exit 0\necho "bwrap: No permissions" >&2; exit 1')
    with pytest.raises(UserError, match=r"^bubblewrap cannot start the python sandbox here: bwrap: No permissions$"):
        check_sandbox("bwrap")


def test_unsafe_local_mode_runs_unisolated_and_warns(no_bwrap):
    with pytest.warns(UserWarning, match="without isolation"):
        r = run_python("print(6 * 7)", LIMITS, mode="unsafe_local")
    assert (r.status, r.stdout, r.isolated) == ("ok", "42\n", False)


def test_unsafe_local_mode_still_has_the_wall_clock(no_bwrap):
    with pytest.warns(UserWarning):
        r = run_python("import time\ntime.sleep(60)", SandboxLimits(wall_s=1.0), mode="unsafe_local")
    assert r.status == "timeout"


def test_env_python_accepts_unsafe_local_without_bwrap(no_bwrap):
    task = get_env_task("env/python:addition", EnvConfig(python_sandbox="unsafe_local"))
    assert task.tool.name == "python"


def test_an_unknown_sandbox_mode_is_a_one_line_error():
    with pytest.raises(UserError, match="unknown python sandbox 'docker'; choose one of bwrap, unsafe_local"):
        check_sandbox("docker")


def test_the_env_config_rejects_an_unknown_sandbox_mode():
    with pytest.raises(ValueError, match="python_sandbox"):
        EnvConfig(python_sandbox="none")


@needs_bwrap
def test_the_python_tool_returns_output_and_reports_failures_as_tool_errors():
    tool = python_tool(LIMITS)
    assert tool.run({"code": "print(2**10)"}, 15.0) == "1024"
    with pytest.raises(ToolError, match="error: FileNotFoundError"):
        tool.run({"code": "open('/etc/passwd')"}, 15.0)


@needs_bwrap
def test_the_python_tool_takes_the_smaller_of_its_wall_clock_and_the_call_timeout():
    with pytest.raises(ToolError, match=r"^timeout$"):
        python_tool(LIMITS).run({"code": "import time\ntime.sleep(60)"}, 1.0)


@needs_bwrap
def test_only_tmp_is_writable():
    src = """
for path in ('/x', '/usr/x', '/dev/shm/x', '/proc/x', '/tmp/x'):
    try:
        open(path, 'w').close()
        print(path, 'written')
    except OSError as exc:
        print(path, type(exc).__name__)
"""
    assert run_python(src, LIMITS).stdout.splitlines() == [
        "/x OSError",  # read-only file system
        "/usr/x OSError",
        "/dev/shm/x OSError",
        "/proc/x FileNotFoundError",
        "/tmp/x written",
    ]
