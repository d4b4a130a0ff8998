"""The optimizer step every trainer in polyrl takes (policy RL, SFT, critic, reward model): clip, check, step."""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor

# The schedule follows training steps, and a step whose batch carries no signal (every advantage zero) or a
# non-finite gradient deliberately skips optimizer.step(): torch's warning about that order is noise here.
warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before `optimizer\.step\(\)`")


MAX_LR = 1.0
"""The largest learning rate a config may set. AdamW moves each weight by about ``lr`` per step whatever the
gradient's scale (Kingma & Ba 2015, section 2.1), and the weights of a language model are far below 1, so a
larger rate is a typo; ``sft.lr=1e308`` overflowed float32 inside AdamW's step (a traceback)."""


def clip_and_step(optimizer, parameters, max_grad_norm: float, loss: Tensor) -> float | None:
    """Clip the gradient of ``parameters`` to ``max_grad_norm`` and take the optimizer step; the gradient norm
    before clipping, or None (and no step, gradients cleared) when the loss or the gradient is not finite."""
    grad_norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
    if not (torch.isfinite(loss).all() and torch.isfinite(grad_norm)):
        optimizer.zero_grad(set_to_none=True)
        return None
    optimizer.step()
    return float(grad_norm)


def warmup_cosine(warmup: int, total: int, cosine: bool, floor: float = 0.1):
    """LR multiplier: linear warmup over ``warmup`` steps, then constant or cosine decay to ``floor``."""

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        if not cosine:
            return 1.0
        progress = (step - warmup) / max(1, total - warmup)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))

    return schedule


FUSED_ADAMW_MIN_PARAMS = 10_000_000
"""From this many trained parameters AdamW runs fused (one kernel over all tensors; on this CPU SmolLM2-135M's
step went from 643 to 171 ms, docs/benchmarks.md "Roofline"); it rounds differently in the last bit, so smaller
models (the tiny default) keep the foreach path and their exact numbers."""


def _fused(parameters: list[Tensor]) -> bool | None:
    """True for a large model's plain tensors (FSDP's sharded DTensors keep the default path); None: torch's
    default (foreach)."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a torch built without distributed
        DTensor = ()
    if any(isinstance(p, DTensor) for p in parameters):
        return None
    return sum(p.numel() for p in parameters) >= FUSED_ADAMW_MIN_PARAMS or None


def make_optimizer(parameters, lr: float, warmup: int, total: int, cosine: bool, weight_decay: float):
    """AdamW with the warmup (+ cosine) schedule; returns ``(optimizer, scheduler)``."""
    parameters = list(parameters)
    optimizer = torch.optim.AdamW(parameters, lr=lr, weight_decay=weight_decay, fused=_fused(parameters))
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(warmup, total, cosine))
