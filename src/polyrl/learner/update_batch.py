"""Stage 3 of an RL step: advantages, and the batch the update trains on.

``prepare_update`` turns a step's scored trajectories into an :class:`UpdateBatch` — collated tokens,
advantages (a registered group estimator, task normalization, turn-level credit or the critic's GAE),
behaviour log-probs and the rows to train on — which :func:`polyrl.learner.update.policy_update` consumes.
The batch is built on the host; the update splits it there and moves each micro-batch to the training device
with one :meth:`UpdateBatch.to`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
from torch import Tensor

from polyrl.algos import (
    ADVANTAGE_ESTIMATORS,
    AdvantageInputs,
    EpisodeCredit,
    task_normalize,
    zero_variance_groups,
)
from polyrl.forward.batch import TokenBatch, collate
from polyrl.learner.settings import UpdateSettings
from polyrl.rollout import Trajectory


@dataclass
class UpdateBatch:
    """What the policy update trains on: one step's trajectories, collated, with their advantages.

    Rows are the step's trajectories in order; ``active`` are the rows the update runs forward/backward on
    (all of them unless zero-advantage rows are skipped)."""

    tokens: TokenBatch
    advantages: Tensor
    """``[N]`` per sequence, or ``[N, T]`` per token (GAE, turn-level credit)."""
    task_ids: Tensor
    """``[N]`` index into ``task_names``."""
    task_names: list[str]
    group_ids: Tensor
    truncated: Tensor
    """``[N]`` bool: the completion hit the token budget."""
    active: Tensor
    """Row indices to train on."""
    behaviour_logprobs: Tensor | None = None
    """``[N, T]`` log-probs under the sampling weights (asynchronous rollouts), aligned with the loss mask."""
    returns: Tensor | None = None
    """``[N, T]`` critic targets (PPO with GAE)."""
    critic_stats: dict[str, float] = field(default_factory=dict)
    old_logprobs: Tensor | None = None
    """``[N, T]`` the policy's log-probs before the update (taken by the learner when it steps more than once)."""
    ref_logprobs: Tensor | None = None
    """``[N, T]`` the KL reference's log-probs (taken by the learner with ``kl_coef > 0``)."""

    def __len__(self) -> int:
        return len(self.tokens)

    def rows(self, index: Tensor) -> UpdateBatch:
        """The rows ``index`` as a batch of their own (a micro-batch): the token columns that are padding in all
        of them trimmed, every per-token tensor cut to the same width, all of its rows active."""
        tokens = self.tokens.select(index)
        width = tokens.loss_mask.shape[1]

        def cut(t: Tensor | None) -> Tensor | None:
            return None if t is None else t[index] if t.dim() == 1 else t[index, :width]

        return UpdateBatch(
            tokens=tokens,
            advantages=cut(self.advantages),
            task_ids=self.task_ids[index],
            task_names=self.task_names,
            group_ids=self.group_ids[index],
            truncated=self.truncated[index],
            active=torch.arange(len(tokens)),
            behaviour_logprobs=cut(self.behaviour_logprobs),
            returns=cut(self.returns),
            critic_stats=self.critic_stats,
            old_logprobs=cut(self.old_logprobs),
            ref_logprobs=cut(self.ref_logprobs),
        )

    def to(self, device: torch.device | str) -> UpdateBatch:
        """This batch with every tensor on ``device``: the one move of a micro-batch to the training device."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        moved = {name: value.to(device) for name, value in values.items() if isinstance(value, Tensor)}
        return dataclasses.replace(self, tokens=self.tokens.to(device), **moved)


def collate_trajectories(trajs: list[Trajectory], pad_id: int) -> TokenBatch:
    """The padded token batch of ``trajs`` (with multi-turn policy masks when there are any; a single-turn
    completion's mask is all ones, whichever round of the step it came from)."""
    masked = any(t.policy_mask for t in trajs)
    masks = [t.policy_mask or [1] * len(t.response_ids) for t in trajs] if masked else None
    return collate([(t.prompt_ids, t.response_ids) for t in trajs], pad_id, masks)


def behaviour_logprobs(trajs: list[Trajectory], width: int) -> Tensor | None:
    """``[N, width]`` behaviour log-probs aligned with ``TokenBatch.loss_mask``, or None when the trajectories
    carry none (in-process rollouts share the learner's weights)."""
    if not trajs or any(t.behaviour_logprobs is None for t in trajs):
        return None
    out = torch.zeros(len(trajs), width)
    for i, t in enumerate(trajs):
        start = len(t.prompt_ids) - 1
        out[i, start : start + len(t.response_ids)] = torch.tensor(t.behaviour_logprobs)
    return out


def episode_credit(t: Trajectory) -> EpisodeCredit:
    """What a token-level estimator reads of ``t`` (a single-turn completion is one turn)."""
    return EpisodeCredit(
        t.group,
        t.reward,
        t.turn_rewards or [t.reward],
        t.turn_spans or [(0, len(t.response_ids))],
        len(t.prompt_ids) - 1,
    )


def compute_advantages(
    trajs: list[Trajectory], tokens: TokenBatch, task_ids: Tensor, cfg: UpdateSettings, critic=None
):
    """``(advantages, returns, critic_stats)`` for one step.

    The registered estimator ``rl.advantage`` (or, with ``advantage_level`` other than ``episode``, that one)
    reads what it declared: group rewards give one value per sequence, which ``task_normalize`` then
    standardizes within each task (AgentRL), and members of zero-variance groups get exactly 0 whatever comes
    after the estimator, so that they are recognisably signal-free (and skipped); ``turn`` credits each turn
    of an episode with its group-normalized reward-to-go; ``gae`` asks the critic."""
    rewards = torch.tensor([t.reward for t in trajs], dtype=torch.float32)
    group_ids = torch.tensor([t.group for t in trajs])
    zero_var = zero_variance_groups(rewards, group_ids)
    estimator = ADVANTAGE_ESTIMATORS.lookup(cfg.advantage if cfg.advantage_level == "episode" else cfg.advantage_level)
    credit = [episode_credit(t) for t in trajs] if estimator.reads == "turns" else ()
    inputs = AdvantageInputs(rewards, group_ids, credit, tokens.loss_mask.shape[1], critic, tokens)
    out = estimator(inputs)
    if estimator.reads != "rewards":
        return out.advantages, out.returns, out.stats
    advantages = task_normalize(out.advantages, task_ids) if cfg.task_normalize else out.advantages
    return torch.where(zero_var, torch.zeros_like(advantages), advantages), None, {}


def prepare_update(
    trajs: list[Trajectory], task_names: list[str], pad_id: int, cfg: UpdateSettings, critic=None
) -> UpdateBatch:
    """Collate, compute advantages, and choose the rows to train on.

    Rows with zero advantage contribute nothing to the surrogate (their per-token loss is 0 × ratio); with
    ``skip_zero_advantage`` and no KL or entropy term that would still need them, they are left out of the
    forward/backward (same gradient: they still count in the normalizer)."""
    index = {name: i for i, name in enumerate(task_names)}
    tokens = collate_trajectories(trajs, pad_id)
    task_ids = torch.tensor([index[t.task] for t in trajs])
    advantages, returns, critic_stats = compute_advantages(trajs, tokens, task_ids, cfg, critic)
    active = torch.arange(len(trajs))
    if cfg.skip_zero_advantage and advantages.dim() == 1 and cfg.kl_coef == 0 and cfg.entropy_coef == 0:
        active = torch.nonzero(advantages != 0).flatten()
    return UpdateBatch(
        tokens=tokens,
        advantages=advantages,
        task_ids=task_ids,
        task_names=list(task_names),
        group_ids=torch.tensor([t.group for t in trajs]),
        truncated=torch.tensor([t.truncated for t in trajs]),
        active=active,
        behaviour_logprobs=behaviour_logprobs(trajs, tokens.loss_mask.shape[1]),
        returns=returns,
        critic_stats=critic_stats,
    )
