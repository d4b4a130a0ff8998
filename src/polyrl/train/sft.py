"""Stage 1: supervised warm start on reference solutions, and rejection-sampling fine-tuning."""

from __future__ import annotations

import numpy as np
import torch

from polyrl.envs import is_environment
from polyrl.rollout import collate, sequence_logprobs
from polyrl.rollout.multi_turn import reference_episode, rollout_mixed

Sequence = tuple[list[int], list[int]] | tuple[list[int], list[int], list[int]]
"""``(prompt_ids, response_ids)``, or with a policy mask for multi-turn references (environment tokens 0)."""


def reference_batch(trainer, rng: np.random.Generator, batch_size: int) -> list[Sequence]:
    """Fresh problems from the training mix with their reference responses (tasks without one are skipped)."""
    names = [n for n in trainer.tasks if trainer.has_references[n]]
    out: list[Sequence] = []
    for k in rng.integers(len(names), size=batch_size):
        task = trainer.tasks[names[k]]
        problem = task.generate(int(rng.integers(2**62)), trainer.sft_difficulty(names[k]), split="train")
        if is_environment(task):
            episode = reference_episode(task, problem, trainer.prompts, trainer.policy.tokenizer.eos_token_id)
            if episode is not None:
                out.append(episode)
            continue
        response = task.reference_response(problem)
        if response is not None:
            out.append((trainer.prompts.ids(problem), trainer.prompts.response_ids(response)))
    return out


def sft_step(trainer, sequences: list[Sequence]) -> float | None:
    """One optimizer step of next-token cross-entropy on the responses. None when the step was skipped."""
    model = trainer.policy.model
    masks = [s[2] if len(s) == 3 else [1] * len(s[1]) for s in sequences]
    batch = collate([s[:2] for s in sequences], trainer.policy.tokenizer.pad_token_id, masks)
    logp, _ = sequence_logprobs(model, batch)
    mask = batch.loss_mask
    loss = -(logp * mask).sum() / mask.sum().clamp(min=1)
    trainer.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(trainer.trainable_parameters(), 1.0)
    if not (torch.isfinite(loss) and torch.isfinite(grad_norm)):
        trainer.optimizer.zero_grad(set_to_none=True)
        return None
    trainer.optimizer.step()
    trainer.scheduler.step()
    return float(loss.detach())


def rejection_samples(trainer, rng: np.random.Generator) -> tuple[list[Sequence], float]:
    """The policy's own verified-correct samples (deduplicated) on fresh problems, and the pass rate."""
    cfg = trainer.config.sft
    names = list(trainer.tasks)
    problems = []
    for k in rng.integers(len(names), size=cfg.rejection_problems):
        problems.append(trainer.tasks[names[k]].generate(int(rng.integers(2**62)), trainer.sft_difficulty(names[k])))
    trajs = rollout_mixed(
        problems,
        trainer.tasks,
        trainer.backend,
        trainer.prompts,
        cfg.rejection_samples,
        trainer.config.rl.max_new_tokens,
        trainer.config.reward,
        trainer.config.env.max_episode_tokens,
        temperature=trainer.config.rl.temperature,
    )
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
