"""Hostile snippets are contained and reported; limits are small so the shared machine never feels them."""

import os

import pytest

from polyrl.envs.sandbox import SandboxLimits, run_python
from polyrl.envs.tool_use import python_tool
from polyrl.envs.tools import ToolError

LIMITS = SandboxLimits(cpu_s=1, wall_s=3.0, memory_mb=256, output_bytes=20_000)


def run(src):
    return run_python(src, LIMITS)


def test_plain_code_runs_and_prints():
    r = run("print(sum(range(10)))")
    assert (r.status, r.stdout) == ("ok", "45\n")


def test_infinite_loop_hits_the_cpu_limit():
    assert run("while True: pass").status == "cpu_limit"


def test_sleeping_forever_hits_the_wall_clock():
    assert run("import time\ntime.sleep(60)").status == "timeout"


def test_fork_bomb_is_refused():
    r = run("import os\nwhile True:\n    os.fork()")
    assert r.status == "error" and "os.fork is not allowed" in r.stderr


def test_subprocess_is_refused():
    r = run("import subprocess\nsubprocess.run(['true'])")
    assert r.status == "error" and "not allowed" in r.stderr


def test_reading_etc_passwd_is_refused():
    r = run("print(open('/etc/passwd').read())")
    assert r.status == "error" and "root:" not in r.stdout and "not allowed" in r.stderr


def test_opening_a_socket_is_refused():
    r = run("import socket\ns = socket.socket()\ns.connect(('127.0.0.1', 9))")
    assert r.status == "error" and "socket" in r.stderr


def test_writing_outside_the_sandbox_is_refused(tmp_path):
    target = tmp_path / "escaped.txt"
    r = run(f"open({str(target)!r}, 'w').write('x')")
    assert r.status == "error" and not target.exists()


def test_files_inside_the_sandbox_work_and_vanish_afterwards():
    r = run("import os\nopen('a.txt', 'w').write('hi')\nprint(open('a.txt').read(), os.getcwd())")
    assert r.status == "ok" and r.stdout.startswith("hi ")
    assert not os.path.exists(r.stdout.split()[1])


def test_a_gigabyte_of_output_is_cut_at_the_output_limit():
    r = run("import sys\nfor _ in range(10_000):\n    sys.stdout.write('x' * 100_000)")
    assert r.status == "output_limit" and len(r.stdout) <= LIMITS.output_bytes


def test_huge_allocation_hits_the_memory_limit():
    assert run("x = bytearray(1 << 30)").status == "memory_limit"


def test_the_python_tool_reports_sandbox_failures_as_tool_errors():
    tool = python_tool(LIMITS)
    assert tool.run({"code": "print(2**10)"}, 3.0) == "1024"
    with pytest.raises(ToolError, match="error: PermissionError"):
        tool.run({"code": "open('/etc/passwd')"}, 3.0)
