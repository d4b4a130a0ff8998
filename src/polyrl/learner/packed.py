"""A padded :class:`~polyrl.learner.batch.TokenBatch` as packed tokens for polyrl's decoder forward.

The packed layout holds each distinct prompt once, then every row's continuation (response, and in multi-turn
episodes the environment's tokens between turns), all without padding. Two attention blocks cover it: the
prompts, each causal over itself, and the continuations, each reading its own prompt's tokens and, causally,
its own continuation. The hidden state that predicts token ``t + 1`` of a row is the prompt's last one for the
first continuation token and the previous continuation token's after that, so the prompt's forward (and its
backward) is done once per group, and no row computes a padded position in any linear layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from polyrl.learner.token_scores import scores_from_hidden
from polyrl.policy.decoder import AttentionBlock, Decoder, causal_block, packed_hidden
from polyrl.policy.generation import distinct


@dataclass
class PackedBatch:
    """Packed tokens, their attention blocks, and where each scored position goes in the padded layout."""

    ids: Tensor
    """``[T]`` token ids: distinct prompts, then each row's continuation."""
    positions: Tensor
    """``[T]`` position of each token in its row."""
    blocks: list[AttentionBlock]
    predictors: Tensor
    """``[M]`` packed index of the hidden state that predicts each scored token."""
    targets: Tensor
    """``[M]`` the scored tokens."""
    rows: Tensor
    """``[M]`` row of each scored token in the padded batch."""
    cols: Tensor
    """``[M]`` column of its score in the ``[N, width - 1]`` output (the position that predicts it)."""


def pack(batch, device=None, *, share_prompts: bool) -> PackedBatch:
    """The packed layout of ``batch`` (a ``TokenBatch``), its tensors made on ``device``. Rows split into prompt
    and continuation at ``batch.prompt_lengths`` (rows with equal prompts share one, unless ``share_prompts`` is
    off); without prompt lengths every row's first token is its prompt, so every later token is scored. The
    layout is planned from the host batch (:meth:`~polyrl.learner.batch.TokenBatch.on_host`)."""
    batch = batch.on_host()
    lengths = batch.attention_mask.sum(1).tolist()
    if min(lengths) < 1:
        raise ValueError("a TokenBatch row without tokens cannot be packed")
    ids = batch.input_ids.tolist()
    prompt_lengths = batch.prompt_lengths.tolist() if batch.prompt_lengths is not None else [1] * len(ids)
    # a row's first token is always context: nothing predicts it
    prompt_lengths = [min(max(p, 1), n) for p, n in zip(prompt_lengths, lengths)]
    prompts = [row[:p] for row, p in zip(ids, prompt_lengths)]
    unique, source = distinct(prompts) if share_prompts else (prompts, list(range(len(prompts))))
    p_len = [len(u) for u in unique]
    p_start = _starts(p_len, 0)
    r_len = [n - p for n, p in zip(lengths, prompt_lengths)]
    r_start = _starts(r_len, sum(p_len))
    flat = [t for u in unique for t in u] + [t for row, p, n in zip(ids, prompt_lengths, lengths) for t in row[p:n]]
    positions = [j for n in p_len for j in range(n)] + [p + j for p, r in zip(prompt_lengths, r_len) for j in range(r)]
    blocks = [causal_block(p_start, p_len, device)]
    if any(r_len):
        blocks.append(_continuation_block(p_start, p_len, source, r_start, r_len, device))
    predictors, targets, rows, cols = [], [], [], []
    for i, (p, r) in enumerate(zip(prompt_lengths, r_len)):
        u = source[i]
        predictors += [p_start[u] + p_len[u] - 1] + [r_start[i] + j for j in range(r - 1)] if r else []
        targets += ids[i][p : p + r]
        rows += [i] * r
        cols += range(p - 1, p - 1 + r)
    as_tensor = lambda values: torch.tensor(values, dtype=torch.long, device=device)
    return PackedBatch(
        as_tensor(flat), as_tensor(positions), blocks, *(as_tensor(v) for v in (predictors, targets, rows, cols))
    )


def _starts(lengths: list[int], offset: int) -> list[int]:
    out, at = [], offset
    for n in lengths:
        out.append(at)
        at += n
    return out


def _continuation_block(p_start, p_len, source, r_start, r_len, device) -> AttentionBlock:
    """Each row's continuation tokens as queries over ``[its prompt, padded to the longest | its continuation]``."""
    width_p, width_r = max(p_len), max(r_len)
    src = torch.tensor(source, device=device)
    prompt_start, prompt_len = torch.tensor(p_start, device=device)[src], torch.tensor(p_len, device=device)[src]
    start, length = torch.tensor(r_start, device=device), torch.tensor(r_len, device=device)
    pc, rc = torch.arange(width_p, device=device), torch.arange(width_r, device=device)
    prompt_ok = pc < prompt_len.unsqueeze(1)
    resp_ok = rc < length.unsqueeze(1)
    prompt_keys = torch.where(prompt_ok, prompt_start.unsqueeze(1) + pc, prompt_start.unsqueeze(1))
    queries = torch.where(resp_ok, start.unsqueeze(1) + rc, prompt_start.unsqueeze(1))
    causal = rc.unsqueeze(1) >= rc.unsqueeze(0)  # [Lq, Lr]
    # a padding query sees its prompt too (never no key at all); its output is dropped
    allowed = torch.cat(
        [prompt_ok.unsqueeze(1).expand(-1, width_r, -1), causal.unsqueeze(0) & resp_ok.unsqueeze(1)], dim=2
    )
    return AttentionBlock(queries, torch.cat([prompt_keys, queries], 1), allowed, resp_ok)


def packed_logprobs(
    dec: Decoder, batch, temperature: float, entropy: bool, entropy_grad: bool, share_prompts: bool
) -> tuple[Tensor, Tensor | None]:
    """``sequence_logprobs`` on the packed forward: ``[N, width - 1]`` log-probs (and entropies) on
    ``batch.device``, 0 at prompt and padding positions."""
    packed = pack(batch, batch.device, share_prompts=share_prompts)
    hidden = packed_hidden(dec, packed.ids, packed.positions, packed.blocks)
    logp, ent = scores_from_hidden(
        hidden[packed.predictors], packed.targets, dec.head, temperature, entropy, entropy_grad=entropy_grad
    )
    shape = (batch.input_ids.shape[0], batch.input_ids.shape[1] - 1)

    def spread(values: Tensor) -> Tensor:
        return values.new_zeros(shape).index_put((packed.rows, packed.cols), values)

    return spread(logp), spread(ent) if ent is not None else None
