"""Task samplers: which task each prompt of the next batch comes from.

A sampler sees the per-task outcomes of every step through :meth:`TaskSampler.update`, learns the current
RL step through :meth:`TaskSampler.set_step`, and can change its weights; its state is saved in
checkpoints. Register new ones with :func:`register_sampler` (plugins: the ``polyrl.samplers`` entry-point
group); the adaptive ones live in :mod:`polyrl.curriculum.adaptive`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from polyrl.errors import UserError
from polyrl.registry import Registry

if TYPE_CHECKING:
    from polyrl.tasks.base import Problem, Task


def _sampler_entry(name: str, cls: Any) -> type[TaskSampler]:
    if not (isinstance(cls, type) and issubclass(cls, TaskSampler)):
        raise TypeError(f"register_sampler expects a TaskSampler subclass, got {cls!r}")
    cls.name = name
    return cls


SAMPLERS: Registry[type[TaskSampler]] = Registry(
    "sampler",
    "polyrl.samplers",
    builtins=("polyrl.curriculum.samplers", "polyrl.curriculum.adaptive", "polyrl.curriculum.weakness"),
    entry=_sampler_entry,
)


def register_sampler(name: str) -> Callable[[type[TaskSampler]], type[TaskSampler]]:
    """Class decorator: make a :class:`TaskSampler` subclass available as ``make_sampler(name, ...)``."""
    return SAMPLERS.register(name)


class TaskSampler:
    """Base class: fixed weights over ``tasks``; subclasses adapt them in :meth:`update` / :meth:`set_step`."""

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

    def observe(self, problem: Problem, scores: list[float]) -> None:
        """Outcomes of one group of completions of ``problem``; samplers that track problems override this."""
        self.update(problem.task, scores)

    def draw(
        self, n: int, rng: np.random.Generator, tasks: Mapping[str, Task], difficulty: Callable[[str], Any]
    ) -> list[Problem]:
        """The next ``n`` training problems: tasks from :meth:`sample`, each generated from a seed drawn from
        ``rng`` at ``difficulty(task)``. Samplers that make problems of their own override this."""
        return [
            tasks[name].generate(int(rng.integers(2**62)), difficulty(name), split="train")
            for name in self.sample(n, rng)
        ]

    def metrics(self) -> dict[str, float]:
        """Extra per-step metrics of the sampler (logged with ``sampler_weight/<task>``)."""
        return {}

    def set_step(self, step: int) -> None:
        """The RL step (0-based) whose batch is sampled next; schedules use it, others ignore it."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


@register_sampler("uniform")
class UniformSampler(TaskSampler):
    """Every task equally often."""


def mixture_weights(tasks: list[str], weights: Any, what: str = "sampler weights") -> np.ndarray:
    """``weights`` (mapping task -> weight, or a list in task order) as a probability vector over ``tasks``."""
    if isinstance(weights, dict):
        unknown = sorted(set(weights) - set(tasks))
        if unknown:
            raise UserError(f"{what} name unknown task(s) {', '.join(map(str, unknown))}")
        raw = [weights.get(t, 0.0) for t in tasks]
    elif isinstance(weights, (list, tuple)):
        if len(weights) != len(tasks):
            raise UserError(f"{what}: {len(weights)} values for {len(tasks)} tasks")
        raw = list(weights)
    else:
        raise UserError(f"{what} must be a mapping task -> weight or a list, got {type(weights).__name__}")
    try:
        w = np.array([float(x) for x in raw])
    except (TypeError, ValueError):
        raise UserError(f"{what} must be numbers") from None
    if (w < 0).any() or not np.isfinite(w).all():
        raise UserError(f"{what} must be finite and non-negative")
    if w.sum() <= 0:
        raise UserError(f"{what} sum to zero")
    return w / w.sum()


