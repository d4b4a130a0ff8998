"""Stage 2 of an RL step: score a batch of unscored trajectories.

:func:`score` is the one place a reward is made, for single-turn completions and multi-turn episodes alike:

1. verdicts — every single-turn response of the batch verified at once (:func:`verify_trajectories`; an
   episode's verdict is its environment's outcome, set when it ended);
2. rule terms (:mod:`polyrl.rewards.rules`) — ``verifier``, ``format``, length penalties, thinking terms,
   and an episode's ``env_return``;
3. batched terms (:class:`~polyrl.rewards.scorer.RewardScorer`) — reward model, judge, majority vote and
   user functions;
4. ``reward`` = the sum of every term times its weight for the sample's task (``reward.tasks`` overrides
   applied here, once), the batched terms only for verified-correct samples under ``gate: verifier``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from polyrl.rewards.compose import RewardConfig
from polyrl.rewards.rules import RULES, Sample, rule_terms, weight_of
from polyrl.tasks import Task
from polyrl.tasks.isolation import verify_many


class BatchedTerms(Protocol):
    """What scores the batched terms (a :class:`~polyrl.rewards.scorer.RewardScorer`, or one split across ranks)."""

    def score(self, trajs: list) -> None: ...


def verify_trajectories(trajs: list, tasks: Mapping[str, Task]) -> None:
    """Give every trajectory without a verdict (a single-turn completion) its task's verdict, with one round
    trip to the isolated verifier pool for the whole batch."""
    todo = [t for t in trajs if t.verdict is None]
    if todo:
        verdicts = verify_many([(tasks[t.task], t.problem, t.text) for t in todo])
        for t, verdict in zip(todo, verdicts):
            t.verdict = verdict


def score(
    trajs: list,
    tasks: Mapping[str, Task],
    config: RewardConfig,
    max_new_tokens: int,
    batched: BatchedTerms | None = None,
) -> None:
    """Score ``trajs`` in place: ``verdict``, ``reward_terms``, ``reward_failures`` and ``reward`` (see the
    module). ``max_new_tokens`` is the per-turn token budget the length terms are measured in."""
    verify_trajectories(trajs, tasks)
    weights = {name: config.weights(name) for name in {t.task for t in trajs}}
    for t in trajs:
        sample = Sample(
            tasks[t.task],
            t.problem,
            t.text,
            len(t.response_ids),
            t.finished,
            max_new_tokens,
            t.verdict,
            weights[t.task],
            config.overlong_cache,
            t.turn_rewards if t.is_episode else None,
        )
        t.reward_terms = {**rule_terms(sample), **t.logged_terms}
    if batched is not None:
        batched.score(trajs)
    gated = config.gate == "verifier"
    for t in trajs:
        total = 0.0
        for name, value in t.reward_terms.items():
            if name in t.logged_terms or (name not in RULES and gated and not t.verdict.correct):
                continue
            total += weight_of(name, weights[t.task]) * value
        t.reward = total


def scoring(tasks: Mapping[str, Task], config: RewardConfig, max_new_tokens: int, batched: BatchedTerms | None = None):
    """``score`` with everything but the trajectories fixed: the collector's ``score(trajs)``."""
    return lambda trajs: score(trajs, tasks, config, max_new_tokens, batched)
