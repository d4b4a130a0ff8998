"""The objective's statistics over an update: read off the device once per micro-batch, averaged over its tokens.

Every statistic an objective returns (:class:`~polyrl.algos.RowStat` or a 0-d tensor) is read for the whole
micro-batch and for each task's rows in one copy from the device (:func:`read_stats`), then kept as token-weighted
running means (:class:`StatMeans`; ``*_max`` / ``*_min`` keep their extremes), which FSDP ranks combine.
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch
from torch import Tensor

from polyrl.algos import RowStat


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
