"""The verifier worker process (started by :mod:`polyrl.tasks.isolation` as ``python -c "...worker_main(...)"``).

It reads pickled batches ``(sys.path, tasks, items)`` on stdin and answers in JSON (:mod:`polyrl.tasks.verifier_worker`)
on a private copy of stdout. Each call runs under ``SIGALRM``; the process under ``RLIMIT_AS`` and without working
sockets.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from typing import TYPE_CHECKING

from polyrl.tasks.verdict import VERIFIER_ERROR as ERROR
from polyrl.tasks.verdict import VERIFIER_TIMEOUT as TIMEOUT
from polyrl.tasks.verdict import Verdict
from polyrl.tasks.verifier_worker import read_message, send_reply, verdict_to_wire

if TYPE_CHECKING:
    from polyrl.tasks.base import Problem, Task


class _CallTimeout(BaseException):
    """Raised by SIGALRM inside a verify call; a BaseException so that ``except Exception`` cannot swallow it."""


def _on_alarm(signum, frame):
    raise _CallTimeout


def _no_network(*args, **kwargs):
    raise OSError("network access is disabled in verifier workers")


def _address_space_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _limit_memory(memory_mb: int) -> None:
    import resource

    try:
        limit = _address_space_bytes() + memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    except (OSError, ValueError):
        pass  # no /proc or a lower hard limit: the time limit still bounds the worker


def _verify_one(task: Task, problem: Problem, response: str, timeout_s: float) -> Verdict:
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            return task.verify_in_process(problem, response)
        finally:  # an alarm that fires in here still lands in the handlers below
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _CallTimeout:
        return Verdict(0.0, False, TIMEOUT)
    except BaseException:  # MemoryError, RecursionError, SystemExit from a scorer: the verdict, not a crash
        return Verdict(0.0, False, ERROR)


def worker_main(timeout_s: float, memory_mb: int) -> None:
    """Serve batches: ``(sys.path, tasks, items)`` in; ``"loaded"`` once the tasks are, then one verdict per item."""
    import socket

    # The protocol keeps a private copy of stdout; whatever a scorer prints goes nowhere.
    fd_in, fd_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    for method in ("connect", "connect_ex", "bind", "sendto"):  # the class stays (ssl subclasses it)
        setattr(socket.socket, method, _no_network)
    signal.signal(signal.SIGALRM, _on_alarm)
    import polyrl.tasks  # noqa: F401  (the registry, before the memory limit)

    _limit_memory(memory_mb)
    send_reply(fd_out, "ready")
    loaded: dict[bytes, Task | None] = {}
    while True:
        try:
            path, tasks, items = pickle.loads(read_message(fd_in))
        except EOFError:
            return
        sys.path[:] = path  # the parent's, so plugin modules it found since this worker started are found too
        for blob in tasks:
            if blob not in loaded:
                loaded[blob] = _load_task(blob)
        send_reply(fd_out, "loaded")
        for key, problem, response in items:
            task = loaded[tasks[key]]
            verdict = Verdict(0.0, False, ERROR) if task is None else _verify_one(task, problem, response, timeout_s)
            send_reply(fd_out, verdict_to_wire(verdict))


def _load_task(blob: bytes) -> Task | None:
    try:
        return pickle.loads(blob)
    except Exception:  # a task class this worker cannot import: its calls are verifier errors
        return None
