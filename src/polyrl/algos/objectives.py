"""Policy objectives: token log-probs and advantages in, one scalar loss and its statistics out.

Every objective is a registered function ``(ObjectiveInputs, ObjectiveSettings) -> (loss, stats)``::

    @register_objective("my_objective", settings=MySettings)   # settings: optional, a pydantic class
    def my_objective(inputs: ObjectiveInputs, settings: ObjectiveSettings) -> tuple[Tensor, dict[str, RowStat]]: ...

``settings.own`` is the objective's own settings (a ``MySettings`` from ``rl.objective_settings``).

Shapes: ``N`` sequences, response tokens padded to ``T``; ``mask[N, T]`` is 1 on tokens the policy
generated (0 on padding and on environment/tool tokens in multi-turn trajectories).

The parts every objective shares live here once, in the order they apply to a token:

1. the loss mask: ``mask``, minus truncated completions when ``mask_truncated`` (:func:`loss_mask`),
   and the log-ratio to the old policy (:func:`objective_terms`);
2. the objective's own per-token loss (PPO-clip, GSPO, CISPO);
3. truncated importance sampling towards the behaviour policy (``tis_cap``, :func:`tis_weights`);
4. off-policy sequence masking (``offpolicy_kl_threshold``, :func:`offpolicy_mask`);
5. the registered aggregation, normalized by this batch or by the minibatch totals in ``inputs``
   (3–5: :func:`weight_mask_aggregate`).

``stats`` maps names to :class:`RowStat` (or plain 0-d tensors): each statistic is measured once, on the
whole batch, and kept with the per-row tensors it was reduced from, so that the learner reads the same
statistic over any subset of the rows (each task's) without running the objective again. They are
detached, averaged over the tokens in the loss: ``clip_fraction``, ``clip_fraction_low``, ``clip_fraction_high``, ``approx_kl`` (k3
estimate of KL(old || current), Schulman 2020), ``ratio_mean``, ``ratio_max``, ``ratio_min`` (the ratio the
objective clips); with TIS ``tis_weight_mean`` and ``tis_truncated_fraction``; with the masks
``masked_truncated_fraction`` and ``masked_offpolicy_fraction`` (fractions of the sequences that have
policy tokens).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor

from polyrl.algos.losses import Count, aggregate, get_aggregation, loss_totals
from polyrl.algos.objective_stats import RowStat, ratio_stats, sequence_fraction_stat, token_mean_stat
from polyrl.errors import UserError
from polyrl.registry import Registry

__all__ = [
    "OBJECTIVES",
    "Objective",
    "ObjectiveInputs",
    "ObjectiveSettings",
    "RowStat",
    "cispo",
    "get_objective",
    "gspo",
    "loss_mask",
    "objective_settings_class",
    "objective_terms",
    "objective_totals",
    "offpolicy_mask",
    "policy_loss",
    "ppo_clip",
    "register_objective",
    "tis_weights",
    "weight_mask_aggregate",
]


@dataclass(frozen=True)
class ObjectiveInputs:
    """The tensors of one (micro-)batch an objective reads."""

    logprobs: Tensor
    """``[N, T]`` log-probs of the current policy (with grad)."""
    old_logprobs: Tensor
    """``[N, T]`` log-probs at the start of the update (detached here in any case)."""
    advantages: Tensor
    """``[N]`` (broadcast over tokens) or ``[N, T]``."""
    mask: Tensor
    """``[N, T]``, 1 on policy tokens."""
    behaviour_logprobs: Tensor | None = None
    """``[N, T]`` log-probs of the sampler (asynchronous rollouts, another inference engine), else None."""
    truncated: Tensor | None = None
    """``[N]`` bool: the completion hit the token budget without EOS."""
    total_tokens: Count | None = None
    """Loss tokens in the whole minibatch (gradient accumulation); None: this batch's own count."""
    total_sequences: Count | None = None
    """Sequences with loss tokens in the whole minibatch; None: this batch's own count."""


