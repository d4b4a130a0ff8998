"""Padded token batches for training, and per-token log-probs of a model on them."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from polyrl.algos import entropy_from_logits, token_logprobs


@dataclass
class TokenBatch:
    """Right-padded prompt+response sequences. ``loss_mask[i, t]`` is 1 where token ``t+1`` of row ``i`` is
    a policy token (what the loss trains on); prompt, environment and padding tokens are 0."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, index: torch.Tensor | slice) -> "TokenBatch":
        b = TokenBatch(self.input_ids[index], self.attention_mask[index], self.loss_mask[index])
        # trim columns that are padding in every selected row
        width = int(b.attention_mask.sum(1).max()) if len(b) else 1
        return TokenBatch(b.input_ids[:, :width], b.attention_mask[:, :width], b.loss_mask[:, : width - 1])

    @property
    def num_policy_tokens(self) -> int:
        return int(self.loss_mask.sum())


def collate(sequences: list[tuple[list[int], list[int]]], pad_id: int, policy_masks: list[list[int]] | None = None) -> TokenBatch:
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
    return TokenBatch(input_ids, attention, loss_mask)


def sequence_logprobs(model, batch: TokenBatch, temperature: float = 1.0, entropy: bool = False, entropy_grad: bool = False):
    """Per-token log-probs ``[N, L-1]`` of each next token (and the entropies if asked; detached unless
    ``entropy_grad``, for an entropy bonus)."""
    device = next(model.parameters()).device
    out = model(input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device), use_cache=False)
    logits = out.logits[:, :-1].float()
    targets = batch.input_ids[:, 1:].to(device)
    logp = token_logprobs(logits, targets, temperature=temperature)
    ent = entropy_from_logits(logits if entropy_grad else logits.detach(), temperature=temperature) if entropy else None
    return logp, ent
