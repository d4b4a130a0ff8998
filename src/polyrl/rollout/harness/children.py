"""Processes agent code starts, ended with its episode.

An agent runs on a thread of the trainer, and Linux records which thread made each child process
(``/proc/self/task/<tid>/children``), so the processes an episode's agent started — with ``subprocess``,
``os.fork`` or ``multiprocessing`` — are found from its thread and killed, with everything they started in
turn (and their process group, when they made their own), when the episode ends. A process that detaches
itself (forks and lets its parent exit) before then is beyond reach; the run directory's lock is not
inherited by any of them (:mod:`polyrl.run_dir`), so none can hold a later ``--resume`` back.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

REAP_WAIT_S = 1.0
"""How long to wait for killed children of the trainer to exit, so that none is left a zombie."""


def thread_children(tid: int) -> list[int]:
    """The processes the trainer's thread ``tid`` started that are still its children."""
    try:
        return [int(p) for p in Path(f"/proc/self/task/{tid}/children").read_text().split()]
    except (OSError, ValueError):  # the thread has ended, or the kernel does not list children
        return []


def _parents() -> dict[int, tuple[int, int]]:
    """``pid -> (ppid, pgid)`` of every process visible in /proc."""
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ", whatever comm holds
        out[int(entry.name)] = (int(fields[1]), int(fields[2]))
    return out


def _tree(roots: list[int], parents: dict[int, tuple[int, int]]) -> set[int]:
    """``roots``, their descendants, and the members of the process groups the roots lead."""
    own_group = os.getpgrp()
    leaders = {r for r in roots if r in parents and parents[r][1] == r and r != own_group}
    tree = {r for r in roots if r in parents} | {p for p, (_, g) in parents.items() if g in leaders}
    grew = True
    while grew:
        more = {p for p, (pp, _) in parents.items() if pp in tree} - tree
        tree |= more
        grew = bool(more)
    return tree - {os.getpid()}


def end_processes(roots: list[int]) -> None:
    """SIGKILL ``roots`` and everything they started: each found process is stopped first (a stopped process
    cannot fork), the search repeated until it finds nothing new, then all are killed; the trainer's own
    children among them are reaped."""
    if not roots:
        return
    stopped: set[int] = set()
    while True:
        parents = _parents()
        found = _tree(roots, parents) | {p for p in stopped if p in parents}
        new = found - stopped
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped |= new
        roots = sorted(found)
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    _reap([p for p in stopped if parents.get(p, (0, 0))[0] == os.getpid()])


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(pids: list[int]) -> None:
    deadline = time.monotonic() + REAP_WAIT_S
    pending = set(pids)
    while pending and time.monotonic() < deadline:
        for pid in list(pending):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere (the agent's own Popen.wait)
                done = pid
            if done:
                pending.discard(pid)
        if pending:
            time.sleep(0.01)


def thread_ids() -> set[int]:
    """The kernel ids of the trainer's threads now."""
    return {int(t) for t in os.listdir("/proc/self/task")}


def end_children_of(tids) -> None:
    """End the processes each of the threads ``tids`` started (and what they started)."""
    end_processes([pid for tid in tids for pid in thread_children(tid)])
