"""Advantage estimators: one scalar advantage per sequence from outcome rewards, plus token-level GAE.

A batch holds ``N = P * G`` completions: ``G`` samples for each of ``P`` prompts. ``group_ids[i]`` names
the prompt completion ``i`` answers. Groups may differ in size (dynamic sampling drops groups, failed
rollouts drop samples) and need not be contiguous, so every group statistic here is computed with
scatter reductions over ``group_ids`` rather than by reshaping to ``[P, G]``.

Estimators are registered by name in one registry, :data:`ADVANTAGE_ESTIMATORS`, so a YAML config can pick
one (``advantage: grpo``); each declares what it reads::

    @register_advantage("my_estimator")                    # reads="rewards": the group's outcome rewards
    def my_estimator(rewards, group_ids, eps=1e-6): ...    # -> Tensor[N]

    @register_advantage("my_credit", reads="turns")        # each episode's turn rewards (rl.advantage_level)
    def my_credit(samples, width, eps=1e-6): ...           # -> Tensor[N, width]

    @register_advantage("my_critic", reads="critic")       # the learned value function (the run trains one)
    def my_critic(critic, tokens, rewards): ...            # -> (advantages [N, T], returns [N, T], stats)

and every one is called the same way: ``ADVANTAGE_ESTIMATORS.lookup(name)(AdvantageInputs(...))`` returns
:class:`Advantages`. A rewards estimator's ``Tensor[N]`` is broadcast over the response tokens, after an
optional :func:`task_normalize`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from polyrl.errors import UserError
from polyrl.registry import Registry

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AdvantageEstimator",
    "AdvantageInputs",
    "Advantages",
    "EpisodeCredit",
    "advantage_estimator",
    "advantage_names",
    "dr_grpo",
    "gae",
    "get_advantage_estimator",
    "grpo",
    "register_advantage",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "rloo",
    "task_normalize",
    "turn_advantages",
    "uses_critic",
    "zero_variance_group_fraction",
    "zero_variance_groups",
    "zeroes_groups_of_one",
]

Ids = Tensor | Sequence[Hashable]


Reads = Literal["rewards", "turns", "critic"]
_READS = {"rewards": "group rewards", "turns": "episode turns", "critic": "the critic"}


@dataclass(frozen=True)
class EpisodeCredit:
    """What a ``turns`` estimator reads of one sample (an episode, or a one-turn completion)."""

    group: Hashable
    reward: float
    """The sample's reward (its weighted environment return plus any other terms)."""
    turn_rewards: Sequence[float]
    """The environment's reward per policy turn (``[reward]`` for a single-turn completion)."""
    turn_spans: Sequence[tuple[int, int]]
    """``[start, end)`` of each policy turn within the response."""
    offset: int
    """Column of the first response token's loss position (``len(prompt_ids) - 1``)."""


@dataclass(frozen=True)
class AdvantageInputs:
    """One step's samples as an estimator may read them; each reads the part its ``reads`` names."""

    rewards: Tensor
    """``[N]`` outcome rewards."""
    group_ids: Ids
    """The prompt (group) each sample answers."""
    credit: Sequence[EpisodeCredit] = ()
    """Each sample's turns (``turns`` estimators)."""
    width: int = 0
    """Columns of the token batch (``turns`` estimators)."""
    critic: Any = None
    """The value model (``critic`` estimators)."""
    tokens: Any = None
    """The collated token batch the critic reads (``critic`` estimators)."""


@dataclass(frozen=True)
class Advantages:
    """What an estimator gives: ``[N]`` (rewards) or ``[N, T]`` advantages; a critic's targets and statistics."""

    advantages: Tensor
    returns: Tensor | None = None
    stats: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class AdvantageEstimator:
    """A registered estimator: its function and what it reads, called the same way whatever it reads."""

    fn: Callable[..., Any]
    reads: Reads = "rewards"

    def __call__(self, inputs: AdvantageInputs) -> Advantages:
        if self.reads == "rewards":
            return Advantages(self.fn(inputs.rewards, inputs.group_ids))
        if self.reads == "turns":
            return Advantages(self.fn(inputs.credit, inputs.width))
        advantages, returns, stats = self.fn(inputs.critic, inputs.tokens, inputs.rewards)
        return Advantages(advantages, returns, stats)


