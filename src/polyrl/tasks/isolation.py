"""Isolated verification: verifiers that are not known to be safe run in a pool of worker processes.

A verifier that is not *pure* (reasoning-gym scorers that ``eval`` or ``sympy.parse_expr`` the answer,
plugin tasks that do not declare themselves pure) may hang, exhaust memory or run model text as code.
Such calls go to long-lived worker processes, each with

* a per-call time limit: a ``SIGALRM`` in the worker interrupts Python code; a call still running
  ``grace_s`` after the limit (a C-level ``9**9**9``) gets its worker killed and replaced;
* a memory limit: ``RLIMIT_AS`` at the worker's size after start-up plus ``memory_mb``;
* no network: the worker runs under ``unshare -rn`` (an empty network namespace) where the kernel allows
  it, and with ``socket.socket.connect``, ``bind`` and ``sendto`` disabled in any case.

A timed-out call is the verdict ``verifier_timeout`` and a crashed one ``verifier_error`` (score 0), so a
hostile response costs at most one time limit and never stops the run. Workers are started on first use
(``subprocess`` with pipes, so nothing is forked from a threaded trainer or a Ray actor and no
``__main__`` guard is needed), shared by the whole process, reused across calls, and stopped at exit.
Workers answer in JSON, never pickle: what a worker sends cannot run code in the trainer. Problems go to a worker
without their images: a verifier checks an answer against the problem's answer and text, never its pictures, and a
dataset's pictures would cost a batch megabytes of pickling.

This bounds time, memory and network; it is not a sandbox for the file system. Verifiers that ``eval``
model text are guarded before they run (see ``polyrl.tasks.rg_guards``). The worker side is
``polyrl.tasks.verifier_process`` (its wire format: ``polyrl.tasks.verifier_worker``).
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import pickle
import shutil
import subprocess
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, Field

from polyrl.tasks.verdict import VERIFIER_ERROR as ERROR
from polyrl.tasks.verdict import VERIFIER_TIMEOUT as TIMEOUT
from polyrl.tasks.verdict import Verdict
from polyrl.tasks.verifier_worker import read_reply, verdict_from_wire, write_message

Problem = Any
"""A task's problem (:class:`polyrl.tasks.base.Problem`); the pool only passes it through."""


class Verifiable(Protocol):
    """What the pool needs of a task (a :class:`polyrl.tasks.base.Task`, or an :class:`IsolatedReward`)."""

    pure: bool

    def verify_in_process(self, problem: Problem, response: str) -> Verdict: ...


DEFAULT_TIMEOUT_S = 5.0
"""Seconds one isolated verify call may take before it is the verdict ``verifier_timeout``."""
DEFAULT_MEMORY_MB = 2048
"""Address space a worker may grow by after start-up (MiB); beyond it allocations fail (``verifier_error``)."""
DEFAULT_WORKERS = 2
"""Worker processes; one batch is split evenly across them."""
DEFAULT_GRACE_S = 2.0
"""Seconds past the time limit before a worker that did not answer is killed and replaced."""
STARTUP_TIMEOUT_S = 120.0
"""Seconds a worker may take to start and to load a batch's tasks (imports such as reasoning-gym)."""


class VerifierConfig(BaseModel):
    """Limits of isolated verification (verifiers that are not pure run in worker processes)."""

    model_config = ConfigDict(extra="forbid")

    timeout_s: float = Field(DEFAULT_TIMEOUT_S, gt=0, description="Seconds per isolated verify call.")
    memory_mb: int = Field(DEFAULT_MEMORY_MB, ge=64, description="Memory (MiB) a verifier worker may add.")
    workers: int = Field(DEFAULT_WORKERS, ge=1, le=64, description="Verifier worker processes.")

    def apply(self) -> None:
        """Make these the limits of the process-wide pool (restarts its workers if they changed)."""
        configure(timeout_s=self.timeout_s, memory_mb=self.memory_mb, workers=self.workers)


@dataclass(frozen=True)
class _Limits:
    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_mb: int = DEFAULT_MEMORY_MB
    workers: int = DEFAULT_WORKERS
    grace_s: float = DEFAULT_GRACE_S


