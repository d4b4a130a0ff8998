"""Log-probs and entropies of chosen tokens from final hidden states, without full-vocabulary logits.

A causal LM's ``forward`` returns ``[N, L, V]`` logits: with a 152k-token vocabulary and 16 × 1024 tokens
that is 10 GB in float32 before the log-softmax, more than the 0.5B model itself. Only two numbers per
position are needed (the chosen token's log-prob and the entropy), so the backbone's last hidden states are
projected through ``lm_head`` a chunk of positions at a time and each chunk's logits are reduced at once.
With gradients, each chunk runs under activation checkpointing: the backward recomputes one chunk's logits
at a time instead of keeping all of them (the same trick as Liger's fused linear cross-entropy, Hsu et al.
2024, without a custom kernel), for one extra ``lm_head`` matmul per chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from polyrl.forward.logits import chosen_logprobs, entropy_from_logits, token_logprobs

LOGIT_CHUNK_BYTES = 256 * 2**20
"""Float32 logits held at once per chunk (256 MiB: ~440 positions of a 152k vocabulary; a small vocabulary
fits whole batches in one chunk, which then runs without recomputation)."""

# Configs whose logits are not ``lm_head(hidden)`` (Gemma 2 soft-capping, Cohere's logit scale): the hidden-state
# path would give different numbers, so those models take their own forward.
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


@dataclass(frozen=True)
class SplitLM:
    """A causal LM as its decoder trunk (ids → last hidden states) and its output projection."""

    backbone: nn.Module
    head: nn.Module


def split_lm(model) -> SplitLM | None:
    """The trunk and ``lm_head`` of a Hugging Face causal LM (PEFT-wrapped too: the adapters live inside the
    modules, so the trunk runs them and ``disable_adapter`` still applies), or None for a model whose logits
    are not a plain projection of the trunk's output."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not (hasattr(base, "get_decoder") and hasattr(base, "get_output_embeddings")) or _fully_sharded(base):
        return None
    head = base.get_output_embeddings()
    backbone = base.get_decoder()
    config = getattr(base, "config", None)
    if head is None or backbone is base or not isinstance(getattr(head, "weight", None), Tensor):
        return None
    if any(getattr(config, name, None) not in (None, 1, 1.0) for name in _LOGIT_TRANSFORMS):
        return None
    return SplitLM(backbone, head)


def _fully_sharded(model) -> bool:
    """FSDP2 gathers the root's parameters (embeddings, ``lm_head``) in the root's own forward hook: calling the
    trunk and the head separately would skip it, so a sharded model takes its own forward."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        return False
    return isinstance(model, FSDPModule)


def chunk_positions(vocab_size: int, chunk_bytes: int | None = None) -> int:
    """How many positions' float32 logits fit in ``chunk_bytes`` (default :data:`LOGIT_CHUNK_BYTES`)."""
    return max(1, (chunk_bytes or LOGIT_CHUNK_BYTES) // (4 * vocab_size))


def _chunk_scores(hidden: Tensor, targets: Tensor, head: nn.Module, temperature: float, entropy: str):
    logits = head(hidden)
    if entropy != "grad":  # one pass over the logits for both (the entropy is a value only)
        return chosen_logprobs(logits, targets, temperature, entropy == "value")
    logp = token_logprobs(logits, targets, temperature, chunk_rows=len(targets))
    return logp, entropy_from_logits(logits, temperature, chunk_rows=max(1, len(targets) // 4))


def scores_from_hidden(
    hidden: Tensor,
    targets: Tensor,
    head: nn.Module,
    temperature: float,
    entropy: bool = False,
    chunk_bytes: int | None = None,
    entropy_grad: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """``(log p(target), entropy or None)`` per row of ``hidden [M, H]`` (float32, ``[M]``), with
    ``p = softmax(head(hidden) / temperature)``: the numbers of ``token_logprobs`` and ``entropy_from_logits``
    on the full logits, computed a chunk of rows at a time. Under autograd every chunk is checkpointed, so
    the backward holds one chunk's logits at a time; the entropy is differentiable only with
    ``entropy_grad`` (an entropy bonus), otherwise detached."""
    step = chunk_positions(head.weight.shape[0], chunk_bytes)
    grad = torch.is_grad_enabled() and (hidden.requires_grad or any(p.requires_grad for p in head.parameters()))
    recompute = grad and len(hidden) > step
    pieces = []
    for start in range(0, len(hidden), step):
        mode = ("grad" if entropy_grad else "value") if entropy else "none"
        args = (hidden[start : start + step], targets[start : start + step], head, temperature, mode)
        pieces.append(checkpoint(_chunk_scores, *args, use_reentrant=False) if recompute else _chunk_scores(*args))
    logp = torch.cat([p[0] for p in pieces]) if pieces else hidden.new_zeros(0, dtype=torch.float32)
    ent = (torch.cat([p[1] for p in pieces]) if pieces else torch.zeros_like(logp)) if entropy else None
    return logp, ent
