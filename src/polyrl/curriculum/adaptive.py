"""Adaptive task samplers: weights that follow each task's recent success rate.

Each sampler keeps an exponential moving average (EMA) of the mean verifier score of every group of
``task`` it is told about (:meth:`TaskSampler.update`), and turns the per-task averages into sampling
weights. A task not yet seen counts as the sampler's most interesting one, so every task gets tried.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from polyrl.curriculum.samplers import TaskSampler, register_sampler
from polyrl.errors import UserError


def _check_rate(
    name: str, option: str, value: Any, low: float = 0.0, high: float = 1.0, open_low: bool = True
) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise UserError(f"sampler {name!r}: {option} must be a number, got {value!r}") from None
    if not (low < v <= high if open_low else low <= v <= high):
        bracket = "(" if open_low else "["
        raise UserError(f"sampler {name!r}: {option} {value!r} is outside {bracket}{low:g}, {high:g}]")
    return v


class SuccessEMASampler(TaskSampler):
    """Base of the adaptive samplers: ``ema[task] ← (1 - alpha)·ema[task] + alpha·mean(scores)``."""

    def __init__(self, tasks: list[str], ema: float = 0.1, epsilon: float = 0.1):
        super().__init__(tasks)
        self.alpha = _check_rate(self.name, "ema", ema)
        self.epsilon = _check_rate(self.name, "epsilon", epsilon, open_low=False)
        self.success: dict[str, float] = {}

    def update(self, task: str, scores: list[float]) -> None:
        if not scores:
            return
        x = float(np.mean(scores))
        old = self.success.get(task)
        self.success[task] = x if old is None else (1 - self.alpha) * old + self.alpha * x

    def preference(self) -> np.ndarray:
        """Unnormalised, non-negative interest in each task (subclasses)."""
        raise NotImplementedError

    def weights(self) -> np.ndarray:
        n = len(self.tasks)
        pref = self.preference()
        total = pref.sum()
        greedy = pref / total if total > 0 and np.isfinite(total) else np.full(n, 1.0 / n)
        # the epsilon-uniform floor keeps every task sampled, so its statistics stay current
        return self.epsilon / n + (1 - self.epsilon) * greedy

    def state_dict(self) -> dict[str, Any]:
        return {"success": dict(self.success)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.success = {t: float(v) for t, v in state.get("success", {}).items() if t in self.tasks}


@register_sampler("success_temperature")
class SuccessTemperatureSampler(SuccessEMASampler):
    """Weights ∝ exp(-success / T): tasks the policy fails more often are drawn more often.

    A Boltzmann (softmax) teacher over negative success, as in the prioritized task selection of
    Graves et al., "Automated Curriculum Learning for Neural Networks" (ICML 2017) and the failure-driven
    weighting of Matiisen et al., "Teacher-Student Curriculum Learning" (2017). Low ``temperature`` focuses
    on the weakest task; high ``temperature`` approaches uniform.
    """

    def __init__(self, tasks: list[str], temperature: float = 0.2, ema: float = 0.1, epsilon: float = 0.05):
        super().__init__(tasks, ema=ema, epsilon=epsilon)
        self.temperature = _check_rate(self.name, "temperature", temperature, high=float("inf"))

    def preference(self) -> np.ndarray:
        s = np.array([self.success.get(t, 0.0) for t in self.tasks])
        return np.exp(-(s - s.min()) / self.temperature)


@register_sampler("learning_progress")
class LearningProgressSampler(SuccessEMASampler):
    """Weights ∝ |fast EMA − slow EMA| of success: tasks whose success is changing, up or down.

    The absolute learning progress of Portelas et al., "Teacher algorithms for curriculum learning of Deep
    RL in continuously parameterized environments" (CoRL 2019), estimated as the gap between a fast and a
    slow EMA of success as in Kanitscheider et al., "Multi-task curriculum learning in a complex, visual,
    hard-exploration domain: Minecraft" (2021, eq. 1). ``epsilon`` mixes in uniform sampling.
    """

    def __init__(self, tasks: list[str], fast: float = 0.3, slow: float = 0.05, epsilon: float = 0.2):
        super().__init__(tasks, ema=fast, epsilon=epsilon)
        self.slow_alpha = _check_rate(self.name, "slow", slow)
        if self.slow_alpha >= self.alpha:
            raise UserError(f"sampler {self.name!r}: slow ({slow}) must be smaller than fast ({fast})")
        self.slow: dict[str, float] = {}

    def update(self, task: str, scores: list[float]) -> None:
        if not scores:
            return
        super().update(task, scores)
        x = float(np.mean(scores))
        old = self.slow.get(task)
        self.slow[task] = x if old is None else (1 - self.slow_alpha) * old + self.slow_alpha * x

    def progress(self) -> np.ndarray:
        return np.array([abs(self.success[t] - self.slow[t]) if t in self.slow else 0.0 for t in self.tasks])

    def preference(self) -> np.ndarray:
        lp = self.progress()
        unseen = np.array([t not in self.slow for t in self.tasks])
        if unseen.any():  # try every task once before trusting the progress estimates
            return unseen.astype(float)
        return lp

    def state_dict(self) -> dict[str, Any]:
        return {"success": dict(self.success), "slow": dict(self.slow)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.slow = {t: float(v) for t, v in state.get("slow", {}).items() if t in self.tasks}


@register_sampler("success_band")
class SuccessBandSampler(SuccessEMASampler):
    """Prefers tasks whose recent pass rate lies inside ``[low, high]``.

    A group whose G completions are all correct or all wrong has zero group-relative advantage and gives
    GRPO no gradient (Yu et al., "DAPO", 2025, §3.2 dynamic sampling); tasks of intermediate success give
    the most signal. Weight 1 inside the band, ``exp(-d / width)`` at distance ``d`` outside it, plus an
    ``epsilon``-uniform floor. Close in spirit to the online difficulty filtering of Bae et al., "Online
    Difficulty Filtering for Reasoning Oriented Reinforcement Learning" (2025), applied per task.
    """

    def __init__(
        self,
        tasks: list[str],
        low: float = 0.2,
        high: float = 0.8,
        width: float = 0.1,
        ema: float = 0.2,
        epsilon: float = 0.1,
    ):
        super().__init__(tasks, ema=ema, epsilon=epsilon)
        self.low = _check_rate(self.name, "low", low, open_low=False)
        self.high = _check_rate(self.name, "high", high, open_low=False)
        if self.low > self.high:
            raise UserError(f"sampler {self.name!r}: band low {low} is above high {high}")
        self.width = _check_rate(self.name, "width", width, high=float("inf"))

    def preference(self) -> np.ndarray:
        s = np.array([self.success.get(t, (self.low + self.high) / 2) for t in self.tasks])
        distance = np.maximum(self.low - s, 0.0) + np.maximum(s - self.high, 0.0)
        return np.exp(-distance / self.width)