def _estimator_entry(name: str, fn: Any, **metadata: Any) -> AdvantageEstimator:
    if not callable(fn):
        raise TypeError(f"advantage estimator {name!r} must be a function, got {fn!r}")
    estimator = AdvantageEstimator(fn, **metadata)
    if estimator.reads not in _READS:
        raise ValueError(f"advantage estimator {name!r} reads one of {', '.join(_READS)}, not {estimator.reads!r}")
    return estimator


ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry(
    "advantage estimator", "polyrl.advantages", builtins=("polyrl.algos.advantages",), entry=_estimator_entry
)
"""Every advantage estimator: ``rl.advantage`` names one that reads rewards or the critic (the run then trains
one), ``rl.advantage_level`` (other than ``episode``) one that reads turns."""


def register_advantage(name: str, *, reads: Reads = "rewards") -> Callable[[Callable], Callable]:
    """Decorator: make an estimator available by ``name``; ``reads`` says what it is called with (see the
    module docstring)."""
    return ADVANTAGE_ESTIMATORS.register(name, reads=reads)


def advantage_names(*reads: Reads) -> list[str]:
    """The registered estimators that read one of ``reads``, sorted."""
    return [n for n in ADVANTAGE_ESTIMATORS.names() if ADVANTAGE_ESTIMATORS[n].reads in reads]


def advantage_estimator(name: str, *reads: Reads) -> AdvantageEstimator:
    """The estimator registered as ``name``, which must read one of ``reads``; a one-line UserError otherwise."""
    estimator = ADVANTAGE_ESTIMATORS.lookup(name)
    if estimator.reads not in reads:
        wanted = " or ".join(_READS[r] for r in reads)
        raise UserError(
            f"advantage estimator {name!r} reads {_READS[estimator.reads]}; one that reads {wanted} is needed here "
            f"({', '.join(advantage_names(*reads))})"
        )
    return estimator


def get_advantage_estimator(name: str) -> Callable[..., Any]:
    """The function registered as ``name``; a UserError listing the known names otherwise."""
    return ADVANTAGE_ESTIMATORS.lookup(name).fn


def uses_critic(name: str) -> bool:
    """Whether the advantage estimator ``name`` asks a critic (so the run trains one)."""
    return isinstance(name, str) and name in ADVANTAGE_ESTIMATORS and ADVANTAGE_ESTIMATORS[name].reads == "critic"


def zeroes_groups_of_one(name: str) -> bool:
    """Whether the estimator ``name`` gives a group of one completion advantage 0 whatever its reward: its
    baseline is that group's own (grpo, dr_grpo, rloo, reinforce_pp_baseline), so ``rl.group_size=1`` trains
    nothing (issue #43). Not reinforce_pp (the batch's baseline) nor a critic. Found by asking the estimator, so a
    registered one of a plugin is judged the same way: two groups of one, rewarded 1 and 0."""
    estimator = ADVANTAGE_ESTIMATORS[name]
    if estimator.reads != "rewards":
        return False
    try:
        advantages = estimator.fn(torch.tensor([1.0, 0.0]), torch.tensor([0, 1]))
    except Exception:  # a plugin that cannot take this batch: left to the run (nothing to refuse here)
        return False
    return bool(torch.all(torch.as_tensor(advantages) == 0))


# ---------------------------------------------------------------------------------------------------------
# Group statistics over arbitrary, possibly ragged ids


