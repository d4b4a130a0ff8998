"""Difficulty control: move each task's continuous difficulty knob to keep its success rate in a band.

The controller is an adaptive staircase (Levitt, "Transformed up-down methods in psychoacoustics", JASA
1971): after every ``window`` completions of a task it compares their pass rate with the target band
``[target_low, target_high]`` and raises the knob by ``step_size`` when the task is too easy, lowers it
when too hard, within ``[min_difficulty, max_difficulty]``. Keeping success near the middle keeps GRPO
groups informative, as in the adaptive curriculum of Shi et al., "Efficient Reinforcement Finetuning via
Adaptive Curriculum Learning" (AdaRFT, 2025), which steers the target difficulty by the recent reward.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from polyrl.errors import UserError


class DifficultyController:
    """Per-task knob in [0, 1]; :meth:`update` feeds it outcomes, :meth:`difficulty` reads it."""

    def __init__(
        self,
        start: dict[str, float],
        *,
        target_low: float,
        target_high: float,
        step_size: float,
        window: int,
        min_difficulty: float,
        max_difficulty: float,
        fixed: dict[str, Any] | None = None,
    ):
        """The band, step and bounds have no defaults here: ``difficulty_control`` in the config holds them."""
        self.target_low, self.target_high = target_low, target_high
        self.step_size, self.window = step_size, window
        self.min_difficulty, self.max_difficulty = min_difficulty, max_difficulty
        self.knobs = {t: float(np.clip(k, min_difficulty, max_difficulty)) for t, k in start.items()}
        self.fixed = dict(fixed or {})
        """Difficulties of the tasks the controller leaves alone."""
        self._sum = {t: 0.0 for t in start}
        self._count = {t: 0 for t in start}
        self.pass_rate: dict[str, float] = {}
        """The pass rate of each task's last full window (what the last decision was based on)."""

    def controls(self, task: str) -> bool:
        return task in self.knobs

    def difficulty(self, task: str) -> Any:
        return self.knobs[task] if task in self.knobs else self.fixed[task]

    def update(self, task: str, scores: list[float]) -> None:
        """Outcomes (verifier scores in [0, 1]) of completions of ``task`` drawn at its current knob."""
        if task not in self.knobs:
            return
        self._sum[task] += float(sum(scores))
        self._count[task] += len(scores)
        if self._count[task] < self.window:
            return
        rate = self._sum[task] / self._count[task]
        self.pass_rate[task] = rate
        if rate > self.target_high:
            self.knobs[task] = min(self.max_difficulty, self.knobs[task] + self.step_size)
        elif rate < self.target_low:
            self.knobs[task] = max(self.min_difficulty, self.knobs[task] - self.step_size)
        self._sum[task], self._count[task] = 0.0, 0

    def state_dict(self) -> dict[str, Any]:
        return {
            "knobs": dict(self.knobs),
            "sum": dict(self._sum),
            "count": dict(self._count),
            "pass_rate": dict(self.pass_rate),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, target in (
            ("knobs", self.knobs),
            ("sum", self._sum),
            ("count", self._count),
            ("pass_rate", self.pass_rate),
        ):
            target.update({t: v for t, v in state.get(key, {}).items() if t in self.knobs})


def make_difficulty_controller(config, tasks: dict[str, Any], specs: dict[str, Any]) -> DifficultyController | None:
    """The controller described by ``config`` (a ``DifficultyControlConfig``), or None when it is disabled.

    Each controlled task starts at its configured training difficulty, which must be a knob (a number or a
    preset), not explicit parameters.
    """
    if not config.enabled:
        return None
    names = list(config.tasks) if config.tasks is not None else list(tasks)
    unknown = sorted(set(names) - set(tasks))
    if unknown:
        raise UserError(f"difficulty_control.tasks names task(s) not in the mix: {', '.join(unknown)}")
    start = {}
    for name in names:
        knob = tasks[name].difficulty_space().knob(specs[name].difficulty)
        if knob is None:
            raise UserError(
                f"difficulty_control: task {name!r} has explicit difficulty parameters; give it a knob in [0, 1]"
            )
        start[name] = knob
    return DifficultyController(
        start,
        target_low=config.target_low,
        target_high=config.target_high,
        step_size=config.step_size,
        window=config.window,
        min_difficulty=config.min_difficulty,
        max_difficulty=config.max_difficulty,
        fixed={n: specs[n].difficulty for n in tasks if n not in start},
    )
