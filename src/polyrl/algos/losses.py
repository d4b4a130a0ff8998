"""Policy-gradient losses on token log-probabilities: clipped surrogate, KL penalty, overlong shaping.

Shapes: ``N`` sequences, response tokens padded to ``T``; ``mask[N, T]`` is 1 on tokens the policy
generated (0 on padding and on environment/tool tokens in multi-turn trajectories).

How per-token losses become one scalar is itself an algorithmic choice (GRPO, DAPO and Dr. GRPO differ
only there), so aggregations are registered by name like estimators::

    @register_aggregation("my_aggregation")
    def my_aggregation(values, mask, max_tokens=None): ...
"""

from __future__ import annotations

import math
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
    "entropy_from_logits",
    "get_aggregation",
    "kl_penalty",
    "overlong_penalty",
    "policy_loss",
    "register_aggregation",
    "token_logprobs",
]

# Rows of [N*T, V] logits processed at once: bounds the float32 copy to chunk_size * V floats
# (1024 rows * 152k vocab * 4 bytes ~ 0.6 GB) instead of N * T * V.
DEFAULT_CHUNK_ROWS = 1024


# ---------------------------------------------------------------------------------------------------------
# Log-probabilities and entropy from logits


def _row_chunks(logits: Tensor, temperature: float, chunk_rows: int):
    if temperature <= 0:
        raise UserError(f"temperature must be > 0, got {temperature}")
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    flat = logits.reshape(-1, logits.shape[-1])
    for start in range(0, flat.shape[0], chunk_rows):
        # At least float32: a bf16 log-softmax loses ~2 digits on the log-probs the ratio is built from.
        chunk = flat[start : start + chunk_rows]
        chunk = chunk.to(torch.promote_types(chunk.dtype, torch.float32))
        yield start, chunk / temperature if temperature != 1.0 else chunk


def token_logprobs(
    logits: Tensor, tokens: Tensor, temperature: float = 1.0, chunk_rows: int = DEFAULT_CHUNK_ROWS
) -> Tensor:
    """``log softmax(logits / temperature)[token]`` per position: ``Tensor[N, T]``, at least float32.

    ``logits[:, t]`` must already be the prediction *for* ``tokens[:, t]`` (shifted by the caller).
    Computed as ``logit[token] - logsumexp(logits)`` over chunks of rows so the full [N, T, V]
    log-softmax is never materialized. ``temperature`` must match the one used for sampling, or the
    ratio to the behaviour log-probs is biased.
    """
    flat_tokens = tokens.reshape(-1, 1)
    pieces = [
        chunk.gather(-1, flat_tokens[start : start + chunk.shape[0]]).squeeze(-1) - torch.logsumexp(chunk, dim=-1)
        for start, chunk in _row_chunks(logits, temperature, chunk_rows)
    ]
    return torch.cat(pieces).reshape(tokens.shape)


