"""Proposer tasks: the problem-writing role of self-play (:mod:`polyrl.rollout.selfplay` plays the game).

A proposer task is an ordinary task whose answers are *problems of another task* (its ``solver_task``) together
with their claimed answers. Its verifier checks a proposal: it parses (with a whitelist, bounded in length, size
and work: every proposal is model output), it obeys the prompt's constraints, and the claimed answer is right.
A valid proposal becomes a :class:`~polyrl.tasks.base.Problem` of the solver task with ``source="proposed"``.

Because it is a registered task, a plugin adds a self-play game through the ``polyrl.tasks`` entry point, and the
proposer gets everything tasks get: reference proposals for the SFT warm start, held-out evaluation (the share of
valid proposals on eval-split prompts), ``polyrl tasks show``.
"""

from __future__ import annotations

from typing import ClassVar

from polyrl.errors import UserError
from polyrl.tasks.base import Problem, Task


class ProposerTask(Task):
    """A task whose answers are problems of ``solver_task``. ``check`` scores a proposal's validity (1 or 0, with
    the reason it is invalid); :meth:`proposed_problem` turns a valid one into a problem of the solver task."""

    solver_task: ClassVar[str]
    """The registered task the proposals are problems of (the solver's role; its held-out problems are the
    self-play run's measure of the solver)."""

    def proposed_problem(self, answer: str, proposal: Problem, solver: Task) -> Problem:
        """The solver task's problem that ``answer`` (the extracted answer of a proposal the verifier accepted)
        describes, built with ``solver.problem_from(..., source="proposed")``. Raises ValueError if it is invalid."""
        raise NotImplementedError

    def proposal_stats(self, problem: Problem) -> dict[str, float]:
        """Difficulty statistics of a proposed problem, logged per step as ``role/proposer/<name>`` (their mean
        over the step's valid proposals). Default: none."""
        return {}


def proposer_task_class(name: str) -> type[ProposerTask]:
    """The registered proposer task ``name``; a one-line UserError when it is unknown or not a proposer."""
    from polyrl.tasks.task_registry import TASKS

    cls = TASKS.lookup(name)
    if not (isinstance(cls, type) and issubclass(cls, ProposerTask)):
        raise UserError(
            f"task {name!r} is not a proposer task: self-play needs a ProposerTask (polyrl.tasks.proposer), "
            "e.g. propose_expression"
        )
    return cls
