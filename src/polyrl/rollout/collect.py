"""Stage 1 of an RL step: collect scored groups of completions, with DAPO's dynamic sampling.

One collector serves every backend. A :class:`GroupSource` turns problems into groups of trajectories: in
this process (:class:`LocalSource`, the trainer's generation backend) or on Ray actors
(:class:`polyrl.distributed.pool.RaySource`). The collector draws problems, scores each round's groups
with the batched reward terms, tells the curriculum what it saw, and — with dynamic sampling — drops
groups whose rewards are all equal and asks for more (Yu et al. 2025, "DAPO", §3.2).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from polyrl.algos import zero_variance_groups
from polyrl.envs.registry import ENV_CONCURRENCY
from polyrl.rollout.multi_turn import rollout_mixed
from polyrl.rollout.trajectory import Trajectory
from polyrl.tasks import Problem

ProblemFactory = Callable[[int], list[Problem]]
"""``make_problems(n)``: the next ``n`` training problems (task sampler + generators)."""


class GroupSource(Protocol):
    def groups(self, n: int, make_problems: ProblemFactory) -> list[list[Trajectory]]:
        """Up to ``n`` completed groups (fewer only if groups failed for good), each a list of trajectories."""
        ...

    def stats(self) -> dict[str, float]:
        """Backend counters to log with the step (staleness, failed groups…); empty when there are none."""
        ...


@dataclass(frozen=True)
class Sampling:
    """How completions are sampled for RL: one group of ``group_size`` per problem."""

    group_size: int
    max_new_tokens: int
    temperature: float
    top_p: float
    max_episode_tokens: int
    env_concurrency: int = ENV_CONCURRENCY
    """Environment steps run at once (``env.concurrency``)."""


class LocalSource:
    """Groups generated in this process by the trainer's generation backend (single- and multi-turn)."""

    def __init__(self, tasks, backend, prompts, sampling: Sampling, reward_config, version: Callable[[], int]):
        self.tasks, self.backend, self.prompts = tasks, backend, prompts
        self.sampling, self.reward_config, self.version = sampling, reward_config, version

    def groups(self, n: int, make_problems: ProblemFactory) -> list[list[Trajectory]]:
        s = self.sampling
        trajs = rollout_mixed(
            make_problems(n),
            self.tasks,
            self.backend,
            self.prompts,
            s.group_size,
            s.max_new_tokens,
            self.reward_config,
            s.max_episode_tokens,
            temperature=s.temperature,
            top_p=s.top_p,
            version=self.version(),
            env_concurrency=s.env_concurrency,
        )
        by_group: dict[int, list[Trajectory]] = {}
        for t in trajs:
            by_group.setdefault(t.group, []).append(t)
        return [by_group[g] for g in sorted(by_group)]

    def stats(self) -> dict[str, float]:
        return {}


@dataclass
class Collected:
    """A step's kept trajectories (numbered by group, 0..K-1 in generation order) and how they were got."""

    trajectories: list[Trajectory]
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

    def merged(self, other: Collected) -> Collected:
        """This step's groups followed by ``other``'s (renumbered after these), with the counts added up."""
        offset = len({t.group for t in self.trajectories})
        for t in other.trajectories:
            t.group += offset
        return Collected(
            self.trajectories + other.trajectories,
            gen_time=self.gen_time + other.gen_time,
            gen_tokens=self.gen_tokens + other.gen_tokens,
            groups_generated=self.groups_generated + other.groups_generated,
            groups_dropped=self.groups_dropped + other.groups_dropped,
            refill_rounds=self.refill_rounds + other.refill_rounds,
            backend={**self.backend, **other.backend},
            extra={**self.extra, **other.extra},
        )


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
    """``want`` groups from ``source``. Each round's trajectories are scored together (``score``: the batched
    reward-model, judge and majority-vote terms), then every group is shown to ``observe`` (the task sampler
    and difficulty controller). With ``dynamic_sampling``, groups without signal (:func:`has_signal`) are
    dropped and up to ``max_refills`` more rounds ask for the missing ones."""
    kept: list[Trajectory] = []
    kept_groups = generated = dropped = rounds = tokens = 0
    t0 = time.perf_counter()
    need = want
    while need > 0:
        groups = source.groups(need, make_problems)
        rounds += 1
        if not groups:
            break
        for members in groups:
            for t in members:
                t.group = generated
                tokens += len(t.response_ids)
            generated += 1
        score([t for members in groups for t in members])
        for members in groups:
            observe(members)
            if dynamic_sampling and not has_signal(members):
                dropped += 1
                continue
            kept.extend(members)
            kept_groups += 1
        need = want - kept_groups
        if not dynamic_sampling or rounds > max_refills:
            break
    # renumber the kept groups 0..K-1 so that group ids index the step's groups
    order: dict[int, int] = {}
    for t in kept:
        t.group = order.setdefault(t.group, len(order))
    return Collected(
        kept,
        gen_time=time.perf_counter() - t0,
        gen_tokens=tokens,
        groups_generated=generated,
        groups_dropped=dropped,
        refill_rounds=rounds - 1,
        backend=source.stats(),
    )