def _dense_ids(ids: Ids, n: int, device: torch.device) -> tuple[Tensor, int]:
    """Map ids (a tensor, or any hashables such as prompt uids or task names) to 0..K-1."""
    if isinstance(ids, Tensor):
        if ids.shape != (n,):
            raise ValueError(f"ids must have shape ({n},), got {tuple(ids.shape)}")
        unique, index = torch.unique(ids.to(device), return_inverse=True)
        return index, unique.numel()
    if len(ids) != n:
        raise ValueError(f"ids must have length {n}, got {len(ids)}")
    position: dict[Hashable, int] = {}
    index_list = [position.setdefault(i, len(position)) for i in ids]
    return torch.tensor(index_list, dtype=torch.long, device=device), len(position)


def _as_float(values: Tensor) -> Tensor:
    # Integer rewards (0/1 verdicts) are common; statistics need a floating dtype.
    return values if values.is_floating_point() else values.float()


def _group_sum(values: Tensor, index: Tensor, num_groups: int) -> Tensor:
    return values.new_zeros(num_groups).index_add_(0, index, values)


def _group_mean_std(values: Tensor, index: Tensor, num_groups: int) -> tuple[Tensor, Tensor, Tensor]:
    """Per-element group mean, population std (``unbiased=False``) and group size."""
    count = _group_sum(torch.ones_like(values), index, num_groups)
    mean = _group_sum(values, index, num_groups) / count
    centered = values - mean[index]
    var = _group_sum(centered.square(), index, num_groups) / count
    return mean[index], var.sqrt()[index], count[index]


def _constant_within(values: Tensor, index: Tensor, num_groups: int) -> Tensor:
    """True where every member of the element's group has exactly the same value.

    Compared exactly (max == min) rather than via std < eps: the float32 mean of seven 0.3s is
    0.3 - 3e-8, and dividing that rounding residue by ``std + eps`` would give non-zero advantages.
    """
    high = values.new_zeros(num_groups).scatter_reduce(0, index, values, "amax", include_self=False)
    low = values.new_zeros(num_groups).scatter_reduce(0, index, values, "amin", include_self=False)
    return (high == low)[index]


def _center_within(values: Tensor, ids: Ids) -> tuple[Tensor, Tensor, Tensor]:
    """Per element: ``x - mean_k`` within its id ``k`` (exactly 0 where the group is constant), the
    group's population std and the group's size."""
    values = _as_float(values)
    index, k = _dense_ids(ids, values.shape[0], values.device)
    mean, std, size = _group_mean_std(values, index, k)
    centered = torch.where(_constant_within(values, index, k), torch.zeros_like(values), values - mean)
    return centered, std, size


def _standardize_within(values: Tensor, ids: Ids, eps: float) -> Tensor:
    """``(x - mean_k) / (std_k + eps)`` within each id ``k``; exactly 0 where the group is constant."""
    centered, std, _ = _center_within(values, ids)
    return centered / (std + eps)


def zero_variance_groups(rewards: Tensor, group_ids: Ids) -> Tensor:
    """``BoolTensor[N]``: True for completions whose group has identical rewards (all solved or all failed).

    Such groups carry no GRPO-style learning signal; DAPO (Yu et al. 2025, §3.2 Dynamic Sampling) filters
    them out and oversamples until the batch is full.
    """
    rewards = _as_float(rewards)
    index, k = _dense_ids(group_ids, rewards.shape[0], rewards.device)
    return _constant_within(rewards, index, k)


def zero_variance_group_fraction(rewards: Tensor, group_ids: Ids) -> float:
    """Fraction of *groups* (not completions) with identical rewards, for logging."""
    rewards = _as_float(rewards)
    index, k = _dense_ids(group_ids, rewards.shape[0], rewards.device)
    if k == 0:
        return 0.0
    flat = _constant_within(rewards, index, k).float()
    # Every member of a group shares the flag, so the per-group max recovers one flag per group.
    per_group = flat.new_zeros(k).scatter_reduce(0, index, flat, "amax", include_self=False)
    return per_group.mean().item()


# ---------------------------------------------------------------------------------------------------------
# Outcome-reward estimators (one scalar per sequence)


