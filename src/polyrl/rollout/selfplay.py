"""Self-play: one policy in two roles, trained in the same update.

The **proposer** is shown prompts of a proposer task (:class:`polyrl.tasks.proposer.ProposerTask`, e.g.
``propose_expression``) and writes problems with their claimed answers; the task's verifier checks each proposal
(it parses with a whitelist, bounded; it obeys the prompt; its claimed answer is right). Every valid proposal
becomes a problem of the solver task (``source="proposed"``), and the **solver** — the same policy — answers it
``solver_group_size`` times; the solver's reward is the verifier's, as for any problem. The proposer's reward is
the *learnability* of its problem, a function of the solver group's success rate ``p`` that is highest for
problems solved half of the time (a :data:`LEARNABILITY` entry, ``selfplay.reward``), and ``selfplay.invalid_reward`` (default 0) for an
invalid proposal. A proposer prompt's ``proposals`` completions form one GRPO group; each proposed problem's solver
completions form another; both roles' groups go into the step's update.

:meth:`SelfPlay.collect` returns the step's groups as a :class:`~polyrl.rollout.collect.Collected` (merged with
the ordinary collector's by the trainer) whose ``extra`` holds the role-tagged metrics: ``role/proposer/*``,
``role/solver/*`` and ``selfplay/*`` (proposals, invalid ones by reason, distinct proposals so far).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from polyrl.registry import Registry
from polyrl.rewards.stage import verify_trajectories
from polyrl.rollout.collect import Collected, GroupSource, has_signal, numbered
from polyrl.rollout.trajectory import Trajectory, number_groups
from polyrl.tasks import Problem, Task, Verdict
from polyrl.tasks.proposer import ProposerTask

LEARNABILITY: Registry[Callable[[float], float]] = Registry(
    "learnability", "polyrl.learnability", builtins=("polyrl.rollout.selfplay",)
)
"""The proposer's reward for a valid proposal whose solver group succeeded with rate ``p`` (``selfplay.reward``)."""


def register_learnability(name: str) -> Callable[[Callable[[float], float]], Callable[[float], float]]:
    """Decorator: ``learnability(p) -> reward`` becomes ``selfplay.reward: name``."""
    return LEARNABILITY.register(name)


@register_learnability("variance")
def variance(p: float) -> float:
    """``4 p (1 - p)``: proportional to the variance of the solver group's 0/1 rewards, i.e. to how much GRPO
    signal the problem gives the solver; 1 at p = 1/2, 0 at p = 0 and p = 1."""
    return 4.0 * p * (1.0 - p)


@register_learnability("triangle")
def triangle(p: float) -> float:
    """``1 - |2p - 1|``: the same peak and zeros as ``variance``, falling linearly."""
    return 1.0 - abs(2.0 * p - 1.0)


@register_learnability("azr")
def azr(p: float) -> float:
    """Absolute Zero's proposer reward (Zhao et al. 2025): ``1 - p`` for 0 < p < 1, else 0 (harder is better,
    as long as the solver solves it sometimes)."""
    return 0.0 if p <= 0.0 or p >= 1.0 else 1.0 - p


EXAMPLES_PER_STEP = 8
"""Proposals logged per step (``selfplay/examples``: text, validity, the solver's success rate, reward)."""


@dataclass(frozen=True)
class SelfPlaySettings:
    """What the trainer's ``selfplay`` config section decides (see :class:`polyrl.train.config.SelfPlayConfig`)."""

    proposer: str
    prompts: int
    """Proposer prompts per step; each is a group of ``proposals`` completions."""
    reward: str
    """A name in :data:`LEARNABILITY`."""
    invalid_reward: float
    """The proposer's reward for a proposal the verifier rejects."""


