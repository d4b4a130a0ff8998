"""Weakness-driven problem synthesis: problems the policy fails are recorded, and problems near them are mixed into
the following batches (after SwS, Liang et al. 2025, "SwS: Self-aware Weakness-driven Problem Synthesis in
Reinforcement Learning for LLM Reasoning": failed problems → new problems on the same skills).

Here the "skills" of a failed problem are its task and its generator parameters, so a problem near it is the same
task at neighbouring parameters (one integer parameter moved by one step) with a fresh seed, or the failed problem
itself drawn again (``replay``). A problem leaves the record when one of its groups solves it, or is retired after
``max_failures`` failed groups.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from polyrl.curriculum.samplers import TaskSampler, register_sampler
from polyrl.errors import UserError
from polyrl.tasks.base import DifficultySpace, Problem, Task


@dataclass
class Failure:
    """One recorded problem that no completion of its group solved."""

    task: str
    params: dict[str, Any]
    seed: int
    failures: int = 1
    """Groups of this problem that scored no correct completion."""

    def key(self) -> str:
        return f"{self.task}|{self.seed}|{json.dumps(self.params, sort_keys=True)}"


def neighbour_params(space: DifficultySpace, params: Mapping[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    """``params`` with one of its parameters moved one step up or down within its range: 1 for integer
    parameters spanning at most 10 values, else a tenth of the span. A task without movable parameters keeps
    its parameters (the neighbour is then a fresh seed)."""
    out = {p.name: params[p.name] for p in space.params if p.name in params}
    movable = [p for p in space.params if p.name in out and p.easy != p.hard]
    if not movable:
        return out
    p = movable[int(rng.integers(len(movable)))]
    lo, hi = sorted((p.easy, p.hard))
    span = hi - lo
    step = (1 if span <= 10 else round(span / 10)) if p.integer else span / 10
    direction = 1 if rng.random() < 0.5 else -1
    value = out[p.name] + direction * step
    if not lo <= value <= hi:
        value = out[p.name] - direction * step
    value = min(max(value, lo), hi)
    out[p.name] = int(value) if p.integer else float(value)
    return out


@register_sampler("weakness")
class WeaknessSampler(TaskSampler):
    """Uniform over tasks, with a share ``share`` of every batch drawn near recorded failures.

    Options: ``share`` (0.25) of each batch's problems from the record while it is not empty; of those, ``replay``
    (0.3) are the failed problem itself and the rest neighbours; ``pool_size`` (256) most recorded problems (the
    oldest leaves first); ``max_failures`` (3) failed groups after which a problem is retired.
    """

    def __init__(
        self, tasks: list[str], share: float = 0.25, replay: float = 0.3, pool_size: int = 256, max_failures: int = 3
    ):
        super().__init__(tasks)
        for option, value in (("share", share), ("replay", replay)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise UserError(f"sampler 'weakness': {option} {value!r} is outside [0, 1]")
        for option, value in (("pool_size", pool_size), ("max_failures", max_failures)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"sampler 'weakness': {option} must be a positive integer, got {value!r}")
        self.share, self.replay = float(share), float(replay)
        self.pool_size, self.max_failures = pool_size, max_failures
        self.pool: dict[str, Failure] = {}
        self.counts = {"recorded": 0, "solved": 0, "retired": 0}

    def observe(self, problem: Problem, scores: list[float]) -> None:
        if problem.split != "train" or problem.task not in self.tasks:
            return
        record = Failure(problem.task, dict(problem.params), int(problem.seed))
        key = record.key()
        if any(s >= 1.0 for s in scores):
            if self.pool.pop(key, None) is not None:
                self.counts["solved"] += 1
        elif key in self.pool:
            self.pool[key].failures += 1
            if self.pool[key].failures >= self.max_failures:
                del self.pool[key]
                self.counts["retired"] += 1
        else:
            self.pool[key] = record
            self.counts["recorded"] += 1
            if len(self.pool) > self.pool_size:
                del self.pool[next(iter(self.pool))]

    def draw(
        self, n: int, rng: np.random.Generator, tasks: Mapping[str, Task], difficulty: Callable[[str], Any]
    ) -> list[Problem]:
        records = [r for r in self.pool.values() if r.task in tasks]
        near = int(rng.binomial(n, self.share)) if records else 0
        problems = super().draw(n - near, rng, tasks, difficulty)
        for _ in range(near):
            record = records[int(rng.integers(len(records)))]
            try:
                problems.append(self._near(record, rng, tasks[record.task]))
            except UserError:  # a task whose problems do not take their own parameters back: not synthesized from
                self.pool.pop(record.key(), None)
                problems += super().draw(1, rng, tasks, difficulty)
        return problems

    def _near(self, record: Failure, rng: np.random.Generator, task: Task) -> Problem:
        space = task.difficulty_space()
        if rng.random() < self.replay:
            params = {k: v for k, v in record.params.items() if k in {p.name for p in space.params}}
            problem, source = task.generate(record.seed, params, split="train"), "replay"
        else:
            params = neighbour_params(space, record.params, rng)
            problem, source = task.generate(int(rng.integers(2**62)), params, split="train"), "synthesized"
        problem.source = source
        return problem

    def metrics(self) -> dict[str, float]:
        """``synth/pool_size`` (problems on record now) and the running counts recorded, solved, retired."""
        return {"synth/pool_size": float(len(self.pool)), **{f"synth/{k}": float(v) for k, v in self.counts.items()}}

    def state_dict(self) -> dict[str, Any]:
        return {"pool": [asdict(r) for r in self.pool.values()], "counts": dict(self.counts)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        records = [Failure(**r) for r in state.get("pool", [])]
        self.pool = {r.key(): r for r in records}
        self.counts.update(state.get("counts", {}))
