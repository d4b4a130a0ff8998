"""Stage 2 of an RL step: score a batch of unscored trajectories.

:func:`score` is the one place a reward is made, for single-turn completions and multi-turn episodes alike:

1. verdicts — every single-turn response of the batch verified at once (:func:`verify_trajectories`; an
   episode's verdict is its environment's outcome, set when it ended);
2. rule terms (:mod:`polyrl.rewards.rules`) — ``verifier``, ``format``, length penalties, thinking terms,
   and an episode's ``env_return``;
3. batched terms (:class:`RewardScorer`, built once at start-up: every term with a weight for some task of the
   mix, so configuration errors surface before training) — reward model, judge, majority vote and user
   functions, each term scoring the whole batch at once (a reward model in forward passes, a judge in
   concurrent calls, majority vote per group); a swapped pairwise judge also marks samples whose two verdicts
   disagree (``Trajectory.judge_position_inconsistent``, logged per step), which keep their judge reward;
4. ``reward`` = the sum of every term times its weight for the sample's task (``reward.tasks`` overrides
   applied here, once), the batched terms only for verified-correct samples under ``gate: verifier``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from polyrl.errors import UserError
from polyrl.rewards.builtin_terms import MODEL_TERMS
from polyrl.rewards.reward_config import RewardConfig
from polyrl.rewards.rules import RULES, Sample, rule_terms, weight_of
from polyrl.rewards.terms import REWARD_SOURCES, callable_source
from polyrl.tasks import Task
from polyrl.tasks.isolation import verify_many
from polyrl.tasks.verifiers import import_callable

if TYPE_CHECKING:
    import torch


class BatchedTerms(Protocol):
    """What scores the batched terms (a :class:`RewardScorer`, or one split across ranks)."""

    def score(self, trajs: list) -> None: ...


def _source(term, config: RewardConfig, device: torch.device | str | None):
    """The scoring function of a built-in term (by name) or of a ``reward.terms`` entry."""
    if isinstance(term, str):
        return REWARD_SOURCES[term](config, device)
    if term.fn is not None:
        return callable_source(import_callable(term.fn), term.label, config.term_timeout)
    return REWARD_SOURCES[term.name](config, device)


class RewardScorer:
    """The model and group terms of a run, built once at start-up (configuration errors surface here); model
    terms run on ``device`` (the run's placement's)."""

    def __init__(self, config: RewardConfig, task_names: list[str], device: torch.device | str):
        self.config = config
        unknown = sorted(set(config.tasks) - set(task_names))
        if unknown:
            raise UserError(f"reward.tasks names task(s) not in the mix: {', '.join(unknown)}")
        for spec in config.terms:
            outside = sorted(set(spec.tasks or ()) - set(task_names))
            if outside:
                raise UserError(f"reward term {spec.label!r} names task(s) not in the mix: {', '.join(outside)}")
        self.weights = {name: config.weights(name) for name in task_names}
        terms = {**{term: term for term in MODEL_TERMS}, **{spec.label: spec for spec in config.terms}}
        used = [term for term in terms if any(w[term] for w in self.weights.values())]
        self.sources = {term: _source(terms[term], config, device) for term in used}

    def __bool__(self) -> bool:
        return bool(self.sources)

    def score(self, trajs: list) -> None:
        """Every batched term's value in ``reward_terms`` (and its failures in ``reward_failures``) of the
        trajectories whose task weighs it; :func:`polyrl.rewards.stage.score` adds them to the reward."""
        for term, source in self.sources.items():
            chosen = [t for t in trajs if self.weights[t.task][term]]
            if not chosen:
                continue
            for t, (value, reason) in zip(chosen, source(chosen)):
                t.reward_terms[term] = value
                if reason is not None:
                    t.reward_failures[term] = reason


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
    scoring({t.task: tasks[t.task] for t in trajs}, config, max_new_tokens, batched)(trajs)


def scoring(tasks: Mapping[str, Task], config: RewardConfig, max_new_tokens: int, batched: BatchedTerms | None = None):
    """:func:`score` with everything but the trajectories fixed, each task's term weights resolved once (global
    weights with its ``reward.tasks`` overrides): the collector's ``score(trajs)``."""
    weights = {name: config.weights(name) for name in tasks}

    def score_batch(trajs: list) -> None:
        verify_trajectories(trajs, tasks)
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

    return score_batch
