"""Behaviour log-probs of recorded completions: what the sampling weights gave each token the policy
generated, from one forward over the exact ids (as Ray workers record theirs)."""

from __future__ import annotations

import torch

from polyrl.forward import collate, sequence_logprobs

ROWS_PER_FORWARD = 16


def response_logprobs(
    model, device, rows: list[tuple[list[int], list[int]]], pad_id: int, temperature: float
) -> list[list[float]]:
    """For each ``(prompt_ids, response_ids)``, the log-prob of every response token given all before it,
    at ``temperature`` (the sampling distribution before top-p), from ``model`` (its weights on ``device``)."""
    out: list[list[float]] = []
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(rows), ROWS_PER_FORWARD):
            chunk = rows[start : start + ROWS_PER_FORWARD]
            with torch.no_grad():
                logp, _ = sequence_logprobs(model, collate(chunk, pad_id).to(device), temperature)
            out += [logp[i, len(p) - 1 : len(p) - 1 + len(r)].tolist() for i, (p, r) in enumerate(chunk)]
    finally:
        model.train(was_training)
    return out


def token_logprobs_content(tokenizer, ids: list[int], logprobs: list[float]) -> list[dict]:
    """OpenAI's ``choices[].logprobs.content``: one entry per generated token."""
    return [
        {
            "token": tokenizer.decode([i]),
            "logprob": lp,
            "bytes": list(tokenizer.decode([i]).encode()),
            "top_logprobs": [],
        }
        for i, lp in zip(ids, logprobs)
    ]
