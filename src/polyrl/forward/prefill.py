"""A prompt batch through a model's own (transformers) forward with its KV cache: each distinct prompt once,
left-padded, the cache indexed out to one row per input prompt.

Generation on a model polyrl's packed forward does not support (:class:`polyrl.policy.generation.TransformersBackend`)
and the shared-prompt log-probs of such a model (:func:`polyrl.forward.logprobs.sequence_logprobs`) start here.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import torch


def forward_args(model) -> dict:
    """Which keyword names this model's ``forward`` takes for the cache and for keeping only the last logits
    (they changed across transformers versions), and whether it takes ``position_ids``."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    params = inspect.signature(base.forward).parameters
    return {
        "cache": "cache" if "cache" in params else "past_key_values",
        "keep_last": next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None),
        "positions": "position_ids" in params,
    }


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``[N, max_len]`` ids and attention mask with each prompt right-aligned (its last token in the last column)."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        input_ids[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
        attention[i, width - len(p) :] = 1
    return input_ids, attention


@dataclass
class Prefill:
    """One forward over distinct prompts whose KV cache has been copied out to one row per input prompt."""

    logits: torch.Tensor
    """``[U, T, V]`` logits of the distinct prompts (``T`` is 1 when only the last position was kept)."""
    cache: object
    """The KV cache, row ``i`` holding input prompt ``i``'s prompt."""
    source: torch.Tensor
    """``[N]`` index of each input prompt's distinct prompt."""
    attention: torch.Tensor
    """``[U, P]`` left-padded attention mask of the distinct prompts."""
    positions: torch.Tensor
    """``[U, P]`` position ids of the distinct prompts."""


def prefill(
    model,
    unique: Sequence[Sequence[int]],
    source: Sequence[int],
    device: torch.device,
    pad_id: int = 0,
    last_logits_only: bool = False,
) -> Prefill | None:
    """Run each distinct prompt through ``model`` (its weights on ``device``) once, left-padded, with a KV cache,
    and index the cache out to one row per input prompt; None when the model takes no ``position_ids`` or its
    cache can't be indexed by row. Gradients flow through it when enabled."""
    args = forward_args(model)
    if not args["positions"]:
        return None
    input_ids, attention = (t.to(device) for t in left_pad(unique, pad_id))
    positions = (attention.cumsum(1) - 1).clamp(min=0)
    keep = {args["keep_last"]: 1} if last_logits_only and args["keep_last"] else {}
    out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True, **keep)
    cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
    if not hasattr(cache, "batch_select_indices"):
        return None
    index = torch.tensor(list(source), device=device)
    cache.batch_select_indices(index)
    return Prefill(out.logits, cache, index, attention, positions)
