"""Value losses for a PPO critic: regression (MSE) or classification over a fixed support.

Classification critics predict a categorical distribution over ``num_bins`` bins that evenly cover
``[v_min, v_max]``; the value is the expectation of the bin centres under it, and the loss is the
cross-entropy to a target distribution built from the scalar return:

* ``hl_gauss`` — Imani & White 2018, "Improving Regression Performance with Distributional Losses"
  (the histogram loss with a Gaussian target, their eq. 4); Farebrother et al. 2024, "Stop Regressing",
  section 3.1: ``p_i = (Φ((e_{i+1} - y)/σ) - Φ((e_i - y)/σ)) / (Φ((v_max - y)/σ) - Φ((v_min - y)/σ))``
  over bin edges ``e_0 < … < e_B``, with ``σ = sigma_ratio · bin_width`` (they recommend 0.75).
* ``two_hot`` — Schrittwieser et al. 2020 (MuZero, appendix F): all mass on the two centres around
  ``y``, split linearly so the expectation is exactly ``y`` (clipped into the span of the centres).
* ``mse`` — ``(V - y)^2`` on a scalar head.

Value losses are registered by name (plugins: the ``polyrl.value_losses`` entry-point group)::

    @register_value_loss("huber", categorical=False)
    def huber(outputs, returns, support): ...   # per-token loss, [N, T]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from polyrl.registry import Registry


@dataclass(frozen=True)
class Support:
    """The value range a categorical critic covers, and the HL-Gauss width in bin widths."""

    v_min: float
    v_max: float
    sigma_ratio: float


class PerTokenValueLoss(Protocol):
    def __call__(self, outputs: Tensor, returns: Tensor, support: Support) -> Tensor: ...


@dataclass(frozen=True)
class ValueLoss:
    """A registered value loss: the per-token loss and whether the head outputs bin logits or one value."""

    per_token: PerTokenValueLoss
    categorical: bool

    def head_size(self, num_bins: int) -> int:
        """Outputs of the value head: ``num_bins`` logits for a categorical loss, else 1."""
        return num_bins if self.categorical else 1


VALUE_LOSSES: Registry[ValueLoss] = Registry(
    "value loss",
    "polyrl.value_losses",
    builtins=("polyrl.critic.value_losses",),
    entry=lambda name, per_token, **metadata: ValueLoss(per_token, **metadata),
)


def register_value_loss(name: str, *, categorical: bool) -> Callable[[PerTokenValueLoss], PerTokenValueLoss]:
    """Decorator for ``(outputs, returns[N, T], support) -> loss[N, T]``; ``outputs`` is ``[N, T, B]`` bin
    logits when ``categorical``, else ``[N, T]`` values."""
    return VALUE_LOSSES.register(name, categorical=categorical)


def bin_edges(v_min: float, v_max: float, num_bins: int) -> Tensor:
    """``num_bins + 1`` evenly spaced edges of the support."""
    return torch.linspace(v_min, v_max, num_bins + 1)


def bin_centers(v_min: float, v_max: float, num_bins: int) -> Tensor:
    edges = bin_edges(v_min, v_max, num_bins)
    return (edges[:-1] + edges[1:]) / 2


def hl_gauss_targets(y: Tensor, v_min: float, v_max: float, num_bins: int, sigma_ratio: float) -> Tensor:
    """HL-Gauss target distribution ``[..., num_bins]`` for returns ``y`` (Farebrother et al. 2024, §3.1), with
    ``σ = sigma_ratio`` bin widths (``rl.critic.sigma_ratio``)."""
    edges = bin_edges(v_min, v_max, num_bins).to(y.device, torch.float64)
    sigma = sigma_ratio * (v_max - v_min) / num_bins
    z = (edges - y.double().unsqueeze(-1)) / (sigma * math.sqrt(2.0))
    cdf = 0.5 * (1.0 + torch.erf(z))
    mass = cdf[..., 1:] - cdf[..., :-1]
    total = (cdf[..., -1] - cdf[..., 0]).unsqueeze(-1)
    return (mass / total.clamp(min=1e-12)).float()


def two_hot_targets(y: Tensor, v_min: float, v_max: float, num_bins: int) -> Tensor:
    """Two-hot target distribution ``[..., num_bins]`` whose mean over the bin centres equals ``y`` (clipped)."""
    centers = bin_centers(v_min, v_max, num_bins).to(y.device)
    y = y.float().clamp(float(centers[0]), float(centers[-1]))
    width = (v_max - v_min) / num_bins
    pos = (y - float(centers[0])) / width
    low = pos.floor().long().clamp(0, num_bins - 1)
    high = (low + 1).clamp(max=num_bins - 1)
    frac = pos - low.float()
    out = torch.zeros(*y.shape, num_bins, device=y.device)
    out.scatter_add_(-1, low.unsqueeze(-1), (1 - frac).unsqueeze(-1))
    out.scatter_add_(-1, high.unsqueeze(-1), frac.unsqueeze(-1))
    return out


def expected_value(logits: Tensor, v_min: float, v_max: float) -> Tensor:
    """Mean of the bin centres under ``softmax(logits)``; ``[..., B] -> [...]``."""
    centers = bin_centers(v_min, v_max, logits.shape[-1]).to(logits.device)
    return torch.softmax(logits.float(), dim=-1) @ centers


@register_value_loss("mse", categorical=False)
def mse(outputs: Tensor, returns: Tensor, support: Support) -> Tensor:
    """``(V - y)^2`` on a scalar head."""
    return (outputs.float() - returns) ** 2


def _cross_entropy(logits: Tensor, target: Tensor) -> Tensor:
    return -(target * torch.log_softmax(logits.float(), dim=-1)).sum(-1)


@register_value_loss("hl_gauss", categorical=True)
def hl_gauss(outputs: Tensor, returns: Tensor, support: Support) -> Tensor:
    """Cross-entropy to the HL-Gauss target (Imani & White 2018, eq. 4; Farebrother et al. 2024, §3.1)."""
    target = hl_gauss_targets(returns, support.v_min, support.v_max, outputs.shape[-1], support.sigma_ratio)
    return _cross_entropy(outputs, target)


@register_value_loss("two_hot", categorical=True)
def two_hot(outputs: Tensor, returns: Tensor, support: Support) -> Tensor:
    """Cross-entropy to the two-hot target (Schrittwieser et al. 2020, MuZero, appendix F)."""
    return _cross_entropy(outputs, two_hot_targets(returns, support.v_min, support.v_max, outputs.shape[-1]))


def value_loss(
    outputs: Tensor,
    returns: Tensor,
    mask: Tensor,
    kind: str,
    v_min: float,
    v_max: float,
    sigma_ratio: float,
) -> Tensor:
    """Mean over ``mask`` of the per-token value loss registered as ``kind``.

    ``outputs`` is ``[N, T]`` (scalar values) for ``mse`` and ``[N, T, B]`` (logits) for the categorical
    losses; ``returns`` and ``mask`` are ``[N, T]``. The support ``[v_min, v_max]`` and ``sigma_ratio`` (used by
    the categorical losses) come from ``rl.critic`` in the config, their only home.
    """
    per_token = VALUE_LOSSES.lookup(kind).per_token(outputs, returns, Support(v_min, v_max, sigma_ratio))
    return (per_token * mask).sum() / mask.sum().clamp(min=1)
