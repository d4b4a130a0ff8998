"""The wire format between the trainer and its verifier worker processes (:mod:`polyrl.tasks.verifier_process`;
see :mod:`polyrl.tasks.isolation`).

A worker reads pickled batches ``(sys.path, tasks, items)`` on stdin and answers in JSON on a private copy of
stdout: ``"ready"`` after start-up, ``"loaded"`` once a batch's tasks are, then one verdict per item. Each
call runs under ``SIGALRM``; the process under ``RLIMIT_AS`` and without working sockets.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import TYPE_CHECKING

from polyrl.tasks.verdict import VERIFIER_ERROR as ERROR
from polyrl.tasks.verdict import Verdict

if TYPE_CHECKING:
    pass

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


def read_message(fd: int, deadline: float | None = None, limit: int | None = None) -> bytes:
    (size,) = HEADER.unpack(_read_exact(fd, HEADER.size, deadline))
    if limit is not None and size > limit:
        raise EOFError(f"reply of {size} bytes")
    return _read_exact(fd, size, deadline)


def send_reply(fd: int, message) -> None:
    """Worker to trainer: JSON."""
    write_message(fd, json.dumps(message).encode())


def read_reply(fd: int, deadline: float):
    try:
        return json.loads(read_message(fd, deadline, MAX_REPLY_BYTES))
    except ValueError:
        raise EOFError("not JSON") from None


def verdict_to_wire(v: Verdict) -> list:
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