@register_advantage("grpo")
def grpo(rewards: Tensor, group_ids: Ids, eps: float = 1e-6) -> Tensor:
    """GRPO outcome supervision: ``A_i = (r_i - mean(r_group)) / (std(r_group) + eps)``.

    Shao et al. 2024, "DeepSeekMath", §4.1.2 (outcome supervision). The paper does not say which std;
    we use the population std (``unbiased=False``) so that a group's advantages have exactly unit
    variance and a two-sample group [1, 0] gives [1, -1] rather than [0.71, -0.71]. A group whose
    rewards are all equal gets advantage exactly 0.
    """
    return _standardize_within(rewards, group_ids, eps)


@register_advantage("dr_grpo")
def dr_grpo(rewards: Tensor, group_ids: Ids, eps: float = 1e-6) -> Tensor:
    """Dr. GRPO: ``A_i = r_i - mean(r_group)``, no division by the group std.

    Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective", §3.1: dividing by
    the std up-weights questions that are too easy or too hard (a question-level difficulty bias).
    ``eps`` is unused and accepted for a uniform estimator signature.
    """
    return _center_within(rewards, group_ids)[0]


@register_advantage("rloo")
def rloo(rewards: Tensor, group_ids: Ids, eps: float = 1e-6) -> Tensor:
    """RLOO: ``A_i = r_i - mean_{j != i} r_j``, the leave-one-out baseline.

    Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization for Learning from
    Human Feedback in LLMs", §3.2 (after Kool et al. 2019). Algebraically ``A_i = G/(G-1) * (r_i -
    mean(r_group))``, which is how it is computed here. A singleton group has no other sample to form
    a baseline and gets 0. ``eps`` is unused.
    """
    centered, _, size = _center_within(rewards, group_ids)
    scale = torch.where(size > 1, size / (size - 1).clamp(min=1), torch.zeros_like(size))
    return scale * centered


@register_advantage("reinforce_pp")
def reinforce_pp(rewards: Tensor, group_ids: Ids, eps: float = 1e-6) -> Tensor:
    """REINFORCE++: ``A_i = (r_i - mean(r_batch)) / (std(r_batch) + eps)``, ignoring groups.

    Hu 2025, "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models", global
    advantage normalization (§3, outcome reward without the per-token KL term, which polyrl adds as a
    separate loss). Normalizing over the whole batch rather than per prompt avoids overfitting to
    easy prompts. ``group_ids`` is accepted for a uniform signature and unused.
    """
    return _standardize_within(rewards, torch.zeros_like(rewards, dtype=torch.long), eps)


@register_advantage("reinforce_pp_baseline")
def reinforce_pp_baseline(rewards: Tensor, group_ids: Ids, eps: float = 1e-6) -> Tensor:
    """REINFORCE++-baseline: subtract the group mean, then divide by the batch std.

    Hu 2025 (REINFORCE++ paper, the "baseline" variant for multi-sample settings): the group mean
    removes prompt difficulty, the global normalization keeps the scale stable without GRPO's
    per-group division. The batch mean of group-centered rewards is 0 by construction, so only the
    std is divided out; that keeps zero-variance groups at exactly 0 (no gradient) instead of a
    rounding residue.
    """
    centered = dr_grpo(rewards, group_ids)
    return centered / (centered.std(unbiased=False) + eps)


# ---------------------------------------------------------------------------------------------------------
# Cross-task normalization


def task_normalize(advantages: Tensor, task_ids: Ids, eps: float = 1e-6) -> Tensor:
    """Standardize advantages within each task: ``(A_i - mean_task) / (std_task + eps)``.

    AgentRL (Zhang et al. 2025, "AgentRL: Scaling Agentic Reinforcement Learning with a Multi-Turn,
    Multi-Task Framework"), task advantage normalization: without it, tasks with larger or denser
    reward scales dominate the multi-task gradient. Applied after any estimator. A task with a single
    completion or with all-equal advantages (e.g. every group zero-variance) gets 0, not NaN.
    ``task_ids`` may be a LongTensor or a sequence of task names.
    """
    return _standardize_within(advantages, task_ids, eps)


