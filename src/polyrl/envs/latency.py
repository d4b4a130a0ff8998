"""Simulated tool latency: wrap an environment task so that every environment step waits like a tool call.

For measuring how much of an environment's waiting a rollout setup hides (benchmarks/async_rollouts.py)
and for testing faults mid-episode. The wrapped task keeps the inner task's name, problems, difficulty
space and verifier; only ``make_env`` changes.

Latency models (:class:`LatencyModel`):

- ``fixed``: every step takes ``median_s``.
- ``lognormal``: ``log(delay) ~ Normal(log(median_s), sigma)`` with ``sigma = log(p99_over_p50) / z_0.99``
  (``z_0.99`` = 2.326, the standard normal's 99th percentile), so the 99th percentile is ``p99_over_p50``
  times the median — the long tail of search APIs, code execution and sandboxes.
- ``timeout_s``: a step whose delay would exceed it waits ``timeout_s`` and ends the episode with
  ``end_reason`` ``tool_timeout`` (no reward), as a tool call cut off by its deadline.

Delays are drawn from a generator seeded by the problem and the episode's index among the episodes of
that problem, so in one process a fixed seed gives the same delays (and timeouts) however episodes are
scheduled. A copy of the task sent to another process (a Ray worker) adds its own salt, so that episodes
started from separate copies do not share delays.

    from polyrl.tasks import resolve_task
    from polyrl.envs.latency import LatencyModel, with_latency
    slow = with_latency(resolve_task("env/retry:graph_coloring"), 0.2)
    tail = with_latency(resolve_task("env/retry:graph_coloring"),
                        LatencyModel("lognormal", median_s=0.1, p99_over_p50=20, timeout_s=3.0))
"""

from __future__ import annotations

import itertools
import math
import os
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

from polyrl.envs.environment import Environment, StepResult

Z99 = 2.3263478740408408
"""The standard normal's 99th percentile."""

_COPIES = itertools.count()


@dataclass(frozen=True)
class LatencyModel:
    """How long one environment step waits (see the module docstring)."""

    kind: Literal["fixed", "lognormal"] = "fixed"
    median_s: float = 0.2
    p99_over_p50: float = 1.0
    """lognormal: the 99th percentile over the median (the tail's weight); ignored for fixed."""
    timeout_s: float | None = None

    def __post_init__(self):
        if self.kind not in ("fixed", "lognormal"):
            raise ValueError(f"latency model must be fixed or lognormal, got {self.kind!r}")
        if self.median_s < 0:
            raise ValueError(f"latency must be >= 0 seconds, got {self.median_s}")
        if self.kind == "lognormal" and (self.p99_over_p50 < 1 or self.median_s == 0):
            raise ValueError("lognormal latency needs median_s > 0 and p99_over_p50 >= 1")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")

    @property
    def sigma(self) -> float:
        """Standard deviation of ``log(delay)``: ``log(p99_over_p50) / z_0.99``."""
        return math.log(self.p99_over_p50) / Z99 if self.kind == "lognormal" else 0.0

    def delay(self, rng: random.Random) -> float:
        """One step's delay in seconds, before the timeout is applied."""
        if self.kind == "fixed":
            return self.median_s
        return self.median_s * math.exp(self.sigma * rng.gauss(0.0, 1.0))

    def quantile(self, q: float) -> float:
        """The ``q`` quantile of the delay (before the timeout); ``q`` in (0, 1)."""
        from statistics import NormalDist

        return self.median_s * math.exp(self.sigma * NormalDist().inv_cdf(q))

    def describe(self) -> str:
        if self.kind == "fixed":
            text = f"fixed {self.median_s * 1000:.0f} ms"
        else:
            text = (
                f"log-normal, p50 {self.median_s * 1000:.0f} ms, p99 {self.quantile(0.99) * 1000:.0f} ms "
                f"(p99/p50 {self.p99_over_p50:g})"
            )
        return text + (f", timeout {self.timeout_s:g} s" if self.timeout_s is not None else "")


class LatencyEnvironment(Environment):
    """``inner`` with a wait before every ``step`` (``reset`` and ``close`` are immediate); a step whose
    delay exceeds the model's timeout ends the episode as ``tool_timeout`` instead of reaching ``inner``."""

    def __init__(self, inner: Environment, model: LatencyModel, rng: random.Random):
        self.inner, self.model, self.rng = inner, model, rng
        self.tools = inner.tools
        self.timeouts = 0

    @property
    def stats(self):
        return {**self.inner.stats, "tool_timeouts": self.timeouts} if self.model.timeout_s else self.inner.stats

    def reset(self):
        return self.inner.reset()

    def step(self, action: str) -> StepResult:
        delay = self.model.delay(self.rng)
        timeout = self.model.timeout_s
        if timeout is not None and delay > timeout:
            time.sleep(timeout)
            self.timeouts += 1
            return StepResult([], 0.0, True, {"success": False, "score": 0.0, "end_reason": "tool_timeout"})
        time.sleep(delay)
        return self.inner.step(action)

    def close(self) -> None:
        self.inner.close()


class LatencyTask:
    """An environment task whose episodes are :class:`LatencyEnvironment` s; everything else is the inner task's."""

    def __init__(self, inner, model: LatencyModel):
        self.inner, self.model = inner, model
        self._episodes: dict[tuple, int] = {}
        self._lock = threading.Lock()
        self._salt = ""

    @property
    def seconds(self) -> float:
        """The median delay of one step."""
        return self.model.median_s

    def make_env(self, problem) -> Environment:
        key = (problem.task, problem.seed, problem.prompt)
        with self._lock:
            k = self._episodes[key] = self._episodes.get(key, -1) + 1
        rng = random.Random(f"{problem.task}\x00{problem.seed}\x00{problem.prompt}\x00{k}\x00{self._salt}")
        return LatencyEnvironment(self.inner.make_env(problem), self.model, rng)

    def __getstate__(self):
        return {"inner": self.inner, "model": self.model, "_episodes": {}}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._salt = f"{os.getpid()}:{next(_COPIES)}"

    def __getattr__(self, name: str) -> Any:
        if name in ("inner", "model", "_episodes", "_lock", "_salt"):  # not set yet (unpickling): don't recurse
            raise AttributeError(name)
        return getattr(self.inner, name)


def with_latency(task, latency: float | LatencyModel) -> LatencyTask:
    """``task`` whose every environment step waits ``latency`` seconds, or as the :class:`LatencyModel` says."""
    model = latency if isinstance(latency, LatencyModel) else LatencyModel("fixed", float(latency))
    return LatencyTask(task, model)
