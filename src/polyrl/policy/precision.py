"""Mixed precision and activation checkpointing: the memory switches a policy carries with it.

``model.dtype`` is the storage dtype of the weights (and so of the optimizer's states and master copy);
``model.autocast`` runs the forward passes in a lower precision on top of it. ``float32`` + ``bf16`` is
mixed precision with float32 master weights and optimizer states (Micikevicius et al. 2018, "Mixed
Precision Training"); ``bfloat16`` + ``none`` is pure bf16 (half the weight and optimizer memory, with
the rounding of bf16 updates). The setting is stored on the model, so every forward polyrl takes of it
(update, old/reference log-probs, behaviour log-probs, the critic's copy of its trunk) uses it.
"""

from __future__ import annotations

import contextlib

import torch

from polyrl.errors import UserError

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
_ATTRIBUTE = "polyrl_autocast"


def set_autocast(model: torch.nn.Module, mode: str) -> None:
    """Make polyrl's forwards of ``model`` (and of copies of it) run under ``torch.autocast`` in ``mode``."""
    setattr(model, _ATTRIBUTE, None if mode == "none" else mode)


def autocast_mode(model: torch.nn.Module) -> str:
    """The autocast mode ``model`` carries: ``none``, ``bf16`` or ``fp16``."""
    return getattr(model, _ATTRIBUTE, None) or "none"


def forward_precision(model: torch.nn.Module):
    """The autocast context for a forward of ``model``: ``torch.autocast`` in the model's mode, or nothing."""
    mode = getattr(model, _ATTRIBUTE, None)
    if mode is None:
        return contextlib.nullcontext()
    device = next(model.parameters()).device.type
    return torch.autocast(device_type=device, dtype=AUTOCAST_DTYPES[mode])


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """Recompute each decoder layer's activations in the backward instead of storing them (Chen et al. 2016,
    "Training Deep Nets with Sublinear Memory Cost"): activation memory of one layer instead of all, for about
    one more forward. Non-reentrant, so it needs no input gradients (LoRA, frozen embeddings)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not getattr(base, "supports_gradient_checkpointing", False):
        raise UserError(f"{type(base).__name__} does not support gradient checkpointing")
    base.train()  # transformers checkpoints only in training mode, and from_pretrained returns eval mode
    if hasattr(base, "activation_checkpointing_enable"):  # transformers >= 5.x renamed it
        base.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