@dataclass(frozen=True)
class ObjectiveSettings:
    """What every objective reads, and the chosen objective's own settings (``own``). Every shared field is
    required: the defaults live in the config (``RLConfig``) and nowhere else."""

    clip_ratio_low: float
    """PPO: the ratio is clipped below at ``1 - clip_ratio_low``."""
    clip_ratio_high: float
    """PPO: the ratio is clipped above at ``1 + clip_ratio_high`` (DAPO clip-higher)."""
    aggregation: str
    """A registered aggregation name (token_mean, seq_mean_token_mean, seq_mean_token_sum_norm)."""
    max_tokens: int | None
    """Generation budget in tokens (for seq_mean_token_sum_norm)."""
    tis_cap: float | None
    """Truncated importance sampling cap on ``exp(old - behaviour)``; None disables it."""
    mask_truncated: bool
    """Drop truncated completions from the loss and its normalizer (DAPO overlong filtering)."""
    offpolicy_kl_threshold: float | None
    """Mask negative-advantage sequences whose KL(behaviour || current) exceeds this; None disables it."""
    own: Any = None
    """The objective's own settings: an instance of the settings class it was registered with
    (``rl.objective_settings`` in the config, validated against that class); None for an objective without."""


class GSPOSettings(BaseModel):
    """gspo's own settings (``rl.objective_settings`` with ``rl.objective: gspo``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clip_ratio_low: float = Field(3e-4, ge=0, lt=1, description="Sequence-ratio clip below 1 (GSPO paper: 3e-4).")
    clip_ratio_high: float = Field(4e-4, ge=0, description="Sequence-ratio clip above 1 (GSPO paper: 4e-4).")


class CISPOSettings(BaseModel):
    """cispo's own settings (``rl.objective_settings`` with ``rl.objective: cispo``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clip_ratio_high: float = Field(
        4.0, ge=0, description="Importance weights are truncated at 1 + this (TRL's epsilon_high 5.0)."
    )


class Objective(Protocol):
    def __call__(
        self, inputs: ObjectiveInputs, settings: ObjectiveSettings
    ) -> tuple[Tensor, dict[str, RowStat | Tensor]]: ...


def _objective_entry(name: str, objective: Objective, settings: type[BaseModel] | None = None) -> Objective:
    if settings is not None:
        objective.settings_class = settings
    return objective


OBJECTIVES = Registry(
    "policy objective", "polyrl.objectives", builtins=("polyrl.algos.objectives",), entry=_objective_entry
)


def register_objective(name: str, *, settings: type[BaseModel] | None = None) -> Callable[[Objective], Objective]:
    """Decorator: make a policy objective available as ``get_objective(name)``. ``settings`` is the pydantic
    class of its own settings: ``rl.objective_settings`` is validated against it, and the objective reads
    the instance as ``settings.own``."""
    return OBJECTIVES.register(name, settings=settings)


def objective_settings_class(name: str) -> type[BaseModel] | None:
    """The settings class objective ``name`` was registered with (None: it has no settings of its own)."""
    return getattr(get_objective(name), "settings_class", None)


def get_objective(name: str) -> Objective:
    """The objective registered as ``name``; a UserError listing the known names otherwise."""
    return OBJECTIVES.lookup(name)


# ---------------------------------------------------------------------------------------------------------
# Parts every objective shares


def check_settings(settings: ObjectiveSettings) -> None:
    """UserError for shared settings no objective can run with (the config checks them first; this is the
    guard). An objective's own settings were validated by their pydantic class."""
    if not 0.0 <= settings.clip_ratio_low < 1.0:
        raise UserError(f"clip_ratio_low must be in [0, 1), got {settings.clip_ratio_low}")
    if not settings.clip_ratio_high >= 0.0:
        raise UserError(f"clip_ratio_high must be >= 0, got {settings.clip_ratio_high}")
    if settings.tis_cap is not None and not settings.tis_cap > 0.0:
        raise UserError(
            f"tis_cap must be > 0 (or null to disable truncated importance sampling), got {settings.tis_cap}"
        )
    if settings.offpolicy_kl_threshold is not None and not settings.offpolicy_kl_threshold >= 0.0:
        raise UserError(f"offpolicy_kl_threshold must be >= 0 (or null), got {settings.offpolicy_kl_threshold}")
    get_aggregation(settings.aggregation)


