"""The supervised step: next-token cross-entropy on reference responses, one function for every placement."""

from __future__ import annotations

import torch

from polyrl.forward.batch import collate
from polyrl.forward.logprobs import sequence_logprobs
from polyrl.learner.ranks import ONE_PROCESS, Ranks, idle_pass
from polyrl.optim import clip_and_step

Sequence = tuple[list[int], list[int]] | tuple[list[int], list[int], list[int]]
"""``(prompt_ids, response_ids)``, or with a policy mask for multi-turn references (environment tokens 0)."""

SFT_MAX_GRAD_NORM = 1.0
SFT_WEIGHT_DECAY = 0.0
"""AdamW weight decay of SFT steps (the warm start has no config field for it; ``rl.weight_decay`` is RL's)."""


def sft_step(
    model,
    optimizer,
    parameters: list[torch.Tensor],
    pad_id: int,
    sequences: list[Sequence],
    micro_batch_tokens: int | None,
    device: torch.device,
    ranks: Ranks = ONE_PROCESS,
) -> float | None:
    """One optimizer step of next-token cross-entropy on the responses' policy tokens of ``sequences``; the loss,
    or None when the step was skipped (non-finite loss or gradient).

    The batch is built on the host and runs in micro-batches of at most ``micro_batch_tokens`` padded tokens (all
    at once with None), each moved to ``device`` (where the model is) and normalized by the whole batch's token
    count, gradients accumulated: the gradient of the unsplit batch. Across ranks (``ranks``, FSDP) each rank
    takes its share of the rows, every rank as many passes (idle ones where it has fewer), FSDP sums the
    gradients and the loss is the whole batch's; in one process the share is every row."""
    masks = [s[2] if len(s) == 3 else [1] * len(s[1]) for s in sequences]
    batch = collate([s[:2] for s in sequences], pad_id, masks)
    total_tokens = batch.loss_mask.sum().clamp(min=1)  # a 0-d host tensor: a scalar to every device
    rows = ranks.mine(torch.arange(len(batch)))
    pieces = ranks.lockstep(p for p in batch.row_chunks(micro_batch_tokens, rows) if len(p))
    optimizer.zero_grad(set_to_none=True)
    local = torch.zeros(())  # a 0-d host tensor: the first sum moves it to the loss's device
    for piece in pieces:
        if piece is None:  # another rank has one more micro-batch: keep FSDP's collectives in step
            idle_pass(model, batch.input_ids, device, backward=True)
            continue
        micro = batch.select(piece).to(device)
        # a sharded forward must run the same passes on every rank: no shared-prompt prefill there
        logp, _ = sequence_logprobs(model, micro, share_prompts=not ranks.sharded)
        loss = -(logp * micro.loss_mask.to(logp.dtype)).sum() / total_tokens
        loss.backward()
        local = local + loss.detach()
    local = local.cpu()  # one read of the device per step, not one per micro-batch
    total = torch.tensor(ranks.sum(float(local)))  # the whole batch's loss (one process: this one's)
    if clip_and_step(optimizer, parameters, SFT_MAX_GRAD_NORM, total) is None:
        return None
    return float(total)
