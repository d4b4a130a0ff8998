"""Padded token batches for training, and per-token log-probs of a model on them."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from polyrl.algos import entropy_from_logits, token_logprobs
from polyrl.policy.decoder import Decoder
from polyrl.policy.generation import distinct, forward_args, prefill
from polyrl.policy.precision import forward_precision
from polyrl.rollout.packed import packed_logprobs
from polyrl.rollout.token_scores import scores_from_hidden, split_lm


@dataclass
class TokenBatch:
    """Right-padded prompt+response sequences. ``loss_mask[i, t]`` is 1 where token ``t+1`` of row ``i`` is
    a policy token (what the loss trains on); prompt, environment and padding tokens are 0."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    prompt_lengths: torch.Tensor | None = None
    """Length of each row's prompt (the part that rows answering the same problem share), when known."""

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, index: torch.Tensor | slice) -> TokenBatch:
        b = TokenBatch(self.input_ids[index], self.attention_mask[index], self.loss_mask[index])
        # trim columns that are padding in every selected row
        width = int(b.attention_mask.sum(1).max()) if len(b) else 1
        lengths = self.prompt_lengths[index] if self.prompt_lengths is not None else None
        return TokenBatch(b.input_ids[:, :width], b.attention_mask[:, :width], b.loss_mask[:, : width - 1], lengths)

    def row_chunks(self, budget: int | None) -> list[torch.Tensor]:
        """Consecutive row indices in pieces whose padded size (rows × longest sequence) stays within
        ``budget`` tokens (a longer row goes alone); ``None``: all rows at once."""
        rows = torch.arange(len(self))
        if budget is None or len(self) == 0:
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
    return TokenBatch(input_ids, attention, loss_mask, torch.tensor([len(p) for p, _ in sequences]))


def sequence_logprobs(
    model,
    batch: TokenBatch,
    temperature: float = 1.0,
    entropy: bool = False,
    entropy_grad: bool = False,
    share_prompts: bool = True,
):
    """Per-token log-probs ``[N, L-1]`` of each next token (and the entropies if asked; detached unless
    ``entropy_grad``, for an entropy bonus); 0 at padding.

    When rows share prompts (the G completions of a group) and ``share_prompts`` is on, each distinct prompt
    goes through the model once and its KV cache is reused by every row that continues it: the same numbers
    as one forward over the padded batch (up to float rounding), for a fraction of the compute (prompt
    positions are then 0). Full-vocabulary logits are never materialized for the batch: the trunk's hidden
    states go through ``lm_head`` a chunk at a time (:mod:`polyrl.rollout.token_scores`). The forward runs
    under the model's autocast setting (:func:`polyrl.policy.precision.forward_precision`).
    """
    with forward_precision(model):
        dec = Decoder.of(model)
        if dec is not None and dec.fits(batch.input_ids.shape[1]) and len(batch):
            return packed_logprobs(dec, batch, temperature, entropy, entropy_grad, share_prompts)
        if share_prompts and batch.prompt_lengths is not None and not _checkpointing(model):
            shared = _shared_prompt_logprobs(model, batch, temperature, entropy, entropy_grad)
            if shared is not None:
                return shared
        return _plain_logprobs(model, batch, temperature, entropy, entropy_grad)


def _plain_logprobs(model, batch: TokenBatch, temperature: float, entropy: bool, entropy_grad: bool):
    """One forward over the padded batch; scores at every real target position."""
    device = next(model.parameters()).device
    ids, attention = batch.input_ids.to(device), batch.attention_mask.to(device)
    split = split_lm(model)
    if split is None:  # a model whose logits are not lm_head(hidden): its own forward, full logits
        logits = model(input_ids=ids, attention_mask=attention, use_cache=False).logits[:, :-1]
        logp = token_logprobs(logits, ids[:, 1:], temperature=temperature)
        logits = logits if entropy_grad else logits.detach()
        return logp, entropy_from_logits(logits, temperature=temperature) if entropy else None
    hidden = split.backbone(input_ids=ids, attention_mask=attention, use_cache=False).last_hidden_state
    keep = attention[:, 1:].bool()
    logp, ent = scores_from_hidden(
        hidden[:, :-1][keep], ids[:, 1:][keep], split.head, temperature, entropy, entropy_grad=entropy_grad
    )
    return _unflatten(logp, keep), _unflatten(ent, keep) if ent is not None else None