def loss_mask(mask: Tensor, truncated: Tensor | None, mask_truncated: bool) -> Tensor:
    """``mask`` as floats, with the rows of truncated completions zeroed when ``mask_truncated``.

    DAPO (Yu et al. 2025, §3.4 "Overlong Filtering"): a completion cut off by the token budget gets a
    reward for an answer it never finished; masking its loss removes that noise. As in TRL's
    ``mask_truncated_completions``, the masked tokens leave the normalizer too (the completion counts as
    filtered out of the batch).
    """
    mask = mask.float() if not mask.is_floating_point() else mask
    if not mask_truncated:
        return mask
    if truncated is None:
        raise ValueError("mask_truncated is set but the batch carries no truncated flags")
    return mask * (~truncated.bool()).to(mask.dtype).unsqueeze(-1)


def objective_totals(mask: Tensor, truncated: Tensor | None, settings: ObjectiveSettings) -> tuple[Tensor, Tensor]:
    """``(total_tokens, total_sequences)`` of one micro-batch's loss mask; sum them over the minibatch.

    Known before the forward pass: the off-policy mask, which needs the current log-probs, does not
    change the normalizer (DeepSeek-V3.2 eq. 9 keeps ``1/|o_i|`` and ``1/G``).
    """
    return loss_totals(loss_mask(mask, truncated, settings.mask_truncated))


def tis_weights(old_logprobs: Tensor, behaviour_logprobs: Tensor, tis_cap: float) -> tuple[Tensor, Tensor]:
    """Detached per-token weights ``min(exp(old - behaviour), tis_cap)`` and where the cap bit (bool).

    Truncated importance sampling (Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You
    Off-Policy RL Training"): rollouts sampled by a behaviour policy that differs from the old policy
    (asynchronous rollouts, another inference engine) are reweighted towards the old policy; the cap
    bounds the variance.
    """
    raw = torch.exp(old_logprobs.detach() - behaviour_logprobs.detach())
    return raw.clamp(max=tis_cap), raw > tis_cap


