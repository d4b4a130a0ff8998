"""Padded token batches: what every forward of a policy takes, built on the host and moved to the device with one
``.to()``, split there into micro-batches of a token budget; and the distinct prompts rows share.

A prompt of a vision-language policy is an :class:`ImageIds`: its token ids hold a fixed number of image
placeholder tokens per picture, and it carries the pictures' pixels, which the forward's embedding puts in the
placeholders' place (``forward/decoder.py``). Two prompts are the same only with the same ids *and* pixels. An
episode's response is one too when an environment's observation showed a picture (its placeholders are
environment tokens, never trained on)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


class ImageIds(list):
    """Token ids (a ``list`` of ints, usable wherever ids are) with the pictures its image placeholder tokens stand
    for: ``pixels [images, S, S, 3]`` uint8 (the policy's input size), in placeholder order, and ``images_key``, a
    digest of those pixels that :func:`distinct` keys on beside the ids. Slicing or ``+`` gives plain ids (only the
    whole sequence carries its pictures): :func:`join` concatenates two with their pictures."""

    def __init__(self, ids, pixels: torch.Tensor, images_key: bytes):
        super().__init__(ids)
        self.pixels = pixels
        self.images_key = images_key

    def copy(self) -> ImageIds:
        return ImageIds(self, self.pixels, self.images_key)

    def __reduce__(self):  # pickles (Ray, multiprocessing) with its pictures
        return ImageIds, (list(self), self.pixels, self.images_key)


def prompt_images(prompt) -> tuple[torch.Tensor, bytes] | None:
    """``(pixels, images_key)`` of a prompt that carries pictures, None for plain token ids."""
    return (prompt.pixels, prompt.images_key) if isinstance(prompt, ImageIds) else None


def join(first: Sequence[int], second: Sequence[int]) -> list[int]:
    """``first + second`` with the pictures of both, in order (plain ids when neither has any)."""
    ids = list(first) + list(second)
    parts = [p for p in (first, second) if isinstance(p, ImageIds)]
    if not parts:
        return ids
    if len(parts) == 1:
        return ImageIds(ids, parts[0].pixels, parts[0].images_key)
    key = hashlib.sha256(parts[0].images_key + parts[1].images_key).digest()
    return ImageIds(ids, torch.cat([parts[0].pixels, parts[1].pixels]), key)


RowImages = tuple[torch.Tensor | None, bytes | None, torch.Tensor | None]
"""A row's pictures: its prompt's pixels and their key, and its response's pixels (an episode's observations)."""


@dataclass
class TokenBatch:
    """Right-padded prompt+response sequences. ``loss_mask[i, t]`` is 1 where token ``t+1`` of row ``i`` is
    a policy token (what the loss trains on, and what the harness scores); prompt, environment and padding tokens
    are 0.

    Batches are made on the host (:func:`collate`), split there into micro-batches (:meth:`select`), and each
    micro-batch goes to the training device with one :meth:`to`. A moved batch keeps its host original
    (:meth:`on_host`): the packed forward plans its layout from host lists without copying the ids back."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    prompt_lengths: torch.Tensor | None = None
    """Length of each row's prompt (the part that rows answering the same problem share), when known."""
    images: list[RowImages | None] | None = None
    """Per row, the pictures of its prompt and of its response (:data:`RowImages`) or None; None for a batch of text
    only. The pixels stay on the host until the packed forward lays them out."""
    _host: TokenBatch | None = field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    @property
    def device(self) -> torch.device:
        return self.input_ids.device

    def to(self, device: torch.device | str) -> TokenBatch:
        """This batch on ``device`` (itself when it is there already)."""
        device = torch.device(device)
        if self.device == device:
            return self
        lengths = self.prompt_lengths.to(device) if self.prompt_lengths is not None else None
        moved = TokenBatch(
            self.input_ids.to(device), self.attention_mask.to(device), self.loss_mask.to(device), lengths, self.images
        )
        moved._host = self if self.device.type == "cpu" else self._host
        return moved

    def on_host(self) -> TokenBatch:
        """The batch on the CPU: itself, the host batch it was moved from, or a copy."""
        if self.device.type == "cpu":
            return self
        return self._host if self._host is not None else self.to("cpu")

    def select(self, index: torch.Tensor | slice) -> TokenBatch:
        """The rows ``index`` (on this batch's device), without the columns that are padding in all of them."""
        b = TokenBatch(self.input_ids[index], self.attention_mask[index], self.loss_mask[index])
        # trim columns that are padding in every selected row
        width = int(b.attention_mask.sum(1).max()) if len(b) else 1
        lengths = self.prompt_lengths[index] if self.prompt_lengths is not None else None
        images = None
        if self.images is not None:
            rows = range(len(self))[index] if isinstance(index, slice) else torch.arange(len(self))[index].tolist()
            images = [self.images[i] for i in ([rows] if isinstance(rows, int) else rows)]
        trimmed = (b.input_ids[:, :width], b.attention_mask[:, :width], b.loss_mask[:, : width - 1])
        return TokenBatch(*trimmed, lengths, images)

    def row_chunks(self, budget: int | None, rows: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Consecutive indices of ``rows`` (default: every row) in pieces whose padded size (rows × longest
        sequence) stays within ``budget`` tokens (a longer row goes alone); ``None``: all of them at once."""
        rows = torch.arange(len(self)) if rows is None else rows
        if budget is None or len(rows) == 0:
            return [rows]
        return pack_rows(rows, self.attention_mask.sum(1), budget)

    @property
    def num_policy_tokens(self) -> int:
        return int(self.loss_mask.sum())


def pack_rows(order: torch.Tensor, lengths: torch.Tensor, budget: int) -> list[torch.Tensor]:
    """Consecutive pieces of the row indices ``order`` whose padded size (rows × longest sequence, by
    ``lengths[row]``) stays within ``budget`` tokens; a row longer than the budget goes alone. The one
    micro-batch packing of SFT, the critic and the policy update."""
    pieces, start, longest = [], 0, 0
    for k in range(len(order)):
        length = int(lengths[order[k]])
        if k > start and (k - start + 1) * max(longest, length) > budget:
            pieces.append(order[start:k])
            start, longest = k, 0
        longest = max(longest, length)
    if start < len(order):
        pieces.append(order[start:])
    return pieces


def length_ordered(rows: torch.Tensor, lengths: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """``rows`` with each group's rows together (within a group in their given order) and the groups sorted by
    their longest row (ties: by group id): packed in that order by :func:`pack_rows`, every micro-batch holds
    rows of similar length, so little of it is padding (length-bucketed micro-batches), and a group's rows
    still share their prompt's forward."""
    if len(rows) == 0:
        return rows
    groups = group_ids[rows]
    count = int(groups.max()) + 1
    longest = torch.zeros(count, dtype=lengths.dtype).scatter_reduce(0, groups, lengths[rows], "amax")
    return rows[torch.argsort(longest[groups] * count + groups, stable=True)]


def padding_share(pieces: list[torch.Tensor], lengths: torch.Tensor) -> float:
    """Share of the padded tokens (rows × longest row, summed over ``pieces``) that are padding."""
    padded = sum(len(p) * int(lengths[p].max()) for p in pieces if len(p))
    return 1 - sum(int(lengths[p].sum()) for p in pieces) / padded if padded else 0.0


def collate(
    sequences: list[tuple[list[int], list[int]]], pad_id: int, policy_masks: list[list[int]] | None = None
) -> TokenBatch:
    """Build a batch from ``(prompt_ids, response_ids)`` pairs.

    ``policy_masks[i]`` (same length as response i) marks which response tokens the policy produced;
    by default all of them (single-turn). Multi-turn responses interleave environment tokens with 0.
    A prompt or response that is an :class:`ImageIds` gives its row its pictures (:attr:`TokenBatch.images`); their
    placeholder tokens, prompt or environment tokens, are never trained on.
    """
    width = max(len(p) + len(r) for p, r in sequences)
    n = len(sequences)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    loss_mask = torch.zeros((n, width - 1), dtype=torch.float32)
    for i, (p, r) in enumerate(sequences):
        ids = p + r
        input_ids[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention[i, : len(ids)] = 1
        m = policy_masks[i] if policy_masks is not None else [1] * len(r)
        # target position t predicts token t+1: response token j sits at len(p)+j, predicted from len(p)+j-1
        loss_mask[i, len(p) - 1 : len(p) - 1 + len(r)] = torch.tensor(m, dtype=torch.float32)
    images = [_row_images(p, r) for p, r in sequences]
    lengths = torch.tensor([len(p) for p, _ in sequences])
    return TokenBatch(input_ids, attention, loss_mask, lengths, images if any(images) else None)


def _row_images(prompt, response) -> RowImages | None:
    if not isinstance(prompt, ImageIds) and not isinstance(response, ImageIds):
        return None
    shown = prompt_images(prompt) or (None, None)
    return (*shown, response.pixels if isinstance(response, ImageIds) else None)


def distinct(prompts: Sequence[Sequence[int]], keys: Sequence | None = None) -> tuple[list[Sequence[int]], list[int]]:
    """The distinct prompts in first-seen order (each the first object seen), and for each input prompt the index
    of its distinct one. Two prompts are one when their ids are equal and so are their pictures: ``keys[i]`` when
    given, else an :class:`ImageIds`'s ``images_key`` (a text prompt's key is None)."""
    seen: dict[tuple, int] = {}
    unique: list[Sequence[int]] = []
    source = []
    for i, p in enumerate(prompts):
        key = (tuple(p), keys[i] if keys is not None else getattr(p, "images_key", None))
        index = seen.setdefault(key, len(unique))
        if index == len(unique):
            unique.append(p)
        source.append(index)
    return unique, source
