"""Environment steps of many episodes at once: plain environments on a thread pool, async-native ones on one
event loop; an environment that raises ends its episode (``env_error``), never the rollout."""

from __future__ import annotations

import asyncio
import inspect
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from polyrl.envs.environment import Environment, EnvTask, StepResult
from polyrl.forward.batch import join
from polyrl.tasks import Problem


@dataclass
class Episode:
    task: EnvTask
    env: Environment
    problem: Problem
    group: int
    """Index of its problem within the rollout call."""
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    policy_mask: list[int] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    """[start, end) of each policy turn within the response."""
    turn_versions: list[int] = field(default_factory=list)
    """Version of the weights that generated each policy turn."""
    finished: bool = True
    text: str = ""
    info: dict = field(default_factory=dict)
    done: bool = False
    prompt_text: str | None = None
    """The user messages the policy read first (:attr:`~polyrl.rollout.trajectory.Trajectory.prompt_text`)."""
    observation_images: list[tuple[int, list]] = field(default_factory=list)
    """The pictures the environment's observations showed (:attr:`~polyrl.rollout.trajectory.Trajectory.observation_images`)."""

    def add(self, ids: list[int], policy: bool) -> None:
        """Append ``ids`` (with their pictures, an observation's: :class:`~polyrl.forward.batch.ImageIds`)."""
        self.response_ids = join(self.response_ids, ids)
        self.policy_mask += [int(policy)] * len(ids)


def _env_error(episode: Episode, exc: Exception) -> StepResult:
    warnings.warn(f"{episode.problem.task}: environment error ends the episode: {exc!r}", stacklevel=3)
    return StepResult([], 0.0, True, {"success": False, "score": 0.0, "end_reason": "env_error"})


def _step(episode: Episode, action: str) -> StepResult:
    try:
        return episode.env.step(action)
    except Exception as exc:
        return _env_error(episode, exc)


async def _astep(episode: Episode, action: str, limit: asyncio.Semaphore) -> StepResult:
    async with limit:
        try:
            return await episode.env.step(action)
        except Exception as exc:
            return _env_error(episode, exc)


def is_async_environment(env: Environment) -> bool:
    """An async-native environment: its ``step`` is a coroutine function (``async def step``)."""
    return inspect.iscoroutinefunction(env.step)


def _gather(steps: list[tuple[Episode, str]], concurrency: int) -> list[StepResult]:
    """Run async-native environments' steps on one event loop, at most ``concurrency`` at once."""

    async def run():
        limit = asyncio.Semaphore(concurrency)
        return await asyncio.gather(*(_astep(ep, action, limit) for ep, action in steps))

    return asyncio.run(run())


class EnvSteps:
    """Steps many episodes' environments at once, so that their waits (tool calls, sandboxes, remote APIs)
    overlap: plain environments on a pool of at most ``concurrency`` threads, async-native ones on one event
    loop. Results come back in the order of the requests, so the episodes (and the generation batches built
    from them) are exactly those of stepping one environment after another. ``concurrency`` 1 steps them
    one after another in the calling thread."""

    def __init__(self, concurrency: int):
        if concurrency < 1:
            raise ValueError(f"environment concurrency must be >= 1, got {concurrency}")
        self.concurrency = concurrency
        self._pool: ThreadPoolExecutor | None = None

    def map(self, fn: Callable, items: list) -> list:
        """``[fn(*item) for item in items]``, run on the threads."""
        if self.concurrency == 1 or len(items) < 2:
            return [fn(*item) for item in items]
        return list(self._executor().map(lambda item: fn(*item), items))

    def step(self, steps: list[tuple[Episode, str]]) -> list[StepResult]:
        """One step of each ``(episode, action)``."""
        is_async = [is_async_environment(ep.env) for ep, _ in steps]
        plain = [s for s, a in zip(steps, is_async) if not a]
        native = [s for s, a in zip(steps, is_async) if a]
        if native and plain:  # the event loop runs beside the threads
            pending = self._executor().submit(_gather, native, self.concurrency)
            plain_results, native_results = self.map(_step, plain), pending.result()
        else:
            plain_results = self.map(_step, plain)
            native_results = _gather(native, self.concurrency) if native else []
        it_plain, it_native = iter(plain_results), iter(native_results)
        return [next(it_native) if a else next(it_plain) for a in is_async]

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max(2, self.concurrency), thread_name_prefix="polyrl-env")
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
