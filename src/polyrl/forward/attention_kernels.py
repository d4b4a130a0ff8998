"""Attention of the packed forward on CUDA without a dense score matrix.

On the CPU the packed forward (``forward/decoder.py``: :func:`~polyrl.forward.decoder.attention`) computes
transformers' eager formula on each gathered block, keeping the ``[rows, heads, queries, keys]`` scores for the
backward, and torch's SDPA above 2^24 of them. On CUDA that SDPA call lands on the math kernel — flash attention
takes no mask and the memory-efficient kernel no grouped-query heads — which materialises the scores too: about
377 MB per layer at the 1.5B memory check's shape (issue #42). Here:

- **FlexAttention** (``torch.nn.attention.flex_attention``, compiled once per process) over the block, its
  ``allowed`` mask turned into a block mask (tiles of 128 × 128 that are wholly masked are skipped, the rest masked
  inside the kernel); grouped-query heads are read in place (``enable_gqa``); no score matrix is kept, in the
  forward or the backward.
- Where FlexAttention cannot run (no Triton, a compile error: warned once, counted in :data:`FALLBACKS`), SDPA with
  the key/value heads repeated to the query heads, which the memory-efficient kernel takes (it keeps no scores
  either; the repeated keys and values cost heads/KV-heads times theirs).

Inputs under autocast are cast to its dtype first (the eager formula's matmuls run there too). FlexAttention has no
backward on the CPU; its forward runs there unfused, which is how the tests check it against the eager formula
(``tests/forward/test_attention_kernels.py``).
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor
from torch.nn import functional as F

FALLBACKS: list[str] = []
"""Why FlexAttention did not run (once per process): then every call takes the SDPA path."""

_compiled = None


def _flex():
    """FlexAttention: compiled on CUDA (what keeps it from materialising scores), as it is on the CPU."""
    global _compiled
    from torch.nn.attention.flex_attention import flex_attention

    if not torch.cuda.is_available():
        return flex_attention
    if _compiled is None:
        _compiled = torch.compile(flex_attention)
    return _compiled


def block_mask(allowed: Tensor):
    """FlexAttention's block mask of ``allowed [S, Lq, Lk]`` (made once per attention block and forward: every
    layer reads the same)."""
    from torch.nn.attention.flex_attention import create_block_mask

    def mask_mod(b, h, q, kv):
        return allowed[b, q, kv]

    rows, queries, keys = allowed.shape
    return create_block_mask(mask_mod, rows, None, queries, keys, device=allowed.device)


def device_attention(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, scale: float, mask=None) -> Tensor:
    """Attention of ``q [S, Lq, H, D]`` over ``k, v [S, Lk, KV, D]`` where ``allowed [S, Lq, Lk]``; ``[S, Lq, H, D]``.
    ``mask``: :func:`block_mask` of ``allowed``, made by the caller once for all layers."""
    kind = "cuda" if q.is_cuda else "cpu"
    dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else q.dtype
    q, k, v = (t.to(dtype).transpose(1, 2) for t in (q, k, v))  # [S, heads, L, D]
    if not FALLBACKS:
        try:
            mask = mask if mask is not None else block_mask(allowed)
            out = _flex()(q, k, v, block_mask=mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1])
            return out.transpose(1, 2)
        except Exception as exc:  # no Triton, a compile error: the memory-efficient kernel from here on
            FALLBACKS.append(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300])
            warnings.warn(f"FlexAttention failed ({FALLBACKS[-1]}); attention takes SDPA from here on", stacklevel=2)
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed.unsqueeze(1), scale=scale)
    return out.transpose(1, 2)