# ---------------------------------------------------------------------------------------------------------
# Token-level GAE for PPO with a critic


def gae(rewards_per_token: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Generalized advantage estimation over response tokens; returns ``(advantages, returns)``, both [N, T].

    Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized Advantage Estimation",
    eq. 16: ``A_t = sum_l (gamma*lam)^l delta_{t+l}`` with ``delta_t = r_t + gamma V_{t+1} - V_t`` (eq. 10
    of the same paper), computed by the recursion ``A_t = delta_t + gamma*lam*A_{t+1}``. ``returns =
    A + V`` are the critic's targets.

    Only positions with ``mask == 1`` are steps of the policy. Masked positions are skipped, not
    treated as steps with zero reward: trailing padding ends the episode (``V = 0`` after the last
    token), and masked tokens in the middle (environment observations in a multi-turn trajectory) are
    jumped over so the next policy token's value bootstraps the previous one without extra discount.
    Rewards at masked positions are ignored; advantages and returns there are 0.
    """
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise UserError(f"gae needs 0 <= gamma <= 1 and 0 <= lam <= 1, got gamma={gamma}, lam={lam}")
    rewards_per_token = _as_float(rewards_per_token)
    values = values.detach().to(rewards_per_token.dtype)
    valid = mask.bool()
    n, t_len = rewards_per_token.shape
    advantages = torch.zeros_like(rewards_per_token)
    next_value = rewards_per_token.new_zeros(n)
    next_advantage = rewards_per_token.new_zeros(n)
    for t in reversed(range(t_len)):
        delta = rewards_per_token[:, t] + gamma * next_value - values[:, t]
        advantage_t = delta + gamma * lam * next_advantage
        step = valid[:, t]
        # Masked positions carry the running (value, advantage) through unchanged.
        next_advantage = torch.where(step, advantage_t, next_advantage)
        next_value = torch.where(step, values[:, t], next_value)
        advantages[:, t] = torch.where(step, advantage_t, torch.zeros_like(advantage_t))
    returns = torch.where(valid, advantages + values, torch.zeros_like(advantages))
    return advantages, returns


# ---------------------------------------------------------------------------------------------------------
# Token-level estimators of episodes (``rl.advantage_level``): one advantage per response token


@register_advantage("turn", reads="turns")
def turn_advantages(samples: Sequence[EpisodeCredit], width: int, eps: float = 1e-6) -> Tensor:
    """Per-token advantages ``[N, width]`` aligned with the loss mask: the tokens of turn ``k`` get the
    episode's return-to-go from turn ``k``, minus the group's mean return, over the group's std (GRPO's
    normalization applied to reward-to-go; REINFORCE with a group baseline, Williams 1992). A group whose
    returns are all equal is not scaled (dividing by a zero std would blow up later turns' credit)."""
    out = torch.zeros(len(samples), width)
    groups: dict[Hashable, list[float]] = {}
    for s in samples:
        groups.setdefault(s.group, []).append(s.reward)
    for i, s in enumerate(samples):
        returns = torch.tensor(groups[s.group])
        mean, std = returns.mean(), returns.std(unbiased=False)
        std = std if std > eps else torch.tensor(1.0)
        rewards = list(s.turn_rewards)
        scale = s.reward / sum(rewards) if sum(rewards) else 1.0  # reward-config weight on the return
        for k, (a, b) in enumerate(s.turn_spans):
            to_go = scale * sum(rewards[k:])
            out[i, s.offset + a : s.offset + b] = (to_go - mean) / std
    return out


# ---------------------------------------------------------------------------------------------------------
# Estimators that ask a learned value function (``rl.advantage: gae``)


@register_advantage("gae", reads="critic")
def gae_from_critic(critic, tokens, rewards: Tensor) -> tuple[Tensor, Tensor, dict[str, float]]:
    """:func:`gae` over the critic's values of ``tokens`` (PPO with a value model; Schulman et al. 2016,
    eq. 16), the outcome reward on each sequence's last policy token."""
    return critic.advantages(tokens, rewards)
