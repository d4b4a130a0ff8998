"""Task samplers: which task each prompt of the next batch comes from.

A sampler sees the per-task outcomes of every step through :meth:`TaskSampler.update` and can change its
weights; its state is saved in checkpoints. Register new ones with :func:`register_sampler`.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from polyrl.errors import UserError

SAMPLERS: dict[str, type["TaskSampler"]] = {}


def register_sampler(name: str) -> Callable[[type["TaskSampler"]], type["TaskSampler"]]:
    def deco(cls):
        cls.name = name
        SAMPLERS[name] = cls
        return cls

    return deco


class TaskSampler:
    """Base class: fixed weights over ``tasks``; subclasses adapt them in :meth:`update`."""

    name = "base"

    def __init__(self, tasks: list[str], **options: Any):
        if options:
            raise UserError(f"sampler {self.name!r} takes no option(s) {', '.join(sorted(options))}")
        self.tasks = list(tasks)

    def weights(self) -> np.ndarray:
        return np.full(len(self.tasks), 1.0 / len(self.tasks))

    def sample(self, n: int, rng: np.random.Generator) -> list[str]:
        idx = rng.choice(len(self.tasks), size=n, p=self.weights())
        return [self.tasks[i] for i in idx]

    def update(self, task: str, scores: list[float]) -> None:
        """Outcomes (verifier scores in [0, 1]) of the latest completions of ``task``."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


@register_sampler("uniform")
class UniformSampler(TaskSampler):
    """Every task equally often."""


@register_sampler("weighted")
class WeightedSampler(TaskSampler):
    """Fixed weights, normalised to sum to one."""

    def __init__(self, tasks: list[str], weights: dict[str, float] | list[float] | None = None):
        super().__init__(tasks)
        if weights is None:
            raise UserError("sampler 'weighted' needs weights (a mapping task -> weight)")
        if isinstance(weights, dict):
            unknown = sorted(set(weights) - set(tasks))
            if unknown:
                raise UserError(f"sampler weights name unknown task(s) {', '.join(unknown)}")
            w = np.array([float(weights.get(t, 0.0)) for t in tasks])
        else:
            if len(weights) != len(tasks):
                raise UserError(f"sampler weights: {len(weights)} values for {len(tasks)} tasks")
            w = np.array([float(x) for x in weights])
        if (w < 0).any() or not np.isfinite(w).all():
            raise UserError("sampler weights must be finite and non-negative")
        if w.sum() <= 0:
            raise UserError("sampler weights sum to zero")
        self._w = w / w.sum()

    def weights(self) -> np.ndarray:
        return self._w


def make_sampler(name: str, tasks: list[str], options: dict[str, Any] | None = None) -> TaskSampler:
    if name not in SAMPLERS:
        raise UserError(f"unknown sampler {name!r}; known: {', '.join(sorted(SAMPLERS))}")
    return SAMPLERS[name](tasks, **(options or {}))
