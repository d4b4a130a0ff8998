"""User reward functions held to the verifiers' standard: called with the arguments they name, under a time
limit, and whatever they do — raise (``SystemExit`` and ``KeyboardInterrupt`` included), hang, return a
non-number, NaN, infinity or a value beyond :data:`REWARD_BOUND` — the sample scores 0 with a reason, which
the trainer counts as ``reward_failures/<term>``; the run goes on.

Three signatures are accepted (:func:`polyrl.tasks.verifiers.user_callable` tells polyrl's two apart):

* per completion, polyrl's: any of ``problem, response, extracted, target, verdict`` (``**kwargs`` gets them all);
* per group, polyrl's: any of ``problems, responses, verdicts``, one number per member back;
* TRL's, as is: ``f(completions, prompts=None, **kwargs) -> list[float]``, called once per batch with the
  problems' columns (``question``, ``answer``, ``solution``, ``task``) as keyword lists; ``None`` for a sample
  means the term does not apply to it (0, not a failure).
"""

from __future__ import annotations

import functools
import math
import signal
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from polyrl.tasks.verifiers import UserCallable

Scores = list[tuple[float, "str | None"]]

REWARD_BOUND = 1e6
"""Largest reward magnitude a term may return: ``|r| > REWARD_BOUND`` is a failure (``out_of_range``), so a
finite but huge value cannot make every update non-finite."""

TERM_TIMEOUT = 10.0
"""Default seconds one call of a user reward function may take (``reward.term_timeout``)."""

TRL_COLUMNS = ("question", "answer", "solution", "task")
"""The problem fields a TRL-style function receives as keyword lists (the dataset row's columns)."""


class _TimeLimit(BaseException):
    """Raised into a reward function that ran past its limit (a BaseException, so ``except Exception`` in user
    code does not swallow it)."""


class _CtrlC(BaseException):
    """A real Ctrl-C that lands during a reward call: it stops the run, unlike a KeyboardInterrupt user code raises."""


def _reason(exc: BaseException) -> str:
    return f"error: {type(exc).__name__}: {exc}"[:200]


def call_limited(fn: Callable[[], Any], limit: float | None) -> tuple[Any, str | None]:
    """``(fn(), None)``, or ``(None, reason)`` when it raised anything or ran past ``limit`` seconds.

    In the main thread (where the trainer scores) the limit is a real-time timer whose signal interrupts the
    call; elsewhere, or when SIGALRM already has an owner, the call runs on a daemon thread that is abandoned
    when it overruns (it cannot hold the run up, though it keeps its CPU until it returns)."""
    if not limit:
        return _call(fn)
    main = threading.current_thread() is threading.main_thread()
    if (
        main
        and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)
        and not signal.getitimer(signal.ITIMER_REAL)[0]
    ):
        return _call_with_timer(fn, limit)
    return _call_on_thread(fn, limit)


def _call(fn: Callable[[], Any]) -> tuple[Any, str | None]:
    try:
        return fn(), None
    except (_TimeLimit, _CtrlC):
        raise
    except BaseException as exc:  # SystemExit and KeyboardInterrupt raised by user code end this call only
        return None, _reason(exc)


def _call_with_timer(fn: Callable[[], Any], limit: float) -> tuple[Any, str | None]:
    def expire(signum, frame):
        raise _TimeLimit

    def ctrl_c(signum, frame):
        raise _CtrlC

    previous = signal.signal(signal.SIGALRM, expire)
    own_int = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    previous_int = signal.signal(signal.SIGINT, ctrl_c) if own_int else None
    try:
        signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            return _call(fn)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _TimeLimit:
        return None, f"timeout: over {limit:g}s"
    except _CtrlC:
        raise KeyboardInterrupt from None
    finally:
        signal.signal(signal.SIGALRM, previous)
        if own_int:
            signal.signal(signal.SIGINT, previous_int)


