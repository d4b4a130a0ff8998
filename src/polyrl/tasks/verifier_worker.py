"""The verifier worker process and the wire format between it and the trainer (see :mod:`polyrl.tasks.isolation`).

A worker reads pickled batches ``(sys.path, tasks, items)`` on stdin and answers in JSON on a private copy of
stdout: ``"ready"`` after start-up, ``"loaded"`` once a batch's tasks are, then one verdict per item. Each
call runs under ``SIGALRM``; the process under ``RLIMIT_AS`` and without working sockets.
"""

from __future__ import annotations

import json
import os
import pickle
import select
import signal
import struct
import sys
import time
from typing import TYPE_CHECKING

from polyrl.tasks.base import VERIFIER_ERROR as ERROR
from polyrl.tasks.base import VERIFIER_TIMEOUT as TIMEOUT
from polyrl.tasks.base import Verdict

if TYPE_CHECKING:
    from polyrl.tasks.base import Problem, Task

# -- wire format: an 8-byte length, then the message ------------------------------------------------------
# The trainer sends pickles (it trusts itself); workers answer in JSON, so that a verifier that was made to
# run model text cannot send the trainer a pickle that runs code when loaded.
HEADER = struct.Struct("!Q")
MAX_REPLY_BYTES = 1 << 20
"""Longest reply the trainer reads from a worker (a verdict carries an answer of at most 20,000 characters)."""


def write_message(fd: int, data: bytes) -> None:
    view = memoryview(HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, left = [], n
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read(fd: int, deadline: float | None = None, limit: int | None = None) -> bytes:
    (size,) = HEADER.unpack(_read_exact(fd, HEADER.size, deadline))
    if limit is not None and size > limit:
        raise EOFError(f"reply of {size} bytes")
    return _read_exact(fd, size, deadline)


def _reply(fd: int, message) -> None:
    """Worker to trainer: JSON."""
    write_message(fd, json.dumps(message).encode())


def read_reply(fd: int, deadline: float):
    try:
        return json.loads(_read(fd, deadline, MAX_REPLY_BYTES))
    except ValueError:
        raise EOFError("not JSON") from None


def _verdict_to_wire(v: Verdict) -> list:
    return [v.score, v.correct, v.reason, v.format_ok, v.answer]


def verdict_from_wire(message) -> Verdict:
    """The verdict a worker sent, type-checked; anything else is a ``verifier_error``."""
    try:
        score, correct, reason, format_ok, answer = message
        valid = (
            isinstance(score, (int, float))
            and isinstance(correct, bool)
            and isinstance(reason, str)
            and isinstance(format_ok, bool)
            and (answer is None or isinstance(answer, str))
        )
    except (TypeError, ValueError):
        valid = False
    if not valid or not 0.0 <= score <= 1.0:
        return Verdict(0.0, False, ERROR)
    return Verdict(float(score), correct, reason[:64], format_ok, answer)


# -- the worker process ------------------------------------------------------------------------------------
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
    _reply(fd_out, "ready")
    loaded: dict[bytes, Task | None] = {}
    while True:
        try:
            path, tasks, items = pickle.loads(_read(fd_in))
        except EOFError:
            return
        sys.path[:] = path  # the parent's, so plugin modules it found since this worker started are found too
        for blob in tasks:
            if blob not in loaded:
                loaded[blob] = _load_task(blob)
        _reply(fd_out, "loaded")
        for key, problem, response in items:
            task = loaded[tasks[key]]
            verdict = Verdict(0.0, False, ERROR) if task is None else _verify_one(task, problem, response, timeout_s)
            _reply(fd_out, _verdict_to_wire(verdict))


def _load_task(blob: bytes) -> Task | None:
    try:
        return pickle.loads(blob)
    except Exception:  # a task class this worker cannot import: its calls are verifier errors
        return None
