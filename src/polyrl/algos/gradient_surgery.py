"""Multi-task gradient surgery: combine per-task gradients so that tasks that conflict do not cancel out.

Every function takes ``grads[K, P]`` — the flattened gradient of each of the ``K`` tasks in a minibatch,
each already normalized as its share of the minibatch loss, so that ``grads.sum(0)`` is the plain gradient —
and returns the ``[P]`` gradient to step with, on the same scale as the plain sum::

    @register_surgery("my_surgery")
    def my_surgery(grads: Tensor, generator: torch.Generator | None) -> Tensor: ...

The cost: the learner runs one backward per task (the same rows, grouped by task) and keeps ``K`` copies of
the gradient, so this is for models whose gradient fits ``K`` times in memory.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from polyrl.registry import Registry

SURGERIES = Registry("gradient surgery", "polyrl.gradient_surgery", builtins=("polyrl.algos.gradient_surgery",))

CAGRAD_C = 0.5
"""CAGrad's conflict-aversion radius ``c`` (Liu et al. 2021 use 0.4–0.5; 0.5 in their multi-task RL runs)."""

CAGRAD_ITERATIONS = 500
"""Exponentiated-gradient iterations for CAGrad's inner problem on the simplex (K is small: it converges)."""


def register_surgery(name: str) -> Callable:
    """Decorator: make a gradient-combination rule available as ``rl.gradient_surgery: name``."""
    return SURGERIES.register(name)


def get_surgery(name: str) -> Callable[[Tensor, torch.Generator | None], Tensor]:
    return SURGERIES.lookup(name)


@register_surgery("none")
def summed(grads: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """The plain multi-task gradient: the sum of the task gradients."""
    return grads.sum(0)


@register_surgery("pcgrad")
def pcgrad(grads: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """PCGrad (Yu et al. 2020, "Gradient Surgery for Multi-Task Learning", Algorithm 1).

    For each task ``i``, in turn against every other task ``j`` in a random order: if ``g_i · g_j < 0``
    (they conflict), project ``g_i`` onto the normal plane of ``g_j``:
    ``g_i ← g_i − (g_i · g_j / ‖g_j‖²) g_j``. The projected gradients are summed. Tasks that do not conflict
    keep their gradients exactly, so with no conflict this is the plain sum.
    """
    k = grads.shape[0]
    out = grads.clone()
    norms = grads.pow(2).sum(1)
    for i in range(k):
        for j in torch.randperm(k, generator=generator).tolist():
            if j == i or norms[j] == 0:
                continue
            dot = out[i] @ grads[j]
            if dot < 0:
                out[i] -= (dot / norms[j]) * grads[j]
    return out.sum(0)


@register_surgery("cagrad")
def cagrad(grads: Tensor, generator: torch.Generator | None = None, c: float = CAGRAD_C) -> Tensor:
    """CAGrad (Liu et al. 2021, "Conflict-Averse Gradient Descent for Multi-task Learning", eq. 4 / Alg. 1).

    The task losses are ``L_i = K * l_i`` (``l_i`` is task ``i``'s share of the minibatch loss), so that their
    average ``L_0`` is the minibatch loss and ``g_0 = mean_i K g_i = grads.sum(0)`` the plain gradient. With
    ``g_w = Σ_i w_i K g_i``, find ``w`` on the simplex minimizing ``F(w) = g_w · g_0 + c ‖g_0‖ ‖g_w‖``; the
    update is ``d = (g_0 + c ‖g_0‖ / ‖g_w‖ · g_w) / (1 + c²)`` (the authors' rescaled form): the direction
    that maximizes the worst task's improvement within a ball of radius ``c ‖g_0‖`` around ``g_0``. The inner
    problem is solved by exponentiated gradient (mirror descent) on the simplex.
    """
    k = grads.shape[0]
    if k == 1:
        return grads[0].clone()
    g = grads.double() * k
    gram = g @ g.T
    g0 = g.mean(0)
    radius = c * g0.norm()
    pull = gram.mean(1)  # G · (1/K, …, 1/K): the gradient of g_w · g_0 with respect to w

    def objective(w: Tensor) -> Tensor:
        return w @ pull + radius * (w @ gram @ w).clamp(min=0).sqrt()

    w = best = torch.full((k,), 1.0 / k, dtype=torch.float64, device=grads.device)
    best_value, scale = objective(w), None
    for t in range(CAGRAD_ITERATIONS):  # F is convex: mirror descent with a 1/sqrt(t) step, best iterate kept
        grad_w = pull + radius * (gram @ w) / (w @ gram @ w).clamp(min=1e-30).sqrt()
        scale = scale if scale is not None else grad_w.abs().max().clamp(min=1e-30)
        w = w * torch.exp(-2.0 * grad_w / (scale * (t + 1) ** 0.5))
        w = w / w.sum()
        value = objective(w)
        if value < best_value:
            best, best_value = w, value
    w = best
    gw = w @ g
    direction = g0 + (radius / gw.norm().clamp(min=1e-30)) * gw
    return (direction / (1 + c**2)).to(grads.dtype)


def cagrad_objective(grads: Tensor, w: Tensor, c: float = CAGRAD_C) -> float:
    """``F(w)`` of :func:`cagrad` (for tests and diagnostics)."""
    g = grads.double() * grads.shape[0]
    g0 = g.mean(0)
    gw = w.double() @ g
    return float(gw @ g0 + c * g0.norm() * gw.norm())
