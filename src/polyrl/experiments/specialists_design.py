"""The design of a joint-vs-specialists experiment (``experiments/specialists.py``): its arms, their RL budgets
and the checks on ``--train``, the budget and the held-out category. No training and no I/O here: the runner,
the report and the analysis paired by problem (``experiments/by_problem.py``) all read it."""

from __future__ import annotations

from dataclasses import dataclass

from polyrl.errors import UserError

JOINT = "joint"
ONLY_PREFIX = "only_"
LOCO_OTHERS = "loco_others"
LOCO_PREFIX = "loco_"
WARM_START = "warm start"
SPECIALISTS = "specialists"
"""The composite row: each trained task scored by its own specialist, each transfer task by their mean."""


def arm_name(task: str) -> str:
    """``only_<task>`` with ``/`` (a composed or plugin task's namespace) as ``_``: one directory per arm."""
    return ONLY_PREFIX + task.replace("/", "_")


@dataclass
class SpecialistsDesign:
    trained: list[str]
    """The tasks RL trains on (the joint run's mix; one specialist each)."""
    transfer: list[str]
    """The config's other tasks: trained by no arm, scored in every run."""
    steps: int
    """The joint run's RL steps (the budget every group of arms shares)."""
    categories: dict[str, str]
    """Trained task -> its category."""
    holdout: str | None = None
    """Leave-one-category-out's held-out category (None: no such arms)."""

    @property
    def arms(self) -> dict[str, tuple[list[str], int]]:
        """Arm -> (tasks RL samples, RL steps)."""
        k = len(self.trained)
        out = {JOINT: (list(self.trained), self.steps)}
        out.update({arm_name(t): ([t], self.steps // k) for t in self.trained})
        if self.holdout is not None:
            out[LOCO_OTHERS] = (self.loco_others, self.steps // 2)
            out[LOCO_PREFIX + self.holdout] = (self.held, self.steps // 2)
        return out

    @property
    def held(self) -> list[str]:
        """The held-out category's trained tasks."""
        return [t for t in self.trained if self.categories[t] == self.holdout]

    @property
    def loco_others(self) -> list[str]:
        return [t for t in self.trained if self.categories[t] != self.holdout]


def design_specialists(
    tasks: list[str], train: list[str], steps: int, categories: dict[str, str], holdout: str | None = None
) -> SpecialistsDesign:
    """Check ``train`` (a subset of the config's ``tasks``, two or more), the budget and the held-out category;
    ``categories`` maps each task to its category. Bad input is a :class:`UserError`."""
    if len(set(tasks)) != len(tasks):
        raise UserError("a task is listed twice in the config")
    if len(set(train)) != len(train):
        raise UserError("--train names a task twice")
    unknown = [t for t in train if t not in tasks]
    if unknown:
        raise UserError(
            f"--train: {', '.join(map(repr, unknown))} is not a task of the config ({', '.join(tasks)}); "
            "every arm is scored on the config's tasks"
        )
    if len(train) < 2:
        raise UserError("--train needs two or more tasks: joint training on one task is its specialist")
    if steps % len(train):
        raise UserError(
            f"rl.steps {steps} does not split evenly over {len(train)} specialists; use a multiple of {len(train)}"
        )
    if holdout is not None:
        trained_cats = {categories[t] for t in train}
        if holdout not in trained_cats:
            raise UserError(
                f"--holdout-category {holdout!r} is not the category of a trained task; their categories: "
                + ", ".join(sorted(trained_cats))
            )
        if trained_cats == {holdout}:
            raise UserError(
                f"every trained task is of category {holdout!r}: holding it out leaves nothing to train on"
            )
        if steps % 2:
            raise UserError(f"rl.steps {steps} is odd: leave-one-category-out's two arms get half of it each")
    transfer = [t for t in tasks if t not in train]
    return SpecialistsDesign(list(train), transfer, steps, {t: categories[t] for t in train}, holdout)
