"""The statistics an objective reports: each measured once, reducible over any subset of the batch's rows, read
off the device once per micro-batch and averaged over an update's tokens.

An objective returns ``stats: dict[str, RowStat]``. A :class:`RowStat` keeps the per-row tensors a
statistic is reduced from and the reduction, so the learner reads the whole batch's value and each task's
(``stat.over(rows)``) from one objective call; the subset's value is exactly the one the objective would
compute on those rows alone (every reduction here works row by row before it sums). :func:`read_stats` reads a
micro-batch's statistics, overall and per task, in one copy from the device; :class:`StatMeans` keeps them as
token-weighted running means over the update (``*_max`` / ``*_min`` keep their extremes), which FSDP ranks combine.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "RowStat",
    "StatMeans",
    "logprob_mismatch",
    "ratio_stats",
    "read_stats",
    "sequence_fraction_stat",
    "token_mean_stat",
]


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


# ---------------------------------------------------------------------------------------------------------
# Reading them: once per micro-batch, averaged over the update


class StatMeans:
    """Token-weighted running means of the objective's statistics (extremes for ``*_max`` / ``*_min``)."""

    def __init__(self):
        self.sums: dict[str, float] = defaultdict(float)
        self.weights: dict[str, float] = defaultdict(float)

    def add(self, values: dict[str, float], weight: float) -> None:
        """Add one micro-batch's statistics (read by :func:`read_stats`), weighted by its loss tokens."""
        for key, v in values.items():
            if key.endswith("_max"):
                self.sums[key] = max(self.sums.get(key, -math.inf), v)
            elif key.endswith("_min"):
                self.sums[key] = min(self.sums.get(key, math.inf), v)
            elif math.isfinite(v):
                self.sums[key] += v * weight
                self.weights[key] += weight

    def absorb(self, sums: dict[str, float], weights: dict[str, float]) -> None:
        """Add another rank's running sums (the same keys mean the same statistics)."""
        for key, value in sums.items():
            if key.endswith("_max"):
                self.sums[key] = max(self.sums.get(key, -math.inf), value)
            elif key.endswith("_min"):
                self.sums[key] = min(self.sums.get(key, math.inf), value)
            else:
                self.sums[key] += value
                self.weights[key] += weights.get(key, 0.0)

    def result(self) -> dict[str, float]:
        return {
            k: (v if k.endswith(("_max", "_min")) else v / self.weights[k] if self.weights[k] else float("nan"))
            for k, v in self.sums.items()
        }


def read_stats(stats: dict[str, RowStat | Tensor], mask: Tensor, task_rows: dict[str, Tensor], device):
    """Every statistic of one micro-batch over all its rows and over each task's rows (``task_rows``: a bool mask
    on the device per task), with the loss tokens each is weighted by, read from the device in one copy:
    ``(overall, weight, {task: (values, weight)})``. A plain tensor is a whole-batch statistic: overall only."""
    keys, values = [], []
    for key, value in stats.items():
        keys.append((None, key))
        values.append(value.over() if isinstance(value, RowStat) else value)
    keys.append((None, ""))
    values.append(mask.sum())
    for task, keep in task_rows.items():
        for key, value in stats.items():
            if isinstance(value, RowStat):
                keys.append((task, key))
                values.append(value.over(keep))
        keys.append((task, ""))
        values.append(mask[keep].sum())
    numbers = torch.stack([v.detach().float().reshape(()).to(device) for v in values]).tolist()
    by: dict = defaultdict(dict)
    for (task, key), number in zip(keys, numbers):
        by[task][key] = number
    split = lambda d: ({k: v for k, v in d.items() if k}, d[""])
    return (*split(by.pop(None)), {task: split(d) for task, d in by.items()})