# -- the pool ----------------------------------------------------------------------------------------------
def _network_isolation_prefix() -> list[str]:
    """``unshare -rn`` where this kernel lets an unprivileged process make a network namespace, else nothing."""
    exe = shutil.which("unshare")
    if exe is None:
        return []
    try:
        ok = subprocess.run([exe, "-rn", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return [exe, "-rn"] if ok else []


class _Worker:
    """One worker process and the pipes to it."""

    def __init__(self, limits: _Limits, prefix: list[str]):
        code = f"from polyrl.tasks.verifier_process import worker_main; worker_main({limits.timeout_s!r}, {limits.memory_mb!r})"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # what this process imports, the worker does
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # Ctrl-C in the terminal stops the trainer, which stops its workers
        )
        self.fd_in, self.fd_out = self.proc.stdout.fileno(), self.proc.stdin.fileno()
        self.started = False

    def wait_ready(self) -> None:
        if not self.started:
            if read_reply(self.fd_in, time.monotonic() + STARTUP_TIMEOUT_S) != "ready":
                raise EOFError
            self.started = True

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass


def _without_images(problem: Problem) -> Problem:
    """``problem`` as a worker receives it: its images left behind (see the module's docstring)."""
    return dataclasses.replace(problem, images=[]) if getattr(problem, "images", None) else problem


def _task_blob(task: Verifiable) -> bytes | None:
    """The pickled task, or None (with a warning) for a class a worker could not import."""
    try:
        return pickle.dumps(task, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError) as err:
        warnings.warn(
            f"task {getattr(task, 'name', task)!r} cannot be sent to a verifier worker ({err}); its verdicts are "
            f"{ERROR!r}. Define the class at module level, or set `pure = True` if its check is safe in-process",
            stacklevel=3,
        )
        return None


class VerifierPool:
    """Worker processes that run verify calls under a time limit, a memory limit and without network."""

    def __init__(self, limits: _Limits):
        self.limits = limits
        self._prefix = _network_isolation_prefix()
        self._workers: list[_Worker | None] = [None] * limits.workers
        self._lock = threading.Lock()

    @property
    def network_namespace(self) -> bool:
        """Whether workers run in their own (empty) network namespace."""
        return bool(self._prefix)

    def _worker(self, slot: int) -> _Worker:
        if self._workers[slot] is None or self._workers[slot].proc.poll() is not None:
            self._workers[slot] = _Worker(self.limits, self._prefix)
        return self._workers[slot]

    def _replace(self, slot: int) -> None:
        if self._workers[slot] is not None:
            self._workers[slot].stop()
        self._workers[slot] = None

    def verify(self, calls: Sequence[tuple[Verifiable, Problem, str]]) -> list[Verdict]:
        """One verdict per ``(task, problem, response)``, in order: each batch is split across the workers."""
        if not calls:
            return []
        with self._lock:
            blobs = {id(task): _task_blob(task) for task, _, _ in calls}
            keys = {task_id: i for i, task_id in enumerate(blobs)}
            tasks = list(blobs.values())
            items = [(keys[id(task)], _without_images(problem), response) for task, problem, response in calls]
            verdicts: list[Verdict | None] = [None] * len(items)
            sendable = [i for i, (task, _, _) in enumerate(calls) if blobs[id(task)] is not None]
            n = min(len(self._workers), len(sendable))
            chunks = [sendable[slot::n] for slot in range(n)]
            threads = [
                threading.Thread(target=self._run_chunk, args=(slot, chunk, tasks, items, verdicts))
                for slot, chunk in enumerate(chunks)
            ]
            if len(threads) == 1:
                threads[0].run()  # no thread for the common one-worker case
            else:
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            out = [v if v is not None else Verdict(0.0, False, ERROR) for v in verdicts]
            return [_with_format(call, v) for call, v in zip(calls, out)]

    def _wait_ready(self, worker: _Worker) -> None:
        """Wait for a new worker's start-up; one that cannot start inside ``unshare`` is retried without it."""
        try:
            worker.wait_ready()
        except (EOFError, TimeoutError, OSError):
            if self._prefix:
                warnings.warn(
                    "verifier workers do not start in a network namespace here; using them without", stacklevel=2
                )
                self._prefix = []
            else:
                warnings.warn("a verifier worker failed to start; its calls are verifier errors", stacklevel=2)
            raise

    def _run_chunk(self, slot: int, chunk: list[int], tasks: list[bytes], items: list, verdicts: list) -> None:
        """Verify ``items[i]`` for i in ``chunk`` on worker ``slot``, replacing the worker on a timeout or a crash."""
        per_call = self.limits.timeout_s + self.limits.grace_s
        todo = deque(chunk)
        attempts_left = 3  # a worker that cannot even start or load the tasks: give up on the rest
        while todo and attempts_left:
            try:
                worker = self._worker(slot)
                self._wait_ready(worker)
                message = (list(sys.path), tasks, [items[i] for i in todo])
                write_message(worker.fd_out, pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
                if read_reply(worker.fd_in, time.monotonic() + STARTUP_TIMEOUT_S) != "loaded":
                    raise EOFError
            except (EOFError, TimeoutError, OSError, pickle.PickleError):
                self._replace(slot)
                attempts_left -= 1
                continue
            while todo:
                try:
                    verdicts[todo[0]] = verdict_from_wire(read_reply(worker.fd_in, time.monotonic() + per_call))
                except TimeoutError:
                    verdicts[todo[0]] = Verdict(0.0, False, TIMEOUT)
                except (EOFError, OSError):
                    verdicts[todo[0]] = Verdict(0.0, False, ERROR)
                else:
                    todo.popleft()
                    continue
                todo.popleft()
                self._replace(slot)
                break

    def close(self) -> None:
        with self._lock:
            for slot in range(len(self._workers)):
                self._replace(slot)


_POOL: VerifierPool | None = None
_LIMITS = _Limits()
_POOL_LOCK = threading.Lock()


def _with_format(call: tuple, verdict: Verdict) -> Verdict:
    """A timed-out or crashed verify call keeps the response's format judgment and extracted answer (computed
    here: extraction is bounded and evaluates nothing), so the ``format`` term is not lost with the verdict."""
    task, _, response = call
    answer_format = getattr(task, "answer_format", None)
    if verdict.reason not in (TIMEOUT, ERROR) or verdict.format_ok or answer_format is None:
        return verdict
    ext = answer_format.extract(response)
    return Verdict(verdict.score, verdict.correct, verdict.reason, ext.format_ok, ext.answer)


def configure(
    timeout_s: float | None = None,
    memory_mb: int | None = None,
    workers: int | None = None,
    grace_s: float | None = None,
) -> None:
    """Set the limits of the process-wide pool (None keeps one); a change restarts the workers on next use."""
    global _LIMITS, _POOL
    new = _Limits(
        timeout_s=_LIMITS.timeout_s if timeout_s is None else float(timeout_s),
        memory_mb=_LIMITS.memory_mb if memory_mb is None else int(memory_mb),
        workers=_LIMITS.workers if workers is None else int(workers),
        grace_s=_LIMITS.grace_s if grace_s is None else float(grace_s),
    )
    with _POOL_LOCK:
        if new != _LIMITS and _POOL is not None:
            _POOL.close()
            _POOL = None
        _LIMITS = new


def verifier_pool() -> VerifierPool:
    """The process-wide pool, started on first use and stopped at exit."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = VerifierPool(_LIMITS)
        return _POOL


def shutdown() -> None:
    """Stop the process-wide pool's workers (the next isolated call starts new ones)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is not None:
            _POOL.close()
            _POOL = None


atexit.register(shutdown)


def verify_many(calls: Sequence[tuple[Verifiable, Problem, str]]) -> list[Verdict]:
    """One verdict per ``(task, problem, response)``, in order, with one pool round trip for all impure ones.

    Pure verifiers run here, in this process; the others run batched in the worker pool. A task class that
    overrides ``verify`` (an environment playing a one-turn episode) keeps its own, called here. The rollout
    scores a whole step with one call.
    """
    verdicts: list[Verdict | None] = [None] * len(calls)
    isolated = []
    for i, (task, problem, response) in enumerate(calls):
        own = getattr(task, "verify", None)
        if own is not None and not getattr(own, "dispatches_to_pool", False):  # a class that verifies its own way
            verdicts[i] = own(problem, response)
        elif task.pure:
            verdicts[i] = task.verify_in_process(problem, response)
        else:
            isolated.append(i)
    if isolated:
        for i, verdict in zip(isolated, verifier_pool().verify([calls[i] for i in isolated])):
            verdicts[i] = verdict
    return verdicts  # type: ignore[return-value]


@dataclass(frozen=True)
class IsolatedReward:
    """A reward callable ``fn(problem, response) -> float`` in [0, 1] that opts in to isolation.

    Calls run in the verifier pool under the same limits as impure tasks; an exception, a timeout or a
    crash scores 0 (the verdict says which). ``fn`` must be importable by name (defined at module level).
    """

    fn: Callable[[Problem, str], float]
    pure: ClassVar[bool] = False

    @property
    def name(self) -> str:
        return f"{self.fn.__module__}.{self.fn.__qualname__}"

    def verify_in_process(self, problem: Problem, response: str) -> Verdict:
        score = float(self.fn(problem, response))
        score = min(max(score, 0.0), 1.0) if score == score else 0.0  # NaN scores 0
        return Verdict(score, score >= 1.0, "correct" if score >= 1.0 else ("partial" if score > 0 else "wrong"))

    def __call__(self, problem: Problem, response: str) -> float:
        return verify_many([(self, problem, response)])[0].score

    def scores(self, problems: Sequence[Problem], responses: Sequence[str]) -> list[float]:
        """One score per pair, with one pool round trip for the batch."""
        return [v.score for v in verify_many([(self, p, r) for p, r in zip(problems, responses)])]
