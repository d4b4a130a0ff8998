"""The batched reward terms of a run — model, group and user terms — built once at start-up.

:class:`RewardScorer` resolves every term that has a weight for some task of the mix (a registered name of
:data:`~polyrl.rewards.terms.REWARD_SOURCES` or a ``reward.terms`` function), so configuration errors
surface before training, and scores a batch of trajectories term by term (a reward model in forward passes,
a judge in concurrent calls, majority vote per group). It writes values and failures; the weighted sum is
:func:`polyrl.rewards.stage.score`'s. A swapped pairwise judge also marks samples whose two verdicts
disagree (``Trajectory.judge_position_inconsistent``, logged per step); those keep their judge reward.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from polyrl.errors import UserError
from polyrl.rewards.builtin_terms import majority_vote_scores
from polyrl.rewards.compose import RewardConfig
from polyrl.rewards.terms import (
    MODEL_TERMS,
    REWARD_SOURCES,
    callable_source,
    register_reward_source,
    register_reward_term,
)
from polyrl.tasks.verifiers import import_callable

if TYPE_CHECKING:
    import torch

__all__ = ["RewardScorer", "callable_source", "majority_vote_scores", "register_reward_source", "register_reward_term"]


def _source(term, config: RewardConfig, device: torch.device | str | None):
    """The scoring function of a built-in term (by name) or of a ``reward.terms`` entry."""
    if isinstance(term, str):
        return REWARD_SOURCES[term](config, device)
    if term.fn is not None:
        return callable_source(import_callable(term.fn), term.label, config.term_timeout)
    return REWARD_SOURCES[term.name](config, device)


class RewardScorer:
    """The model and group terms of a run, built once at start-up (configuration errors surface here); model
    terms run on ``device`` (None: :data:`polyrl.device.HOST`)."""

    def __init__(self, config: RewardConfig, task_names: list[str], device: torch.device | str | None = None):
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
