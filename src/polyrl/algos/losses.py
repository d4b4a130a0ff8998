"""Losses on token log-probabilities: aggregations, KL penalty, overlong shaping.

The policy objectives themselves (PPO-clip, GSPO, CISPO) are in :mod:`polyrl.algos.objectives`; the log-probs
they take come from the forward (:mod:`polyrl.forward.token_scores`).

Shapes: ``N`` sequences, response tokens padded to ``T``; ``mask[N, T]`` is 1 on tokens the policy
generated (0 on padding and on environment/tool tokens in multi-turn trajectories).

How per-token losses become one scalar is itself an algorithmic choice (GRPO, DAPO and Dr. GRPO differ
only there), so aggregations are registered by name like estimators::

    @register_aggregation("my_aggregation")
    def my_aggregation(values, mask, max_tokens, total_tokens, total_sequences): ...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor

from polyrl.errors import UserError
from polyrl.registry import Registry

__all__ = [
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "aggregate",
    "get_aggregation",
    "kl_penalty",
    "loss_totals",
    "overlong_penalty",
    "register_aggregation",
    "register_kl_estimator",
]

# ---------------------------------------------------------------------------------------------------------
# Aggregation of per-token values into one scalar


# A normalizer: a Python number or a 0-d tensor (a count gathered over micro-batches or ranks).
Count = float | Tensor


class Aggregation(Protocol):
    def __call__(
        self,
        values: Tensor,
        mask: Tensor,
        max_tokens: int | None,
        total_tokens: Count | None,
        total_sequences: Count | None,
    ) -> Tensor: ...


AGGREGATIONS = Registry("loss aggregation", "polyrl.aggregations", builtins=("polyrl.algos.losses",))


def register_aggregation(name: str) -> Callable[[Aggregation], Aggregation]:
    """Decorator: make a token-to-scalar aggregation available by ``name``."""
    return AGGREGATIONS.register(name)


def get_aggregation(name: str) -> Aggregation:
    """The aggregation registered as ``name``; a UserError listing the known names otherwise."""
    return AGGREGATIONS.lookup(name)


def aggregate(
    values: Tensor,
    mask: Tensor,
    aggregation: str,
    max_tokens: int | None = None,
    total_tokens: Count | None = None,
    total_sequences: Count | None = None,
) -> Tensor:
    """Reduce per-token ``values[N, T]`` over ``mask`` with the aggregation named ``aggregation``.

    Without totals each aggregation normalizes by this batch's own token / sequence count. Under gradient
    accumulation pass the counts of the whole minibatch (see :func:`loss_totals`): then every micro-batch
    loss is a partial sum, and the micro-batch losses add up to the loss of the whole minibatch.
    """
    return get_aggregation(aggregation)(values, mask.to(values.dtype), max_tokens, total_tokens, total_sequences)


def loss_totals(mask: Tensor) -> tuple[Tensor, Tensor]:
    """``(total_tokens, total_sequences)`` of ``mask[N, T]``: its valid tokens, and its sequences with any.

    Sum these over the micro-batches of a minibatch (or all-reduce them over ranks) and pass them to
    :func:`aggregate` so that each micro-batch is normalized by the minibatch's counts.
    """
    mask = mask.detach()
    return mask.sum(), (mask.sum(-1) > 0).sum().to(mask.dtype)


def _sequences_with_tokens(mask: Tensor, total_sequences: Count | None) -> Count:
    if total_sequences is not None:
        return total_sequences
    return (mask.sum(-1) > 0).sum().clamp(min=1)


@register_aggregation("token_mean")
def token_mean(
    values: Tensor,
    mask: Tensor,
    max_tokens: int | None = None,
    total_tokens: Count | None = None,
    total_sequences: Count | None = None,
) -> Tensor:
    """Sum over every valid token in the batch / number of valid tokens (``total_tokens`` when given).

    DAPO (Yu et al. 2025, §3.3 Token-Level Policy Gradient Loss): each token weighs the same, so long
    responses are not under-weighted the way a per-sequence mean under-weights them.
    """
    denominator = mask.sum().clamp(min=1) if total_tokens is None else total_tokens
    return (values * mask).sum() / denominator


@register_aggregation("seq_mean_token_mean")
def seq_mean_token_mean(
    values: Tensor,
    mask: Tensor,
    max_tokens: int | None = None,
    total_tokens: Count | None = None,
    total_sequences: Count | None = None,
) -> Tensor:
    """Mean over each sequence's tokens, then mean over sequences (the original GRPO objective).

    Shao et al. 2024, "DeepSeekMath", eq. 3: ``1/G sum_i 1/|o_i| sum_t``. Sequences without valid
    tokens are left out of the outer mean (``total_sequences``, when given, counts the minibatch's).
    """
    per_sequence = (values * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return per_sequence.sum() / _sequences_with_tokens(mask, total_sequences)


@register_aggregation("seq_mean_token_sum_norm")
def seq_mean_token_sum_norm(
    values: Tensor,
    mask: Tensor,
    max_tokens: int | None = None,
    total_tokens: Count | None = None,
    total_sequences: Count | None = None,
) -> Tensor:
    """Sum over each sequence's tokens / a constant ``max_tokens``, then mean over sequences.

    Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training", §3.1): dividing by ``|o_i|`` biases
    towards long wrong answers; dividing by a constant (the generation budget) removes that length bias.
    Sequences without valid tokens are left out of the mean, as in ``seq_mean_token_mean``.
    """
    if max_tokens is None or max_tokens <= 0:
        raise UserError(
            f"aggregation 'seq_mean_token_sum_norm' needs max_tokens > 0 (the generation budget), got {max_tokens}"
        )
    return (values * mask).sum() / max_tokens / _sequences_with_tokens(mask, total_sequences)


# ---------------------------------------------------------------------------------------------------------
# KL penalty to a reference policy

# Schulman 2020, "Approximating KL Divergence" (joschu.net/blog/kl-approx.html): with samples from the
# policy and r = ref / p, each estimator maps (logprobs, ref_logprobs) to a per-token estimate.
KL_ESTIMATORS = Registry("KL estimator", "polyrl.kl", builtins=("polyrl.algos.losses",))

# Bounds log(ref/p) before exp in k3: a token the policy has driven to ~0 probability would otherwise
# overflow to inf and poison the whole step.
_K3_LOG_RATIO_BOUND = 20.0


def register_kl_estimator(name: str) -> Callable[[KLEstimator], KLEstimator]:
    """Decorator: make a per-token KL estimator ``(logprobs, ref_logprobs) -> Tensor[N, T]`` available by name."""
    return KL_ESTIMATORS.register(name)


class KLEstimator(Protocol):
    def __call__(self, logprobs: Tensor, ref_logprobs: Tensor) -> Tensor: ...


@register_kl_estimator("k1")
def kl_k1(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """``-log r = log p - log ref``: unbiased, high variance, can be negative."""
    return logprobs - ref_logprobs


@register_kl_estimator("k2")
def kl_k2(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """``(log r)^2 / 2``: biased, low variance."""
    return 0.5 * (logprobs - ref_logprobs).square()


@register_kl_estimator("k3")
def kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """``(r - 1) - log r``: unbiased, never negative (GRPO's, DeepSeekMath eq. 4); ``log r`` bounded to ±20."""
    log_ratio = (ref_logprobs - logprobs).clamp(-_K3_LOG_RATIO_BOUND, _K3_LOG_RATIO_BOUND)
    return torch.exp(log_ratio) - log_ratio - 1.0


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, estimator: str) -> Tensor:
    """Per-token estimate of KL(policy || reference) by the estimator registered as ``estimator``.

    ``Tensor[N, T]``; reduce it with :func:`aggregate`. Built-ins: ``k1``, ``k2``, ``k3`` (Schulman 2020,
    "Approximating KL Divergence"); the config's ``kl_estimator`` picks one.
    """
    return KL_ESTIMATORS.lookup(estimator)(logprobs, ref_logprobs)


# ---------------------------------------------------------------------------------------------------------
# Reward shaping


def overlong_penalty(lengths: Tensor, max_len: int, cache_len: int, factor: float = 1.0) -> Tensor:
    """DAPO soft overlong punishment (Yu et al. 2025, §3.4, eq. 13), ``Tensor[N]`` added to the reward.

    With ``L = max_len`` and ``C = cache_len``: 0 for ``len <= L - C``; ``factor * ((L - C) - len) / C``
    for ``L - C < len <= L`` (a linear ramp to ``-factor``); ``-factor`` beyond ``L``. ``cache_len = 0``
    gives a hard step at ``max_len``.
    """
    if max_len <= 0:
        raise UserError(f"overlong max_len must be > 0, got {max_len}")
    if not 0 <= cache_len <= max_len:
        raise UserError(f"overlong cache_len must be in [0, max_len={max_len}], got {cache_len}")
    lengths = lengths.to(torch.float32)
    start = float(max_len - cache_len)
    ramp = (start - lengths) / cache_len if cache_len > 0 else torch.zeros_like(lengths)
    penalty = torch.where(lengths <= start, torch.zeros_like(lengths), ramp)
    penalty = torch.where(lengths > max_len, torch.full_like(lengths, -1.0), penalty)
    return factor * penalty
