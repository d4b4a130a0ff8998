"""A chosen token's log-prob and the entropy of the next-token distribution, from logits.

At least float32 whatever the logits' dtype, at the sampling temperature, a chunk of rows at a time (the full
``[N, T, V]`` log-softmax is never materialized); :func:`chosen_logprobs` takes both numbers in one pass over the
logits, which is what the update's hidden-state chunks use (:mod:`polyrl.forward.token_scores`).
"""

from __future__ import annotations

import torch
from torch import Tensor

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
