"""The forward of a Hugging Face vision-language model (Idefics3/SmolVLM, Qwen2-VL, Qwen2.5-VL) on its own modules,
with the pictures its prompts carry: generation's prefill and decode, and the training forward.

Each prompt's pictures travel as ``uint8 [n, S, S, 3]`` pixels (:class:`~polyrl.forward.batch.ImageIds`, already at
the model's fixed input size); every forward turns them into the model's inputs from its saved preprocessor settings
(``pixel_values``, and ``image_grid_thw`` for Qwen2-VL) in the same way, so the prefill and the training forward see
the same numbers. Positions are always given explicitly: for Qwen2-VL the 3-D M-RoPE positions of the model's own
``get_rope_index`` over the attended tokens (left padding in the prefill, right padding in training: the same
positions), then one more per decoded token; for Idefics3 one more per attended token. The model's own state
(Qwen2-VL's ``rope_deltas``) is never relied on, so rows can be dropped from a decode and a training forward can run
after a generation.

The tokens that stand for pictures (and the family's other vision tokens) are never predicted: the LM head's
logits for them are held at :data:`BLOCKED_LOGIT` by a forward hook, in generation and training alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from polyrl.forward.decoder import PICTURES_ATTRIBUTE, picture_forward_of
from polyrl.forward.prefill import forward_args, left_pad

BLOCKED_LOGIT = -1e4
"""The logit of a token the model never predicts: its probability is 0 in every float type, and finite."""
QWEN_FAMILIES = ("qwen2_vl", "qwen2_5_vl")
FAMILIES = ("idefics3", *QWEN_FAMILIES)


@dataclass
class PictureForward:
    """How a vision-language model takes pictures on its own forward (set on the model by the policy loader)."""

    family: str
    """The model's ``model_type``: one of :data:`FAMILIES`."""
    image_processor: Any
    """What turns a list of ``uint8 [S, S, 3]`` pictures into the model's picture inputs (a dict of tensors):
    ``polyrl.policy.hf_pictures.PicturePreprocessing``."""
    image_token_id: int
    size: int
    """Side of every picture, in pixels (the prompt's image tokens per picture depend on it)."""

    @staticmethod
    def of(model) -> PictureForward | None:
        """The picture forward of ``model`` (PEFT-wrapped too), None for a model that is no such VLM."""
        return picture_forward_of(model)

    def attach(self, model, blocked: list[int]) -> None:
        """Make ``model`` take pictures this way, and never predict the ``blocked`` tokens."""
        setattr(model, PICTURES_ATTRIBUTE, self)
        head = model.get_output_embeddings()
        head.polyrl_blocked = torch.tensor(sorted(set(blocked)), dtype=torch.long)
        head.register_forward_hook(_block_tokens)

    def pixel_inputs(self, pixels: list[Tensor], device) -> dict:
        """The model's picture inputs for ``pixels`` (every picture of a batch, in the order of its image tokens)."""
        pictures = [im for p in pixels for im in p]
        if not pictures:
            return {}
        return {name: value.to(device) for name, value in self.image_processor(pictures).items()}

    def positions(self, model, ids: Tensor, attention: Tensor, inputs: dict) -> Tensor:
        """Position ids of ``ids [B, L]``: ``[3, B, L]`` M-RoPE positions for Qwen2-VL, ``[B, L]`` otherwise (0 at
        padding)."""
        if self.family not in QWEN_FAMILIES:
            return (attention.cumsum(1) - 1).clamp(min=0)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        types = (ids == self.image_token_id).int()
        positions, _ = base.model.get_rope_index(
            input_ids=ids,
            mm_token_type_ids=types,
            image_grid_thw=inputs.get("image_grid_thw"),
            attention_mask=attention,
        )
        return positions

    def inputs(self, model, ids: Tensor, attention: Tensor, pixels: list[Tensor]) -> dict:
        """Everything but the ids the model's forward takes for ``ids``/``attention`` and their pictures."""
        inputs = self.pixel_inputs(pixels, ids.device)
        inputs["position_ids"] = self.positions(model, ids, attention, inputs)
        return inputs


def _block_tokens(head, args, logits: Tensor) -> Tensor:
    """Forward hook of the LM head: the blocked tokens are never predicted."""
    index = head.polyrl_blocked
    if index.device != logits.device:
        index = head.polyrl_blocked = index.to(logits.device)
    return logits.index_fill(-1, index, BLOCKED_LOGIT)


def row_pixels(images) -> Tensor | None:
    """All pictures of a batch row (:data:`~polyrl.forward.batch.RowImages`): its prompt's, then its response's."""
    if images is None:
        return None
    parts = [p for p in (images[0], images[2]) if p is not None]
    return torch.cat(parts) if parts else None


def picture_hidden(pictures: PictureForward, model, batch) -> Tensor:
    """Last hidden states ``[N, L, hidden]`` of the language model over ``batch`` (right-padded, on its device)
    with every row's pictures."""
    host = batch.on_host()
    rows = host.images or [None] * len(host)
    pixels = [p for p in map(row_pixels, rows) if p is not None]
    inputs = pictures.inputs(model, batch.input_ids, batch.attention_mask, pixels)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    out = base.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False, **inputs)
    return out.last_hidden_state


class PictureDecode:
    """Sampling state of a chunk of prompts on a vision-language model's own forward: the distinct prompts
    prefilled left-padded with their pictures, the KV cache indexed out to one row per completion, then one forward
    per token at the next position of each row."""

    def __init__(self, model, cache, first_logits: Tensor, attention: Tensor, next_position: Tensor):
        self.model, self.cache, self.first_logits = model, cache, first_logits
        self.attention, self.next_position = attention, next_position
        self.cache_arg = forward_args(model)["cache"]

    @classmethod
    def of(cls, pictures: PictureForward, model, unique, source, pad_id: int, device) -> PictureDecode:
        ids, attention = (t.to(device) for t in left_pad(unique, pad_id))
        pixels = [p.pixels for p in unique if getattr(p, "pixels", None) is not None]
        inputs = pictures.inputs(model, ids, attention, pixels)
        keep = forward_args(model)["keep_last"]
        out = model(input_ids=ids, attention_mask=attention, use_cache=True, **inputs, **({keep: 1} if keep else {}))
        cache = getattr(out, "cache", None) or out.past_key_values
        index = torch.tensor(list(source), device=device)
        cache.batch_select_indices(index)
        last = inputs["position_ids"][..., -1:]  # the last prompt token is the last column (left padding)
        if last.dim() == 3:  # M-RoPE: the next text position is one past the largest of the three
            last = last.amax(0, keepdim=True).expand(last.shape[0], -1, -1)
        return cls(model, cache, out.logits[index, -1], attention[index], last[..., index, :] + 1)

    def step(self, tokens: Tensor) -> Tensor:
        self.attention = torch.cat([self.attention, self.attention.new_ones(len(tokens), 1)], 1)
        out = self.model(
            input_ids=tokens.unsqueeze(1),
            attention_mask=self.attention,
            position_ids=self.next_position,
            use_cache=True,
            **{self.cache_arg: self.cache},
        )
        self.next_position = self.next_position + 1
        return out.logits[:, -1]

    def select(self, rows: Tensor) -> None:
        self.attention, self.next_position = self.attention[rows], self.next_position[..., rows, :]
        self.cache.batch_select_indices(rows)