@register_sampler("weighted")
class WeightedSampler(TaskSampler):
    """Fixed weights, normalised to sum to one."""

    def __init__(self, tasks: list[str], weights: dict[str, float] | list[float] | None = None):
        super().__init__(tasks)
        if weights is None:
            raise UserError("sampler 'weighted' needs weights (a mapping task -> weight)")
        self._w = mixture_weights(self.tasks, weights)

    def weights(self) -> np.ndarray:
        return self._w


@register_sampler("staged")
class StagedSampler(TaskSampler):
    """Ordered phases of the task mix with step boundaries, replaying a share of earlier phases' tasks.

    ``stages`` is a list of ``{tasks: [...], until: STEP}`` (the last stage needs no ``until``): during
    stage k the sampler draws ``1 - replay`` of the prompts uniformly from stage k's tasks and ``replay``
    uniformly from the tasks of stages 0..k-1. A hand-designed curriculum in the sense of Bengio et al.,
    "Curriculum Learning" (ICML 2009); the replay share limits catastrophic forgetting as rehearsal does
    (Robins, "Catastrophic forgetting, rehearsal and pseudorehearsal", 1995).
    """

    def __init__(self, tasks: list[str], stages: list[dict[str, Any]] | None = None, replay: float = 0.2):
        super().__init__(tasks)
        if not stages or not isinstance(stages, list):
            raise UserError("sampler 'staged' needs stages: a list of {tasks: [...], until: STEP}")
        if not 0.0 <= float(replay) <= 1.0:
            raise UserError(f"sampler 'staged': replay {replay!r} is outside [0, 1]")
        self.replay = float(replay)
        self.stage_tasks: list[list[str]] = []
        self.boundaries: list[int] = []
        for k, stage in enumerate(stages):
            if not isinstance(stage, dict) or not stage.get("tasks") or set(stage) - {"tasks", "until"}:
                raise UserError(f"sampler 'staged': stage {k} must be {{tasks: [...], until: STEP}}")
            names = [stage["tasks"]] if isinstance(stage["tasks"], str) else list(stage["tasks"])
            unknown = sorted(set(names) - set(self.tasks))
            if unknown:
                raise UserError(f"sampler 'staged': stage {k} names unknown task(s) {', '.join(map(str, unknown))}")
            self.stage_tasks.append(names)
            last = k == len(stages) - 1
            if "until" not in stage:
                if not last:
                    raise UserError(f"sampler 'staged': stage {k} needs until (the step it ends at)")
                continue
            until = stage["until"]
            if (
                not isinstance(until, int)
                or isinstance(until, bool)
                or until <= (self.boundaries[-1] if self.boundaries else 0)
            ):
                raise UserError(
                    f"sampler 'staged': stage {k} until must be an integer step after the previous stage's"
                )
            if not last:
                self.boundaries.append(until)
        self.step = 0

    def stage(self) -> int:
        """Index of the stage the current step falls in."""
        return int(np.searchsorted(self.boundaries, self.step, side="right"))

    def set_step(self, step: int) -> None:
        self.step = int(step)

    def weights(self) -> np.ndarray:
        k = self.stage()
        current = self.stage_tasks[k]
        earlier = sorted({t for s in self.stage_tasks[:k] for t in s} - set(current))
        w = np.zeros(len(self.tasks))
        share = self.replay if earlier else 0.0
        for t in current:
            w[self.tasks.index(t)] += (1.0 - share) / len(current)
        for t in earlier:
            w[self.tasks.index(t)] += share / len(earlier)
        return w

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state.get("step", 0))


def make_sampler(name: str, tasks: list[str], options: dict[str, Any] | None = None) -> TaskSampler:
    """Build the sampler registered as ``name``; unknown names and options are a :class:`UserError`."""
    cls, options = SAMPLERS.lookup(name), dict(options or {})
    params = inspect.signature(cls.__init__).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        unknown = sorted(set(options) - set(params) - {"self", "tasks"})
        if unknown:
            known = ", ".join(p for p in params if p not in ("self", "tasks")) or "none"
            raise UserError(f"sampler {name!r} has no option(s) {', '.join(unknown)}; known: {known}")
    return cls(tasks, **options)
