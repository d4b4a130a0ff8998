"""Stage 1: supervised warm start on reference solutions, and rejection-sampling fine-tuning."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from polyrl.envs import is_environment
from polyrl.optim import clip_and_step
from polyrl.rewards.stage import verify_trajectories
from polyrl.rollout import Sampling, collate, rollout, sequence_logprobs
from polyrl.rollout.reference import reference_episode

Sequence = tuple[list[int], list[int]] | tuple[list[int], list[int], list[int]]
"""``(prompt_ids, response_ids)``, or with a policy mask for multi-turn references (environment tokens 0)."""

SFT_MAX_GRAD_NORM = 1.0


def reference_batch(
    tasks: dict, difficulty: Callable[[str], object], prompts, eos_id: int, rng: np.random.Generator, batch_size: int
) -> list[Sequence]:
    """Fresh training problems from ``tasks`` (the ones that have references) with their reference responses;
    ``difficulty(name)`` is each task's SFT difficulty."""
    names = list(tasks)
    out: list[Sequence] = []
    for k in rng.integers(len(names), size=batch_size):
        task = tasks[names[k]]
        problem = task.generate(int(rng.integers(2**62)), difficulty(names[k]), split="train")
        if is_environment(task):
            episode = reference_episode(task, problem, prompts, eos_id)
            if episode is not None:
                out.append(episode)
            continue
        response = task.reference_response(problem)
        if response is not None:
            out.append((prompts.ids(problem), prompts.response_ids(response)))
    return out


def sft_step(
    model,
    optimizer,
    parameters: list[torch.Tensor],
    pad_id: int,
    sequences: list[Sequence],
    micro_batch_tokens: int | None = None,
) -> float | None:
    """One optimizer step of next-token cross-entropy on the responses' policy tokens; None when skipped
    (non-finite loss or gradient). The batch runs in micro-batches of at most ``micro_batch_tokens`` padded
    tokens with accumulated gradients, each normalized by the whole batch's token count (same gradient)."""
    masks = [s[2] if len(s) == 3 else [1] * len(s[1]) for s in sequences]
    batch = collate([s[:2] for s in sequences], pad_id, masks)
    total_tokens = batch.loss_mask.sum().clamp(min=1)
    optimizer.zero_grad(set_to_none=True)
    loss = torch.zeros(())
    for rows in batch.row_chunks(micro_batch_tokens):
        micro = batch.select(rows)
        logp, _ = sequence_logprobs(model, micro)
        micro_loss = -(logp * micro.loss_mask.to(logp.device)).sum() / total_tokens
        micro_loss.backward()
        loss = loss + micro_loss.detach().cpu()
    if clip_and_step(optimizer, parameters, SFT_MAX_GRAD_NORM, loss) is None:
        return None
    return float(loss)


def rejection_samples(
    tasks: dict,
    difficulty: Callable[[str], object],
    backend,
    prompts,
    rng: np.random.Generator,
    problems: int,
    sampling: Sampling,
) -> tuple[list[Sequence], float]:
    """The policy's own verified-correct, finished samples (deduplicated) on ``problems`` fresh problems with
    ``sampling.group_size`` completions each (through :func:`~polyrl.rollout.dispatch.rollout`), and the pass rate."""
    names = list(tasks)
    chosen = [
        tasks[names[k]].generate(int(rng.integers(2**62)), difficulty(names[k]))
        for k in rng.integers(len(names), size=problems)
    ]
    trajs = rollout(chosen, tasks, backend, prompts, sampling)
    verify_trajectories(trajs, tasks)
    seen, out = set(), []
    for t in trajs:
        key = (tuple(t.prompt_ids), tuple(t.response_ids))
        if t.verdict.correct and t.finished and key not in seen:
            seen.add(key)
            out.append(
                (t.prompt_ids, t.response_ids)
                if t.policy_mask is None
                else (t.prompt_ids, t.response_ids, t.policy_mask)
            )
    return out, sum(t.verdict.correct for t in trajs) / max(len(trajs), 1)
