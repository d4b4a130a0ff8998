"""An EnvTask that plays the problems of a single-turn task (its generator, difficulty and verifier)."""

from __future__ import annotations

import dataclasses

from polyrl.envs.environment import EnvTask
from polyrl.tasks.base import DEFAULT_DIFFICULTY, Difficulty, DifficultySpace, Problem, Task


class WrappedTask(EnvTask):
    """Problems come from ``inner``; subclasses decide how an episode over one of them is played."""

    category = "agent"

    def __init__(self, inner: Task, max_turns: int):
        super().__init__(inner.answer_format)
        self.inner = inner
        self.max_turns = max_turns
        self.description = f"{inner.name} as an episode"
        self.partial_credit = inner.partial_credit
        self.modalities = inner.modalities  # the problems are the inner task's, images and all

    def difficulty_space(self) -> DifficultySpace:  # type: ignore[override]
        return self.inner.difficulty_space()

    def generate(self, seed: int, difficulty: Difficulty = DEFAULT_DIFFICULTY, split: str = "train") -> Problem:
        """Tasks that draw through ``make`` keep this task's own random stream; tasks with their own
        ``generate`` (``rg/`` datasets, dataset files) draw the inner problem, renamed to this task."""
        if type(self.inner).generate is Task.generate:
            return super().generate(seed, difficulty, split)
        return dataclasses.replace(self.inner.generate(seed, difficulty, split), task=self.name)

    def make(self, rng, params):
        return self.inner.make(rng, params)

    def check(self, answer, problem):
        return self.inner.check(answer, problem)