def _call_on_thread(fn: Callable[[], Any], limit: float) -> tuple[Any, str | None]:
    box: list[tuple[Any, str | None]] = []
    worker = threading.Thread(target=lambda: box.append(_call(fn)), daemon=True, name="polyrl-reward")
    worker.start()
    worker.join(limit)
    return box[0] if box else (None, f"timeout: over {limit:g}s")


def checked_value(raw: Any, none_ok: bool = False) -> tuple[float, str | None]:
    """A user function's return value as a score, or a failure ``(0, reason)``: a number (bool, int, float,
    numpy or torch scalar) that is finite and at most :data:`REWARD_BOUND` in magnitude."""
    if raw is None and none_ok:
        return 0.0, None
    if isinstance(raw, str | bytes) or not hasattr(raw, "__float__"):
        return 0.0, f"not_a_number: {type(raw).__name__}"
    try:
        value = float(raw)
    except OverflowError:
        return 0.0, "out_of_range"
    except BaseException as exc:  # a __float__ that raises (anything) is the function's failure
        return 0.0, f"not_a_number: {type(raw).__name__}: {_reason(exc)}"[:200]
    if not math.isfinite(value):
        return 0.0, "not_finite"
    if abs(value) > REWARD_BOUND:
        return 0.0, "out_of_range"
    return value, None


def _values(raw: Any, n: int, what: str, none_ok: bool = False) -> Scores:
    """A list of ``n`` checked values from a batched function's return value (for ``what``: "group", "batch");
    a wrong shape fails them all."""
    try:
        values = list(raw)
    except BaseException as exc:
        return [(0.0, f"not_a_list: {type(raw).__name__}: {_reason(exc)}"[:200])] * n
    if len(values) != n:
        return [(0.0, f"error: returned {len(values)} values for a {what} of {n}")] * n
    return [checked_value(v, none_ok) for v in values]


def completion_scores(fn: UserCallable, trajs: list, limit: float | None) -> Scores:
    out: Scores = []
    for t in trajs:
        available = {
            "problem": t.problem,
            "response": t.text,
            "extracted": t.verdict.answer,
            "target": t.problem.answer,
            "verdict": t.verdict,
        }
        raw, failure = call_limited(functools.partial(fn, **available), limit)
        out.append((0.0, failure) if failure is not None else checked_value(raw))
    return out


def group_scores(fn: UserCallable, trajs: list, limit: float | None) -> Scores:
    groups: dict[int, list[int]] = defaultdict(list)
    for i, t in enumerate(trajs):
        groups[t.group].append(i)
    out: Scores = [(0.0, None)] * len(trajs)
    for idx in groups.values():
        members = [trajs[i] for i in idx]
        available = {
            "problems": [t.problem for t in members],
            "responses": [t.text for t in members],
            "verdicts": [t.verdict for t in members],
        }
        raw, failure = call_limited(functools.partial(fn, **available), limit)
        scores = [(0.0, failure)] * len(idx) if failure is not None else _values(raw, len(idx), "group")
        for i, s in zip(idx, scores):
            out[i] = s
    return out


def trl_scores(fn: UserCallable, trajs: list, limit: float | None) -> Scores:
    """One call for the whole batch, as TRL makes it: ``completions``, ``prompts`` and the problems' columns."""
    columns = {name: [getattr(t.problem, name) for t in trajs] for name in TRL_COLUMNS}
    columns["completion_ids"] = [list(t.response_ids) for t in trajs]
    prompts = [t.shown_prompt for t in trajs]  # what the policy read (the run's prompt field and style)
    completions = [t.text for t in trajs]
    raw, failure = call_limited(lambda: fn.fn(completions=completions, prompts=prompts, **columns), limit)
    if failure is not None:
        return [(0.0, failure)] * len(trajs)
    return _values(raw, len(trajs), "batch", none_ok=True)


def user_term_scores(fn: UserCallable, trajs: list, limit: float | None) -> Scores:
    """The scores of a user function of any accepted signature over ``trajs``."""
    if fn.style == "trl":
        return trl_scores(fn, trajs, limit)
    return (group_scores if fn.group else completion_scores)(fn, trajs, limit)