def _unflatten(values: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Scores of the kept positions back to ``keep``'s shape, 0 elsewhere."""
    return values.new_zeros(keep.shape).masked_scatter(keep, values)


def _checkpointing(model) -> bool:
    """Activation checkpointing recomputes layers without a cache, so a backward pass can't reuse a shared
    prompt's KV cache: under checkpointing, forwards that build a graph take the plain path (checkpointing
    wins); no-grad passes (old and reference log-probs) still share prompts."""
    if not torch.is_grad_enabled():
        return False
    model = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # renamed in transformers 5
        if hasattr(type(model), name):
            return bool(getattr(model, name))
    return False


def _shared_prompt_logprobs(model, batch: TokenBatch, temperature: float, entropy: bool, entropy_grad: bool):
    """``sequence_logprobs`` with one forward per distinct prompt, or None when too few rows share one (or
    the model's cache can't be indexed by row, or its logits are not a projection of the trunk)."""
    split = split_lm(model)
    if split is None:
        return None
    rows = [row[:n] for row, n in zip(batch.input_ids.tolist(), batch.prompt_lengths.tolist())]
    unique, source_list = distinct(rows)
    if len(unique) > 0.75 * len(rows):
        return None
    pre = prefill(model, unique, source_list, last_logits_only=True)
    if pre is None:
        return None
    device = pre.source.device
    n_rows, width = batch.input_ids.shape
    source, prompt_mask = pre.source, pre.attention
    # the continuations (responses), right-padded
    lengths_t = batch.prompt_lengths.to(device)
    total = batch.attention_mask.sum(1).to(device)
    r_width = int((total - lengths_t).max())
    cols = torch.arange(r_width, device=device)
    gather_cols = (lengths_t.unsqueeze(1) + cols).clamp(max=width - 1)
    resp_mask = (cols < (total - lengths_t).unsqueeze(1)).long()
    resp_ids = batch.input_ids.to(device).gather(1, gather_cols) * resp_mask
    # each response's first token is predicted by its prompt's last position (one [N, V] row of logits)
    first_logits = pre.logits[source, -1]
    logp = token_logprobs(first_logits, resp_ids[:, 0], temperature=temperature).unsqueeze(1)
    ent = None
    if entropy:
        ent = entropy_from_logits(first_logits if entropy_grad else first_logits.detach(), temperature=temperature)
        ent = ent.unsqueeze(1)
    if r_width > 1:
        hidden = split.backbone(
            input_ids=resp_ids[:, :-1],
            attention_mask=torch.cat([prompt_mask[source], resp_mask[:, :-1]], 1),
            position_ids=lengths_t.unsqueeze(1) + cols[:-1],
            use_cache=True,
            **{forward_args(split.backbone)["cache"]: pre.cache},
        ).last_hidden_state
        keep = resp_mask[:, 1:].bool()
        rest, rest_ent = scores_from_hidden(
            hidden[keep], resp_ids[:, 1:][keep], split.head, temperature, entropy, entropy_grad=entropy_grad
        )
        logp = torch.cat([logp, _unflatten(rest, keep)], 1)
        ent = torch.cat([ent, _unflatten(rest_ent, keep)], 1) if entropy else None

    def scatter(values: torch.Tensor) -> torch.Tensor:
        """Response positions back to the padded layout: token j of row i is predicted at column len(p_i)-1+j."""
        target = (lengths_t - 1).unsqueeze(1) + cols
        full = values.new_zeros(n_rows, width - 1 + r_width)
        full = full.scatter(1, target, values * resp_mask)
        return full[:, : width - 1]

    return scatter(logp), scatter(ent) if ent is not None else None
