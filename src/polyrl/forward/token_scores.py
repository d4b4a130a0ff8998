"""Log-probs and entropies of chosen tokens from final hidden states, without full-vocabulary logits.

A causal LM's ``forward`` returns ``[N, L, V]`` logits: with a 152k-token vocabulary and 16 × 1024 tokens
that is 10 GB in float32 before the log-softmax, more than the 0.5B model itself. Only two numbers per
position are needed (the chosen token's log-prob and the entropy), so the backbone's last hidden states are
projected through ``lm_head`` a chunk of positions at a time and each chunk's logits are reduced at once.
With gradients, each chunk runs under activation checkpointing: the backward recomputes one chunk's logits
at a time instead of keeping all of them (the same trick as Liger's fused linear cross-entropy, Hsu et al.
2024, without a custom kernel), for one extra ``lm_head`` matmul per chunk.

From logits, a chunk of rows at a time and at least in float32: :func:`token_logprobs`, :func:`entropy_from_logits`,
and both in one pass (:func:`chosen_logprobs`, what each hidden-state chunk uses).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from polyrl.errors import UserError

# Rows of [N*T, V] logits processed at once: bounds the float32 copy to chunk_size * V floats
# (1024 rows * 152k vocab * 4 bytes ~ 0.6 GB) instead of N * T * V.
DEFAULT_CHUNK_ROWS = 1024


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


def token_logprobs(logits: Tensor, tokens: Tensor, temperature: float, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Tensor:
    """``log softmax(logits / temperature)[token]`` per position: ``Tensor[N, T]``, at least float32.

    ``logits[:, t]`` must already be the prediction *for* ``tokens[:, t]`` (shifted by the caller).
    Computed as ``logit[token] - logsumexp(logits)`` over chunks of rows so the full [N, T, V]
    log-softmax is never materialized. ``temperature`` must match the one used for sampling, or the
    ratio to the behaviour log-probs is biased (so it has no default: the caller passes the sampling one).
    """
    flat_tokens = tokens.reshape(-1, 1)
    pieces = [
        chunk.gather(-1, flat_tokens[start : start + chunk.shape[0]]).squeeze(-1) - torch.logsumexp(chunk, dim=-1)
        for start, chunk in _row_chunks(logits, temperature, chunk_rows)
    ]
    return torch.cat(pieces).reshape(tokens.shape)


def entropy_from_logits(logits: Tensor, temperature: float, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Tensor:
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


class _ChosenLogprob(torch.autograd.Function):
    """``log softmax(z)[target]`` and the entropy of ``softmax(z)`` per row of ``z = logits / temperature`` (in
    float32), from one exponential of the logits kept for the backward: the backward of the log-prob is
    ``g · (onehot(target) - softmax(z)) / temperature``; the entropy is a value only (no gradient)."""

    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor, temperature: float, entropy: bool):
        z = logits.to(torch.promote_types(logits.dtype, torch.float32))
        if temperature != 1.0:
            z = z / temperature
        top = z.amax(-1, keepdim=True).clamp(min=torch.finfo(z.dtype).min)  # a row of -inf stays finite here
        weights = (z - top).exp_()  # softmax numerators
        total = weights.sum(-1, keepdim=True)
        lse = top + total.log()
        logp = (z.gather(-1, targets.unsqueeze(-1)) - lse).squeeze(-1)
        ent = None
        if entropy:
            # sum_v p_v z_v as a row-wise dot product (no [M, V] temporary)
            dot = torch.bmm(weights.unsqueeze(1), z.unsqueeze(2)).view(-1)
            broken = torch.isnan(dot)  # a -inf logit (a masked-out token): p = 0, and it adds 0, not 0 * -inf
            if bool(broken.any()):
                rows = z[broken]
                dot[broken] = (weights[broken] * torch.where(rows > -torch.inf, rows, 0.0)).sum(-1)
            ent = lse.squeeze(-1) - dot / total.squeeze(-1)
        ctx.save_for_backward(weights, total, targets)
        ctx.temperature, ctx.dtype = temperature, logits.dtype
        ctx.mark_non_differentiable(*([ent] if ent is not None else []))
        return logp, ent

    @staticmethod
    def backward(ctx, grad_logp: Tensor, _grad_ent):
        weights, total, targets = ctx.saved_tensors
        g = grad_logp.unsqueeze(-1)
        grad = weights * (-g / total)
        grad.scatter_add_(-1, targets.unsqueeze(-1), g)
        if ctx.temperature != 1.0:
            grad = grad / ctx.temperature
        return grad.to(ctx.dtype), None, None, None


def chosen_logprobs(
    logits: Tensor, targets: Tensor, temperature: float, entropy: bool = False
) -> tuple[Tensor, Tensor | None]:
    """``(token_logprobs(logits, targets, temperature), entropy_from_logits(logits, temperature) or None)``
    for ``logits [M, V]`` and ``targets [M]`` in one pass over the logits (the same numbers, up to float
    rounding); the entropy carries no gradient. Used on the update's hidden-state chunks, where each ``[M, V]``
    pass costs as much as a large matmul."""
    if temperature <= 0:
        raise UserError(f"temperature must be > 0, got {temperature}")
    return _ChosenLogprob.apply(logits, targets, temperature, entropy)


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