def offpolicy_mask(
    logprobs: Tensor, reference_logprobs: Tensor, advantages: Tensor, mask: Tensor, threshold: float
) -> Tensor:
    """``[N, T]`` float: 0 on tokens with a negative advantage in a sequence that drifted too far, else 1.

    DeepSeek-AI 2025, "DeepSeek-V3.2", "Off-Policy Sequence Masking", eq. 9 (TRL's
    ``off_policy_mask_threshold``): ``M_{i,t} = 0`` if ``A_{i,t} < 0`` and
    ``1/|o_i| sum_t (log pi_ref(o_t) - log pi_theta(o_t)) > delta``, where ``pi_ref`` is the policy
    that sampled the rollout (``behaviour_logprobs``, else ``old_logprobs``) and the mean runs over the
    sequence's loss tokens: a k1 estimate of KL(pi_ref || pi_theta) on the policy's own samples.
    Negative samples far off-policy are the ones that destabilize training; positive ones are kept.
    With per-sequence advantages a sequence is masked whole.
    """
    with torch.no_grad():
        sequence_kl = ((reference_logprobs - logprobs) * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        drifted = (sequence_kl > threshold).unsqueeze(-1)
        return (~(drifted & (advantages < 0))).to(mask.dtype)


def _per_token(advantages: Tensor, like: Tensor) -> Tensor:
    advantages = advantages.to(like.dtype)
    return advantages.unsqueeze(-1).expand_as(like) if advantages.dim() == 1 else advantages


def objective_terms(inputs: ObjectiveInputs, settings: ObjectiveSettings) -> tuple[Tensor, Tensor, Tensor]:
    """Step 1: ``(loss mask, per-token advantages, log ratio to the old policy)``, all ``[N, T]``.

    Checks ``settings`` too. An objective starts here, computes its token losses, and ends with
    :func:`weight_mask_aggregate`; a plugin objective that does the same honours every option.
    """
    check_settings(settings)
    mask = loss_mask(inputs.mask, inputs.truncated, settings.mask_truncated).to(inputs.logprobs.dtype)
    # Detached so that an on-policy caller passing ``old_logprobs = logprobs`` still gets a gradient
    # (otherwise the ratio would be the constant 1 and the gradient silently 0).
    log_ratio = inputs.logprobs - inputs.old_logprobs.detach()
    return mask, _per_token(inputs.advantages, inputs.logprobs), log_ratio


def weight_mask_aggregate(
    token_losses: Tensor, mask: Tensor, advantages: Tensor, inputs: ObjectiveInputs, settings: ObjectiveSettings
) -> tuple[Tensor, dict[str, RowStat]]:
    """Steps 3–5: TIS weights, off-policy mask, aggregation; returns the loss and these steps' statistics.

    ``mask`` and ``advantages`` are the ones :func:`objective_terms` returned.
    """
    stats: dict[str, RowStat] = {}
    if settings.tis_cap is not None:
        if inputs.behaviour_logprobs is None:
            raise ValueError("tis_cap is set but behaviour_logprobs were not passed")
        weight, capped = tis_weights(inputs.old_logprobs, inputs.behaviour_logprobs, settings.tis_cap)
        token_losses = token_losses * weight
        stats["tis_weight_mean"] = token_mean_stat(weight, mask)
        stats["tis_truncated_fraction"] = token_mean_stat(capped, mask)
    if settings.mask_truncated:
        stats["masked_truncated_fraction"] = sequence_fraction_stat(inputs.truncated.bool(), inputs.mask)
    if settings.offpolicy_kl_threshold is not None:
        reference = inputs.behaviour_logprobs if inputs.behaviour_logprobs is not None else inputs.old_logprobs
        keep = offpolicy_mask(inputs.logprobs, reference.detach(), advantages, mask, settings.offpolicy_kl_threshold)
        token_losses = token_losses * keep
        dropped = ((1.0 - keep) * mask).sum(-1) > 0
        stats["masked_offpolicy_fraction"] = sequence_fraction_stat(dropped, mask)
    loss = aggregate(
        token_losses, mask, settings.aggregation, settings.max_tokens, inputs.total_tokens, inputs.total_sequences
    )
    return loss, stats


# ---------------------------------------------------------------------------------------------------------
# The objectives


def _clipped_surrogate(ratio: Tensor, advantages: Tensor, low: float, high: float) -> tuple[Tensor, Tensor, Tensor]:
    """``max(-A r, -A clip(r, 1 - low, 1 + high))`` per token and where the clip won, split by side."""
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - low, 1.0 + high)
    with torch.no_grad():
        is_clipped = clipped > unclipped  # the clipped branch wins the max: zero gradient for this token
        clipped_low, clipped_high = is_clipped & (ratio < 1.0), is_clipped & (ratio > 1.0)
    return torch.maximum(unclipped, clipped), clipped_low, clipped_high


@register_objective("ppo_clip")
def ppo_clip(inputs: ObjectiveInputs, settings: ObjectiveSettings) -> tuple[Tensor, dict[str, RowStat]]:
    """Clipped surrogate with a token-level ratio and a decoupled clip range.

    Per token, with ``r = exp(logprobs - old_logprobs)``::

        loss_t = -min(r * A, clip(r, 1 - clip_ratio_low, 1 + clip_ratio_high) * A)

    PPO (Schulman et al. 2017, eq. 7) with DAPO's Clip-Higher (Yu et al. 2025, eq. 10): a larger
    ``clip_ratio_high`` lets low-probability tokens grow, which counters entropy collapse.
    """
    mask, advantages, log_ratio = objective_terms(inputs, settings)
    ratio = torch.exp(log_ratio)
    token_losses, low, high = _clipped_surrogate(ratio, advantages, settings.clip_ratio_low, settings.clip_ratio_high)
    loss, stats = weight_mask_aggregate(token_losses, mask, advantages, inputs, settings)
    return loss, ratio_stats(ratio, log_ratio, low, high, mask) | stats


