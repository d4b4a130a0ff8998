"""Simulated tool latency: wrap an environment task so that every environment step takes ``seconds``.

For measuring how much of an environment's waiting a rollout setup hides (benchmarks/async_rollouts.py)
and for testing faults mid-episode. The wrapped task keeps the inner task's name, problems, difficulty
space and verifier; only ``make_env`` changes.

    from polyrl.envs import resolve_task
    from polyrl.envs.latency import with_latency
    slow = with_latency(resolve_task("env/retry:graph_coloring"), 0.2)
"""

from __future__ import annotations

import time
from typing import Any

from polyrl.envs.base import Environment, StepResult


class LatencyEnvironment(Environment):
    """``inner`` with ``seconds`` of sleep before every ``step`` (``reset`` and ``close`` are immediate)."""

    def __init__(self, inner: Environment, seconds: float):
        self.inner, self.seconds = inner, seconds
        self.tools = inner.tools

    @property
    def stats(self):
        return self.inner.stats

    def reset(self):
        return self.inner.reset()

    def step(self, action: str) -> StepResult:
        time.sleep(self.seconds)
        return self.inner.step(action)

    def close(self) -> None:
        self.inner.close()


class LatencyTask:
    """An environment task whose episodes are :class:`LatencyEnvironment` s; everything else is the inner task's."""

    def __init__(self, inner, seconds: float):
        if seconds < 0:
            raise ValueError(f"latency must be >= 0 seconds, got {seconds}")
        self.inner, self.seconds = inner, seconds

    def make_env(self, problem) -> Environment:
        return LatencyEnvironment(self.inner.make_env(problem), self.seconds)

    def __getattr__(self, name: str) -> Any:
        if name in ("inner", "seconds"):  # not set yet (unpickling): don't recurse
            raise AttributeError(name)
        return getattr(self.inner, name)


def with_latency(task, seconds: float) -> LatencyTask:
    return LatencyTask(task, seconds)
