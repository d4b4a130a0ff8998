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
import functools

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


def forward_precision(model: torch.nn.Module, device: torch.device | str):
    """The autocast context for a forward of ``model`` on ``device`` (where its weights are, as the caller that
    placed them knows): ``torch.autocast`` in the model's mode, or nothing."""
    mode = getattr(model, _ATTRIBUTE, None)
    if mode is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=AUTOCAST_DTYPES[mode])


BF16_LOGPROB_TOLERANCE = {"mismatch_abs_mean": 0.15, "mismatch_abs_max": 1.0, "mismatch_ratio_mean": 0.05}
"""How far bf16 log-probs of the same tokens may be from another forward's (``algos.objective_stats.logprob_mismatch``
statistics; the ratio's mean within this of 1): what polyrl's bf16 tests and the GPU check's vision-language part
hold generation's log-probs to against the training forward's. Set from bf16 generation against fp32 training on
160 tokens of a random tiny model with logits spread over tens of nats (``tests/train/test_bf16.py``: mean
|Δ log p| 0.071, max 0.45, mean ratio 0.997), with 2× headroom."""

BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
"""``/proc/cpuinfo`` flags of CPUs whose bf16 matmuls run in hardware (oneDNN uses AMX tiles or AVX512-BF16);
elsewhere torch emulates bf16 on CPU, slower than fp32."""

AUTO_BF16_MIN_WIDTH = 384
"""``model.autocast: auto`` picks bf16 on such a CPU from this hidden size on. Measured (docs/benchmarks.md,
"bf16 crossover", ``benchmarks/bf16_crossover.py``): from 384 wide an RL step under bf16 autocast was 1.2-2.0×
faster than fp32 at every batch size tried (SmolLM2-135M, 576 wide: 1.6×); at 256 the evidence is mixed
(1.16-1.37× faster there, 3% slower in the long-sequence update of docs/scaling.md's memory benchmark); at the
tiny default's 128 it depends on the batch (0.95× to 1.19×: its time is in small ops, casts and Python), so
the default job stays in fp32, bit for bit."""


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The flags ``/proc/cpuinfo`` lists for this machine's CPU (empty off Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            return frozenset(next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), []))
    except OSError:
        return frozenset()


def bf16_cpu_flags() -> frozenset[str]:
    """Which of :data:`BF16_CPU_FLAGS` this machine's CPU has (empty off Linux)."""
    return frozenset(BF16_CPU_FLAGS) & cpu_flags()


def model_width(model: torch.nn.Module) -> int:
    """The hidden size of ``model``'s language model (0 where its config does not say): a vision-language model's
    config holds it in its text config (``get_text_config``), a causal LM's at the top."""
    config = getattr(model, "config", None)
    if hasattr(config, "get_text_config"):
        config = config.get_text_config()
    return getattr(config, "hidden_size", 0) or 0


def resolve_autocast(mode: str, model: torch.nn.Module, device: torch.device | str) -> str:
    """``mode``, with ``auto`` made concrete: ``bf16`` on a CUDA device that supports it or a CPU with bf16
    matmul units, for a float32 model whose language model is at least :data:`AUTO_BF16_MIN_WIDTH` wide
    (:func:`model_width`: a Hugging Face vision-language model's text config, whose top-level config has no
    ``hidden_size``); ``none`` otherwise (the tiny default stays in fp32, bit for bit)."""
    if mode != "auto":
        return mode
    if next(model.parameters()).dtype != torch.float32:  # bf16/fp16 weights: nothing to autocast from
        return "none"
    if model_width(model) < AUTO_BF16_MIN_WIDTH:
        return "none"
    kind = torch.device(device).type
    if kind == "cuda":
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "none"
    return "bf16" if kind == "cpu" and bf16_cpu_flags() else "none"


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
