"""What the environments polyrl plays from other hubs share: ``env/openenv``, ``env/gem`` and ``env/trl``.

* **User code** named ``package.module:Class`` is imported by :func:`import_object`; a module that does not
  import, or an attribute it lacks, is one line naming the environment.
* **Rewards.** A step's reward of None is 0 (OpenEnv's ``Observation.reward`` is optional); a value that is not a
  finite number fails the step, which ends the episode as ``env_error``. The episode's return, the sum of its step
  rewards, is held in [-1, 1] (:data:`RETURN_BOUND`): a step that would carry the sum past a bound pays only up to
  it, so the turn rewards still add up to the return. polyrl's own environments and verifiers pay in [0, 1]; the
  bound keeps a hub environment with a larger reward scale from outweighing the rest of a mix (``reward.tasks``
  weights rescale one task).
* **Outcome.** ``score`` is the return clipped to [0, 1]; an episode is a success (``success/<env>``, held-out
  ``accuracy``) when its return reached 1, which is what GEM's games pay for a solved game and what a TRL class's
  ``get_reward`` or an OpenEnv rubric typically pays for a win.
* **Randomness.** Code that draws from the global ``random`` and ``numpy.random`` generators (GEM seeds them in
  ``reset`` and draws in ``step``; TRL classes often ``random.choice`` a target in ``reset``) runs each call under
  :class:`IsolatedRandom`, with the generators set to its episode's own state.
"""

from __future__ import annotations

import importlib
import json
import math
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from polyrl.envs.environment import Environment, StepResult
from polyrl.envs.tool_formats import UsesToolFormat
from polyrl.errors import UserError
from polyrl.tasks.base import Problem

RETURN_BOUND = 1.0
"""An episode's return (the sum of its step rewards) is held in ``[-RETURN_BOUND, RETURN_BOUND]``."""
SUCCESS_RETURN = 1.0 - 1e-6
"""The return from which an episode counts as a success (1, less float rounding: Sudoku pays 1/n per cell)."""
ANSWER_CHARS = 200
"""The end of the last action kept as an episode's ``answer`` (for the samples the run logs)."""


def import_object(path: str, name: str) -> Any:
    """The object ``path`` (``package.module:Attr``) names; any problem is one line naming ``name``."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr or ":" in attr:
        raise UserError(f"{name}: name the class as package.module:Class")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or the module's own error on import
        first = (str(exc).strip().splitlines() or [""])[0]
        raise UserError(f"{name}: cannot import {module_name!r} ({type(exc).__name__}: {first})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UserError(f"{name}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def step_reward(value: Any) -> float:
    """A step's reward as a number: None is 0; anything but a finite number is the environment's error."""
    if value is None:
        return 0.0
    if isinstance(value, (bool, int, float, np.number)) and math.isfinite(float(value)):
        return float(value)
    raise ValueError(f"the environment paid a reward that is not a finite number: {value!r}")


def as_text(value: Any) -> str:
    """A value from an environment as message text: a string as it is, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False, default=str)


class HubEnvironment(UsesToolFormat, Environment):
    """An episode of an environment from another hub: its rewards held to the return bound, its outcome scored as
    the module says, and its actions read in the run's tool-call format (for environments that take tool calls)."""

    def __init__(self, problem: Problem, max_turns: int, tool_format: str):
        super().__init__(problem, max_turns)
        self.use_tool_format(tool_format)
        self.total = 0.0
        """The return so far (the sum of the rewards paid, within the bound)."""

    def pay(self, reward: Any) -> float:
        """Add a step's reward to the return and give what the step pays (less, where the bound cuts it)."""
        held = min(max(self.total + step_reward(reward), -RETURN_BOUND), RETURN_BOUND)
        paid, self.total = held - self.total, held
        return paid

    def finish(self, paid: float, reason: str, action: str | None = None) -> StepResult:
        """The last step: it pays ``paid``; the episode's outcome follows from its return."""
        answer = None if action is None else action.strip()[-ANSWER_CHARS:]
        return self.end(paid, self.total >= SUCCESS_RETURN, min(max(self.total, 0.0), 1.0), reason, answer)

    def go_on(self, paid: float, observation: list, action: str | None = None) -> StepResult:
        """A step after which the episode goes on, unless that was its last turn (``max_turns``)."""
        if self.turn >= self.max_turns:
            return self.finish(paid, "max_turns", action)
        return StepResult(observation, paid, False)


class BuiltByName:
    """An environment task that another process (a Ray rollout worker) rebuilds from its name and the run's ``env``
    settings: what it holds (a module, a lock, pooled instances) does not pickle. The environment's module must be
    importable there too (``PYTHONPATH``, or an installed package)."""

    env_config: Any = None
    dataset: Any = None

    def __reduce__(self):
        from polyrl.envs.env_registry import get_env_task

        return get_env_task, (self.name, self.env_config, self.dataset)


_GLOBAL_GENERATORS = threading.RLock()


class IsolatedRandom:
    """One episode's own state of the global ``random`` and ``numpy.random`` generators.

    Drawn from by several episodes at once (``env.concurrency`` threads), the global generators would interleave
    their draws in whatever order the threads ran, so two runs of one config would play different games; and an
    environment's ``reset(seed)`` would reseed them for the trainer too. Each call :meth:`active` runs holds one
    process-wide lock, with the generators set to this episode's state (seeded from the problem), and saves that
    state afterwards; the caller's state is put back. The calls are short (a game's move), so the lock costs little."""

    def __init__(self, seed: int):
        self.state = random.Random(seed).getstate()
        legacy = np.random.RandomState(seed % 2**32)  # as numpy.random.seed(seed) leaves the global generator
        self.np_state = legacy.get_state()

    @contextmanager
    def active(self) -> Iterator[None]:
        with _GLOBAL_GENERATORS:
            saved, np_saved = random.getstate(), np.random.get_state()
            random.setstate(self.state)
            np.random.set_state(self.np_state)
            try:
                yield
            finally:
                self.state, self.np_state = random.getstate(), np.random.get_state()
                random.setstate(saved)
                np.random.set_state(np_saved)