def entropy_from_logits(logits: Tensor, temperature: float = 1.0, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Tensor:
    """Entropy of the next-token distribution per position, ``Tensor[N, T]``.

    ``H = logsumexp(z) - sum_v softmax(z)_v z_v``, which avoids computing ``log p`` for every token.
    """
    pieces = []
    for _, chunk in _row_chunks(logits, temperature, chunk_rows):
        probs = torch.softmax(chunk, dim=-1)
        # A -inf logit (a masked-out token) has p = 0 and contributes 0, not 0 * -inf = nan.
        finite = torch.where(probs > 0, chunk, torch.zeros_like(chunk))
        pieces.append(torch.logsumexp(chunk, dim=-1) - (probs * finite).sum(-1))
    return torch.cat(pieces).reshape(logits.shape[:-1])


# ---------------------------------------------------------------------------------------------------------
# Aggregation of per-token values into one scalar


class Aggregation(Protocol):
    def __call__(self, values: Tensor, mask: Tensor, max_tokens: int | None = None) -> Tensor: ...


AGGREGATIONS = Registry("loss aggregation")


def register_aggregation(name: str) -> Callable[[Aggregation], Aggregation]:
    """Decorator: make a token-to-scalar aggregation available by ``name``."""
    return AGGREGATIONS.register(name)


def get_aggregation(name: str) -> Aggregation:
    """The aggregation registered as ``name``; a UserError listing the known names otherwise."""
    return AGGREGATIONS.lookup(name)


def aggregate(values: Tensor, mask: Tensor, aggregation: str = "token_mean", max_tokens: int | None = None) -> Tensor:
    """Reduce per-token ``values[N, T]`` over ``mask`` with the aggregation named ``aggregation``."""
    return get_aggregation(aggregation)(values, mask.to(values.dtype), max_tokens)


@register_aggregation("token_mean")
def token_mean(values: Tensor, mask: Tensor, max_tokens: int | None = None) -> Tensor:
    """Sum over every valid token in the batch / number of valid tokens.

    DAPO (Yu et al. 2025, §3.3 Token-Level Policy Gradient Loss): each token weighs the same, so long
    responses are not under-weighted the way a per-sequence mean under-weights them.
    """
    return (values * mask).sum() / mask.sum().clamp(min=1)


@register_aggregation("seq_mean_token_mean")
def seq_mean_token_mean(values: Tensor, mask: Tensor, max_tokens: int | None = None) -> Tensor:
    """Mean over each sequence's tokens, then mean over sequences (the original GRPO objective).

    Shao et al. 2024, "DeepSeekMath", eq. 3: ``1/G sum_i 1/|o_i| sum_t``. Sequences without valid
    tokens are left out of the outer mean.
    """
    lengths = mask.sum(-1)
    per_sequence = (values * mask).sum(-1) / lengths.clamp(min=1)
    has_tokens = (lengths > 0).to(values.dtype)
    return (per_sequence * has_tokens).sum() / has_tokens.sum().clamp(min=1)


@register_aggregation("seq_mean_token_sum_norm")
def seq_mean_token_sum_norm(values: Tensor, mask: Tensor, max_tokens: int | None = None) -> Tensor:
    """Sum over each sequence's tokens / a constant ``max_tokens``, then mean over sequences.

    Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training", §3.1): dividing by ``|o_i|`` biases
    towards long wrong answers; dividing by a constant (the generation budget) removes that length bias.
    """
    if max_tokens is None or max_tokens <= 0:
        raise UserError(
            f"aggregation 'seq_mean_token_sum_norm' needs max_tokens > 0 (the generation budget), got {max_tokens}"
        )
    return (values * mask).sum(-1).div(max_tokens).mean()


# ---------------------------------------------------------------------------------------------------------
# Clipped policy loss


def _masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    return token_mean(values.detach(), mask)


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    aggregation: str = "token_mean",
    max_tokens: int | None = None,
    behaviour_logprobs: Tensor | None = None,
    tis_cap: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped surrogate loss with decoupled clip range; returns ``(loss, stats)``.

    Per token, with ``r = exp(logprobs - old_logprobs)``::

        loss_t = -min(r * A, clip(r, 1 - clip_ratio_low, 1 + clip_ratio_high) * A)

    PPO (Schulman et al. 2017, eq. 7) with DAPO's Clip-Higher (Yu et al. 2025, eq. 10): a larger
    ``clip_ratio_high`` lets low-probability tokens grow, which counters entropy collapse.
    ``advantages`` is ``[N]`` (broadcast over tokens) or ``[N, T]``.

    Truncated importance sampling (Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You
    Off-Policy RL Training"): when rollouts come from a behaviour policy that differs from the old
    policy (asynchronous rollouts, or a different inference engine), each token loss is multiplied by
    ``min(exp(old_logprobs - behaviour_logprobs), tis_cap)``, detached. ``tis_cap=None`` disables it.

    ``stats`` holds detached scalar tensors (call ``.item()`` when logging, once per step):
    ``clip_fraction`` (tokens whose gradient the clip zeroes), ``clip_fraction_low`` / ``_high`` (split
    by side), ``approx_kl`` (k3 estimate of KL(old || new)), ``ratio_mean``, ``ratio_max``, ``ratio_min``
    and, with TIS, ``tis_weight_mean`` and ``tis_truncated_fraction``.
    """
    if not 0.0 <= clip_ratio_low < 1.0:
        raise UserError(f"clip_ratio_low must be in [0, 1), got {clip_ratio_low}")
    if not clip_ratio_high >= 0.0:
        raise UserError(f"clip_ratio_high must be >= 0, got {clip_ratio_high}")
    if tis_cap is not None and not tis_cap > 0.0:
        raise UserError(f"tis_cap must be > 0 (or null to disable truncated importance sampling), got {tis_cap}")
    if tis_cap is not None and behaviour_logprobs is None:
        raise ValueError("tis_cap is set but behaviour_logprobs were not passed")
    aggregate_fn = get_aggregation(aggregation)

    mask = mask.to(logprobs.dtype)
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    advantages = advantages.to(logprobs.dtype)
    # Detached so that an on-policy caller passing ``old_logprobs = logprobs`` still gets a gradient
    # (otherwise the ratio would be the constant 1 and the gradient silently 0).
    log_ratio = logprobs - old_logprobs.detach()
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    token_losses = torch.maximum(unclipped, clipped)

    stats: dict[str, Tensor] = {}
    if tis_cap is not None:
        raw_weight = torch.exp(old_logprobs - behaviour_logprobs).detach()
        weight = raw_weight.clamp(max=tis_cap)
        token_losses = token_losses * weight
        stats["tis_weight_mean"] = _masked_mean(weight, mask)
        stats["tis_truncated_fraction"] = _masked_mean((raw_weight > tis_cap).to(mask.dtype), mask)

    loss = aggregate_fn(token_losses, mask, max_tokens)

    with torch.no_grad():
        is_clipped = clipped > unclipped  # the clipped branch wins the max: zero gradient for this token
        valid = mask.bool()
        stats["clip_fraction"] = _masked_mean(is_clipped.to(mask.dtype), mask)
        stats["clip_fraction_low"] = _masked_mean((is_clipped & (ratio < 1.0)).to(mask.dtype), mask)
        stats["clip_fraction_high"] = _masked_mean((is_clipped & (ratio > 1.0)).to(mask.dtype), mask)
        stats["approx_kl"] = _masked_mean(ratio - 1.0 - log_ratio, mask)
        stats["ratio_mean"] = _masked_mean(ratio, mask)
        # masked_fill rather than ratio[valid]: boolean indexing would force a device sync per call.
        stats["ratio_max"] = ratio.masked_fill(~valid, 0.0).max()
        stats["ratio_min"] = ratio.masked_fill(~valid, math.inf).min()
    return loss, stats


# ---------------------------------------------------------------------------------------------------------
# KL penalty to a reference policy

# Bounds log(ref/p) before exp in k3: a token the policy has driven to ~0 probability would otherwise
# overflow to inf and poison the whole step.
_K3_LOG_RATIO_BOUND = 20.0

KL_ESTIMATORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    # Schulman 2020, "Approximating KL Divergence" (joschu.net/blog/kl-approx.html), with samples from
    # the policy and log r = log ref - log p:
    "k1": lambda logprobs, ref_logprobs: logprobs - ref_logprobs,  # -log r: unbiased, high variance, can be < 0
    "k2": lambda logprobs, ref_logprobs: (
        0.5 * (logprobs - ref_logprobs).square()
    ),  # (log r)^2 / 2: biased, low variance
    "k3": lambda logprobs, ref_logprobs: _k3(ref_logprobs - logprobs),  # (r - 1) - log r: unbiased, >= 0
}


def _k3(log_ratio: Tensor) -> Tensor:
    log_ratio = log_ratio.clamp(-_K3_LOG_RATIO_BOUND, _K3_LOG_RATIO_BOUND)
    return torch.exp(log_ratio) - log_ratio - 1.0


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, estimator: str = "k3") -> Tensor:
    """Per-token estimate of KL(policy || reference), ``Tensor[N, T]``; reduce it with :func:`aggregate`.

    ``k1 = log p - log ref``, ``k2 = (log p - log ref)^2 / 2``, ``k3 = exp(ref - log p) - (ref - log p) - 1``
    (Schulman 2020, "Approximating KL Divergence"). k3 is what GRPO uses (DeepSeekMath eq. 4).
    """
    try:
        kl_fn = KL_ESTIMATORS[estimator]
    except KeyError:
        raise UserError(f"unknown KL estimator {estimator!r}; known: {', '.join(sorted(KL_ESTIMATORS))}") from None
    return kl_fn(logprobs, ref_logprobs)


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