@register_objective("gspo", settings=GSPOSettings)
def gspo(inputs: ObjectiveInputs, settings: ObjectiveSettings) -> tuple[Tensor, dict[str, RowStat]]:
    """Clipped surrogate with a sequence-level ratio: Group Sequence Policy Optimization.

    Zheng et al. 2025, "Group Sequence Policy Optimization", eq. 7: the importance ratio of sequence
    ``i`` is the geometric mean of its token ratios, ``s_i = exp(1/|y_i| sum_t log r_{i,t})``, clipped at
    sequence level (eq. 5) with the much smaller range of its own settings (:class:`GSPOSettings`,
    §5.1: 3e-4, 4e-4).
    Implemented as the GSPO-token variant (same paper, §4.3): ``s_{i,t} = sg[s_i] * pi(y_t) / sg[pi(y_t)]``
    has the value ``s_i`` and the gradient ``s_i * grad log pi(y_t)``, which equals GSPO's gradient for
    per-sequence advantages and also accepts per-token ``[N, T]`` advantages. GSPO's ``1/G sum_i`` is the
    ``seq_mean_token_mean`` aggregation. ``ratio_*`` stats describe ``s_i`` (per token).
    """
    mask, advantages, log_ratio = objective_terms(inputs, settings)
    sequence_log_ratio = (log_ratio * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1)
    token_log_ratio = sequence_log_ratio.detach() + inputs.logprobs - inputs.logprobs.detach()
    ratio = torch.exp(token_log_ratio)
    token_losses, low, high = _clipped_surrogate(
        ratio, advantages, settings.own.clip_ratio_low, settings.own.clip_ratio_high
    )
    loss, stats = weight_mask_aggregate(token_losses, mask, advantages, inputs, settings)
    return loss, ratio_stats(ratio, log_ratio, low, high, mask) | stats


@register_objective("cispo", settings=CISPOSettings)
def cispo(inputs: ObjectiveInputs, settings: ObjectiveSettings) -> tuple[Tensor, dict[str, RowStat]]:
    """REINFORCE with clipped, stop-gradient importance weights: Clipped IS-weight Policy Optimization.

    MiniMax 2025, "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention", §3.1:
    every token keeps a gradient, weighted by its importance ratio truncated from above,
    ``w_t = sg(min(r_t, 1 + clip_ratio_high))`` (:class:`CISPOSettings`)::

        loss_t = -w_t * A * log pi(y_t)      (written here as -w_t * A * pi(y_t) / sg[pi(y_t)])

    The second form has the same gradient and the value ``-w_t * A``, comparable with PPO's. Like
    MiniMax-M1 there is no lower bound on the weight. (TRL's ``epsilon_high = 5.0`` for cispo is an
    absolute cap, i.e. ``clip_ratio_high = 4.0`` here.) MiniMax-M1 normalizes by all tokens:
    the ``token_mean`` aggregation. ``clip_fraction_high`` counts tokens whose weight was truncated.
    """
    mask, advantages, log_ratio = objective_terms(inputs, settings)
    ratio = torch.exp(log_ratio)
    cap = math.log1p(settings.own.clip_ratio_high)
    weight = torch.exp(log_ratio.detach().clamp(max=cap))
    token_losses = -advantages * weight * torch.exp(inputs.logprobs - inputs.logprobs.detach())
    loss, stats = weight_mask_aggregate(token_losses, mask, advantages, inputs, settings)
    truncated_high = log_ratio.detach() > cap
    return loss, ratio_stats(ratio, log_ratio, torch.zeros_like(truncated_high), truncated_high, mask) | stats


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    aggregation: str,
    max_tokens: int | None = None,
    behaviour_logprobs: Tensor | None = None,
    tis_cap: float | None = None,
) -> tuple[Tensor, dict[str, RowStat]]:
    """:func:`ppo_clip` with positional tensors, no masks; returns ``(loss, stats)``.

    The clip range and aggregation have no defaults here: they come from the config (``RLConfig``).
    """
    inputs = ObjectiveInputs(logprobs, old_logprobs, advantages, mask, behaviour_logprobs=behaviour_logprobs)
    settings = ObjectiveSettings(
        clip_ratio_low=clip_ratio_low,
        clip_ratio_high=clip_ratio_high,
        aggregation=aggregation,
        max_tokens=max_tokens,
        tis_cap=tis_cap,
        mask_truncated=False,
        offpolicy_kl_threshold=None,
    )
    return ppo_clip(inputs, settings)
