"""The statistics an objective reports: each measured once, reducible over any subset of the batch's rows.

An objective returns ``stats: dict[str, RowStat]``. A :class:`RowStat` keeps the per-row tensors a
statistic is reduced from and the reduction, so the learner reads the whole batch's value and each task's
(``stat.over(rows)``) from one objective call; the subset's value is exactly the one the objective would
compute on those rows alone (every reduction here works row by row before it sums).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["RowStat", "logprob_mismatch", "ratio_stats", "sequence_fraction_stat", "token_mean_stat"]


@dataclass(frozen=True)
class RowStat:
    """One statistic of an objective, measured once: ``reduce(*tensors)`` over the whole batch, or over any
    subset of its rows (``over(rows)`` indexes every tensor's first dimension first). Exact by construction:
    the subset's value is the one the objective would compute on those rows alone."""

    reduce: Callable[..., Tensor]
    tensors: tuple[Tensor, ...]

    def over(self, rows: Tensor | None = None) -> Tensor:
        """The 0-d statistic over ``rows`` (a bool mask or indices; None: every row)."""
        return self.reduce(*(self.tensors if rows is None else (t[rows] for t in self.tensors)))

    def __float__(self) -> float:
        return float(self.over())


def _token_mean(values: Tensor, mask: Tensor) -> Tensor:
    return (values.detach().to(mask.dtype) * mask).sum() / mask.sum().clamp(min=1)


def _sequence_fraction(dropped: Tensor, mask: Tensor) -> Tensor:
    has_tokens = mask.sum(-1) > 0
    return (dropped & has_tokens).sum() / has_tokens.sum().clamp(min=1)


def _masked_max(values: Tensor, valid: Tensor) -> Tensor:
    # masked_fill rather than values[valid]: boolean indexing would force a device sync per call.
    return values.masked_fill(~valid, 0.0).max()


def _masked_min(values: Tensor, valid: Tensor) -> Tensor:
    return values.masked_fill(~valid, math.inf).min()


def token_mean_stat(values: Tensor, mask: Tensor) -> RowStat:
    """A statistic averaged over the loss tokens: ``values[N, T]`` (detached) weighted by ``mask[N, T]``."""
    return RowStat(_token_mean, (values.detach(), mask.detach()))


def ratio_stats(
    ratio: Tensor, log_ratio: Tensor, clipped_low: Tensor, clipped_high: Tensor, mask: Tensor
) -> dict[str, RowStat]:
    """Clip fractions (tokens clipped on each side), k3 approx-KL of the token log-ratio, the ratio's range."""
    with torch.no_grad():
        valid, ratio, log_ratio = mask.bool(), ratio.detach(), log_ratio.detach()
        return {
            "clip_fraction": token_mean_stat(clipped_low | clipped_high, mask),
            "clip_fraction_low": token_mean_stat(clipped_low, mask),
            "clip_fraction_high": token_mean_stat(clipped_high, mask),
            "approx_kl": token_mean_stat(torch.exp(log_ratio) - 1.0 - log_ratio, mask),
            "ratio_mean": token_mean_stat(ratio, mask),
            "ratio_max": RowStat(_masked_max, (ratio, valid)),
            "ratio_min": RowStat(_masked_min, (ratio, valid)),
        }


def sequence_fraction_stat(dropped: Tensor, mask: Tensor) -> RowStat:
    """The fraction of the sequences with tokens in ``mask[N, T]`` for which ``dropped[N]`` holds."""
    return RowStat(_sequence_fraction, (dropped, mask.detach()))


def logprob_mismatch(behaviour: Tensor, training: Tensor, mask: Tensor) -> dict[str, RowStat]:
    """How far the log-probs that sampled (``behaviour``: the generation engine, its precision and its
    truncation) are from the trainer's own (``training``) on the tokens of ``mask``: ``mismatch_abs_mean`` and
    ``mismatch_abs_max`` of ``training - behaviour``, and ``mismatch_ratio_mean``, the mean importance ratio
    ``exp(training - behaviour)`` (1 when they agree; the quantity truncated importance sampling corrects,
    Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training")."""
    with torch.no_grad():
        diff = training.detach() - behaviour.detach()
        valid = mask.bool()
        return {
            "mismatch_abs_mean": token_mean_stat(diff.abs(), mask),
            "mismatch_abs_max": RowStat(_masked_max, (diff.abs(), valid)),
            "mismatch_ratio_mean": token_mean_stat(torch.exp(diff), mask),
        }
