"""Stage 1 of an RL step: collect groups of completions, with DAPO's dynamic sampling.

One collector serves every backend. A :class:`GroupSource` turns problems into unscored groups of
trajectories: in this process (:class:`LocalSource`, the trainer's generation backend, through
:func:`~polyrl.rollout.dispatch.rollout_groups`) or on Ray actors (:class:`polyrl.distributed.pool.RaySource`).
The collector draws problems, hands each round's groups to the scoring stage (``score``:
:func:`polyrl.rewards.stage.score` with the run's settings — dynamic sampling needs the rewards to see which
groups carry signal), tells the curriculum what it saw, and — with dynamic sampling — drops groups whose
rewards are all equal and asks for more (Yu et al. 2025, "DAPO", §3.2).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from polyrl.algos import zero_variance_groups
from polyrl.rollout.dispatch import Sampling, rollout_groups
from polyrl.rollout.trajectory import Trajectory, number_groups
from polyrl.tasks import Problem

__all__ = [
    "Collected",
    "GroupSource",
    "LocalSource",
    "Sampling",
    "by_group",
    "collect_groups",
    "has_signal",
    "numbered",
]

ProblemFactory = Callable[[int], list[Problem]]
"""``make_problems(n)``: the next ``n`` training problems (task sampler + generators)."""


class GroupSource(Protocol):
    def groups(self, n: int, make_problems: ProblemFactory) -> list[list[Trajectory]]:
        """Up to ``n`` completed groups (fewer only if groups failed for good), each a list of trajectories."""
        ...

    def stats(self) -> dict[str, float]:
        """Backend counters to log with the step (staleness, failed groups…); empty when there are none."""
        ...


class LocalSource:
    """Groups generated in this process by the trainer's generation backend (single- and multi-turn)."""

    def __init__(self, tasks, backend, prompts, sampling: Sampling, version: Callable[[], int]):
        self.tasks, self.backend, self.prompts = tasks, backend, prompts
        self.sampling, self.version = sampling, version

    def groups(self, n: int, make_problems: ProblemFactory) -> list[list[Trajectory]]:
        return rollout_groups(
            make_problems(n), self.tasks, self.backend, self.prompts, self.sampling, version=self.version()
        )

    def stats(self) -> dict[str, float]:
        return {}


@dataclass
class Collected:
    """A step's trajectories and how they were got: the kept groups (numbered 0..K-1 in generation order), which
    the update trains on, and the groups dynamic sampling dropped (numbered K.. after them), which the metrics
    count with the kept ones."""

    trajectories: list[Trajectory]
    """The kept groups' trajectories."""
    gen_time: float
    """Seconds spent generating and scoring (all rounds)."""
    gen_tokens: int
    """Response tokens generated, dropped groups included."""
    groups_generated: int
    groups_dropped: int
    refill_rounds: int
    backend: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    """Statistics of another collector, logged with the step as they are (self-play's role metrics)."""
    dropped: list[Trajectory] = field(default_factory=list)
    """The dropped groups' trajectories, scored like the kept ones (no signal: every reward of a group equal)."""

    @property
    def generated(self) -> list[Trajectory]:
        """Every trajectory the step generated: the kept groups, then the dropped ones."""
        return self.trajectories + self.dropped

    def merged(self, other: Collected) -> Collected:
        """This step's groups and ``other``'s: the kept ones of both (``other``'s renumbered after these), then
        the dropped ones of both, with the counts added up."""
        kept, dropped = numbered(
            by_group(self.trajectories) + by_group(other.trajectories),
            by_group(self.dropped) + by_group(other.dropped),
        )
        return Collected(
            kept,
            gen_time=self.gen_time + other.gen_time,
            gen_tokens=self.gen_tokens + other.gen_tokens,
            groups_generated=self.groups_generated + other.groups_generated,
            groups_dropped=self.groups_dropped + other.groups_dropped,
            refill_rounds=self.refill_rounds + other.refill_rounds,
            backend={**self.backend, **other.backend},
            extra={**self.extra, **other.extra},
            dropped=dropped,
        )


def numbered(
    kept: list[list[Trajectory]], dropped: list[list[Trajectory]]
) -> tuple[list[Trajectory], list[Trajectory]]:
    """The kept groups numbered 0..K-1 and the dropped ones K.. after them, each flat and in order."""
    return number_groups(kept), number_groups(dropped, len(kept))


def by_group(trajs: list[Trajectory]) -> list[list[Trajectory]]:
    """``trajs`` split into their groups, in the order the groups first appear."""
    groups: dict[int, list[Trajectory]] = {}
    for t in trajs:
        groups.setdefault(t.group, []).append(t)
    return list(groups.values())


def has_signal(group: list[Trajectory]) -> bool:
    """False for a group whose rewards are all exactly equal: every group-relative advantage is 0."""
    rewards = torch.tensor([t.reward for t in group], dtype=torch.float64)
    return not bool(zero_variance_groups(rewards, torch.zeros(len(group), dtype=torch.long))[0])


def collect_groups(
    source: GroupSource,
    want: int,
    make_problems: ProblemFactory,
    score: Callable[[list[Trajectory]], None],
    observe: Callable[[list[Trajectory]], None],
    dynamic_sampling: bool,
    max_refills: int,
) -> Collected:
    """``want`` groups from ``source``. Each round's trajectories are scored together (``score``: the scoring
    stage, verdicts, rule terms and batched terms), then every group is shown to ``observe`` (the task sampler
    and difficulty controller). With ``dynamic_sampling``, groups without signal (:func:`has_signal`) are
    dropped and up to ``max_refills`` more rounds ask for the missing ones. Kept groups are numbered 0..K-1
    in generation order, dropped ones after them (:attr:`Collected.dropped`)."""
    kept: list[list[Trajectory]] = []
    dropped: list[list[Trajectory]] = []
    generated = rounds = tokens = 0
    t0 = time.perf_counter()
    need = want
    while need > 0:
        groups = source.groups(need, make_problems)
        rounds += 1
        if not groups:
            break
        # numbered after every group generated so far, so a round's groups (majority vote) stay apart
        scored = number_groups(groups, generated)
        generated += len(groups)
        tokens += sum(len(t.response_ids) for t in scored)
        score(scored)
        for members in groups:
            observe(members)
            if dynamic_sampling and not has_signal(members):
                dropped.append(members)
                continue
            kept.append(members)
        need = want - len(kept)
        if not dynamic_sampling or rounds > max_refills:
            break
    kept_trajs, dropped_trajs = numbered(kept, dropped)
    return Collected(
        kept_trajs,
        gen_time=time.perf_counter() - t0,
        gen_tokens=tokens,
        groups_generated=generated,
        groups_dropped=len(dropped),
        refill_rounds=rounds - 1,
        backend=source.stats(),
        dropped=dropped_trajs,
    )