class SelfPlay:
    """The self-play game of one run: proposer groups from ``proposers``, solver groups from ``solvers`` (two
    group sources over the same policy: the proposer's group size and token budget, and the solver's)."""

    def __init__(
        self, settings: SelfPlaySettings, tasks: dict[str, Task], proposers: GroupSource, solvers: GroupSource
    ):
        proposer = tasks[settings.proposer]
        if not isinstance(proposer, ProposerTask):
            raise TypeError(f"task {settings.proposer!r} is not a ProposerTask")
        self.settings = settings
        self.proposer: ProposerTask = proposer
        self.solver = tasks[proposer.solver_task]
        self.proposers, self.solvers = proposers, solvers
        self.tasks = tasks
        self.learnability = LEARNABILITY.lookup(settings.reward)
        self.pool: set[str] = set()
        """Every distinct valid proposal of the run so far (checkpointed)."""

    def collect(
        self,
        rng: np.random.Generator,
        difficulty: Callable[[str], Any],
        score: Callable[[list[Trajectory]], None],
        dynamic_sampling: bool,
    ) -> Collected:
        """One step of the game: proposals, their verdicts, the solver's groups on the valid ones, the proposer's
        rewards. ``score`` (the scoring stage) makes the solver's rewards. With ``dynamic_sampling``,
        groups whose rewards are all equal are dropped (no refill: a proposal is not asked for again)."""
        t0 = time.perf_counter()
        name = self.settings.proposer
        draw = lambda n: [
            self.proposer.generate(int(rng.integers(2**62)), difficulty(name), split="train") for _ in range(n)
        ]
        proposer_groups = self.proposers.groups(self.settings.prompts, draw)
        proposals = [t for group in proposer_groups for t in group]
        verify_trajectories(proposals, self.tasks)  # a proposal's verdict says whether it is a valid problem
        problems: list[Problem | None] = [self._proposed_problem(t) for t in proposals]
        valid = [(t, p) for t, p in zip(proposals, problems) if p is not None]
        solver_groups = self.solvers.groups(len(valid), lambda n: [p for _, p in valid]) if valid else []
        if solver_groups:
            score(number_groups(solver_groups))
        success = {id(group[0].problem): _mean(float(t.verdict.correct) for t in group) for group in solver_groups}
        rates = [success.get(id(p)) if p is not None else None for p in problems]
        for t, rate in zip(proposals, rates):
            if rate is None:
                t.reward = self.settings.invalid_reward
                t.reward_terms = {"learnability": 0.0, "invalid": t.reward}
            else:
                t.reward = self.learnability(rate)
                t.reward_terms = {"learnability": t.reward}
        extra = self._metrics(proposer_groups, problems, rates, solver_groups)
        kept, dropped = [], []
        for group in [*proposer_groups, *solver_groups]:
            (dropped if dynamic_sampling and not has_signal(group) else kept).append(group)
        kept_trajs, dropped_trajs = numbered(kept, dropped)
        return Collected(
            kept_trajs,
            gen_time=time.perf_counter() - t0,
            gen_tokens=sum(len(t.response_ids) for group in [*proposer_groups, *solver_groups] for t in group),
            groups_generated=len(kept) + len(dropped),
            groups_dropped=len(dropped),
            refill_rounds=0,
            extra=extra,
            dropped=dropped_trajs,
        )

    def _proposed_problem(self, t: Trajectory) -> Problem | None:
        """The solver's problem for a proposal the verifier accepted; None for an invalid one. A proposer task whose
        ``proposed_problem`` rejects what its verifier accepted makes the proposal invalid (``rejected``)."""
        if not t.verdict.correct or t.verdict.answer is None:
            return None
        try:
            return self.proposer.proposed_problem(t.verdict.answer, t.problem, self.solver)
        except ValueError:
            v = t.verdict
            t.verdict = Verdict(0.0, False, "rejected", v.format_ok, v.answer)
            return None

    def _metrics(
        self,
        proposer_groups: list[list[Trajectory]],
        problems: list[Problem | None],
        rates: list[float | None],
        solver_groups: list[list[Trajectory]],
    ) -> dict[str, Any]:
        """The step's role metrics, over every proposal and solver completion generated (dropped groups too)."""
        proposals = [t for group in proposer_groups for t in group]
        valid = [(t, p, r) for t, p, r in zip(proposals, problems, rates) if p is not None]
        invalid = Counter(t.verdict.reason for t, p in zip(proposals, problems) if p is None)
        distinct = {p.question for _, p, _ in valid}
        self.pool |= distinct
        out: dict[str, Any] = {
            "selfplay/proposals": float(len(proposals)),
            "selfplay/invalid": float(sum(invalid.values())),
            **{f"selfplay/invalid/{reason}": float(n) for reason, n in sorted(invalid.items())},
            "selfplay/pool_size": float(len(self.pool)),
            "role/proposer/reward": _mean(t.reward for t in proposals),
            "role/proposer/valid": _mean(p is not None for p in problems),
        }
        if valid:
            out["role/proposer/learnability"] = _mean(t.reward for t, _, _ in valid)
            out["role/proposer/learnable"] = _mean(r is not None and 0.0 < r < 1.0 for _, _, r in valid)
            out["role/proposer/distinct"] = len(distinct) / len(valid)
            stats = [self.proposer.proposal_stats(p) for _, p, _ in valid]
            for key in sorted({k for s in stats for k in s}):
                out[f"role/proposer/{key}"] = _mean(s[key] for s in stats if key in s)
        solved = [t for group in solver_groups for t in group]
        if solved:
            out["role/solver/accuracy"] = _mean(float(t.verdict.correct) for t in solved)
            out["role/solver/reward"] = _mean(t.reward for t in solved)
            out["role/solver/problems"] = float(len(solver_groups))
        # a few proposals of the step, one from each prompt in turn
        position = [k for group in proposer_groups for k in range(len(group))]
        spread = sorted(range(len(proposals)), key=lambda i: (position[i], i))[:EXAMPLES_PER_STEP]
        out["selfplay/examples"] = [
            {
                "proposal": (proposals[i].verdict.answer or proposals[i].text)[:120],
                "valid": problems[i] is not None,
                "reason": proposals[i].verdict.reason,
                "solver_success": rates[i],
                "reward": proposals[i].reward,
            }
            for i in spread
        ]
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"pool": sorted(self.pool)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pool = set(state.get("pool", []))


def _mean(xs) -> float:
    xs = [float(x) for x in xs]
    return sum(xs) / len(xs) if xs else math.nan
