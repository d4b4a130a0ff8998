"""One step of multi-task RL with verifiable rewards.

sample tasks → generate problems → G completions each → rewards → advantages (group-relative, optionally
task-normalized) → clipped policy-gradient epochs → metrics. Each piece is a function from polyrl.algos
or polyrl.rollout; this file only wires them.
"""

from __future__ import annotations

import math
import time
import warnings
from collections import defaultdict
from typing import Any

import numpy as np
import torch

from polyrl.algos import (
    aggregate,
    get_advantage_estimator,
    kl_penalty,
    policy_loss,
    task_normalize,
    zero_variance_groups,
)
from polyrl.rollout import Trajectory, collate, sequence_logprobs
from polyrl.rollout.multi_turn import episode_metrics, rollout_mixed, turn_advantages


def _mean(xs) -> float:
    xs = list(xs)
    return float(sum(xs) / len(xs)) if xs else float("nan")


def collect_rollouts(trainer, step: int, rng: np.random.Generator) -> tuple[list[Trajectory], dict[str, Any]]:
    """Generate and score a step's groups; with dynamic sampling, drop zero-variance groups and refill."""
    cfg = trainer.config.rl
    kept: list[Trajectory] = []
    generated = dropped = gen_tokens = 0
    gen_time = 0.0
    rounds = 0
    need = cfg.prompts_per_step
    trainer.sampler.set_step(step)
    while need > 0:
        names = trainer.sampler.sample(need, rng)
        problems = [
            trainer.tasks[n].generate(int(rng.integers(2**62)), trainer.difficulty(n), split="train") for n in names
        ]
        t0 = time.perf_counter()
        trajs = rollout_mixed(
            problems,
            trainer.tasks,
            trainer.backend,
            trainer.prompts,
            cfg.group_size,
            cfg.max_new_tokens,
            trainer.config.reward,
            trainer.config.env.max_episode_tokens,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            group_offset=generated,
            version=trainer.policy_version,
        )
        trainer.reward_scorer.score(trajs)  # reward-model, judge and majority-vote terms, batched
        gen_time += time.perf_counter() - t0
        gen_tokens += sum(len(t.response_ids) for t in trajs)
        generated += len(problems)
        groups: dict[int, list[Trajectory]] = defaultdict(list)
        for t in trajs:
            groups[t.group].append(t)
        for members in groups.values():
            trainer.sampler.update(members[0].task, [m.verdict.score for m in members])
            if trainer.difficulty_controller is not None:
                trainer.difficulty_controller.update(members[0].task, [m.verdict.score for m in members])
            rewards = [m.reward for m in members]
            if cfg.dynamic_sampling and max(rewards) - min(rewards) < 1e-9:
                dropped += 1
                continue
            kept.extend(members)
        rounds += 1
        need = cfg.prompts_per_step - len({t.group for t in kept})
        if not cfg.dynamic_sampling or rounds > cfg.max_refills:
            break
    info = {
        "gen_time": gen_time,
        "gen_tokens": gen_tokens,
        "groups_generated": generated,
        "groups_dropped": dropped,
        "refill_rounds": rounds - 1,
    }
    return kept, info


def behaviour_logprobs(trajs: list[Trajectory], width: int) -> torch.Tensor | None:
    """``[N, width]`` behaviour log-probs aligned with ``TokenBatch.loss_mask`` (from Ray rollout workers),
    or None when the trajectories do not carry them (in-process rollouts share the trainer's weights)."""
    if not trajs or any("behaviour_logprobs" not in t.info for t in trajs):
        return None
    out = torch.zeros(len(trajs), width)
    for i, t in enumerate(trajs):
        start = len(t.prompt_ids) - 1
        out[i, start : start + len(t.response_ids)] = torch.tensor(t.info["behaviour_logprobs"])
    return out


def collate_trajectories(trainer, trajs: list[Trajectory]):
    """The padded token batch of ``trajs`` (with multi-turn policy masks when there are any)."""
    return collate(
        [(t.prompt_ids, t.response_ids) for t in trajs],
        trainer.policy.tokenizer.pad_token_id,
        [t.policy_mask for t in trajs] if any(t.policy_mask for t in trajs) else None,
    )


def rl_update(trainer, trajs: list[Trajectory]) -> dict[str, Any]:
    """Advantages and PPO-style epochs over ``trajs``; returns loss statistics and per-sequence diagnostics."""
    cfg = trainer.config.rl
    model, optimizer, scheduler = trainer.policy.model, trainer.optimizer, trainer.scheduler
    task_index = {name: i for i, name in enumerate(trainer.tasks)}
    rewards = torch.tensor([t.reward for t in trajs], dtype=torch.float32)
    group_ids = torch.tensor([t.group for t in trajs])
    task_ids = torch.tensor([task_index[t.task] for t in trajs])
    batch = collate_trajectories(trainer, trajs)
    behaviour_all = behaviour_logprobs(trajs, batch.loss_mask.shape[1])
    critic_stats: dict[str, float] = {}
    if cfg.advantage == "gae":  # token-level [N, T] advantages from the critic (polyrl.critic)
        advantages, returns, critic_stats = trainer.critic.advantages(batch, rewards)
    else:
        advantages = get_advantage_estimator(cfg.advantage)(rewards, group_ids)
        if cfg.task_normalize:
            advantages = task_normalize(advantages, task_ids)
        if cfg.advantage_level == "turn":  # [N, T]: each turn of an episode credited with its reward-to-go
            advantages = turn_advantages(trajs, batch.loss_mask.shape[1])
    n_all = len(trajs)
    # Sequences with zero advantage contribute nothing to the clipped surrogate (their per-token loss is
    # 0 * ratio). Without KL or entropy terms they are dropped from the forward/backward, and the loss is
    # rescaled by the kept share of tokens (token aggregation) or sequences, so that with one minibatch the
    # gradient is exactly the full batch's. All-correct and all-wrong groups are common: this saves a lot.
    active = torch.arange(n_all)
    loss_scale = 1.0
    if cfg.skip_zero_advantage and advantages.dim() == 1 and cfg.kl_coef == 0 and cfg.entropy_coef == 0:
        active = torch.nonzero(advantages != 0).flatten()
        if cfg.loss_aggregation == "token_mean":
            tokens = batch.loss_mask.sum(1)
            loss_scale = float(tokens[active].sum() / tokens.sum().clamp(min=1))
        else:
            loss_scale = len(active) / n_all
        batch, advantages = batch.select(active), advantages[active]
    n = len(active)
    # Rollouts from Ray workers carry the behaviour policy's log-probs: old log-probs are then the trainer's
    # current policy, and truncated importance sampling corrects for the gap (asynchronous staleness).
    behaviour = behaviour_all[active, : batch.loss_mask.shape[1]] if behaviour_all is not None else None
    needs_old = cfg.epochs > 1 or cfg.minibatches > 1 or behaviour is not None
    with torch.no_grad():
        old_all = (
            sequence_logprobs(model, batch, cfg.temperature, share_prompts=cfg.share_prompts)[0]
            if needs_old and n
            else None
        )
        ref_all = (
            sequence_logprobs(trainer.reference, batch, cfg.temperature, share_prompts=cfg.share_prompts)[0]
            if trainer.reference is not None and n
            else None
        )

    seq_entropy = torch.full((n_all,), float("nan"))
    seq_kl = torch.zeros(n_all)
    seq_clip = torch.zeros(n_all)
    losses, grad_norms, value_losses, skipped = [], [], [], 0
    mb_size = math.ceil(n_all / cfg.minibatches)
    for epoch in range(cfg.epochs if n else 0):
        perm = torch.randperm(n)
        for start in range(0, n, mb_size):
            idx = perm[start : start + mb_size]
            mb = batch.select(idx)
            mask = mb.loss_mask
            width = mask.shape[1]
            logp, ent = sequence_logprobs(
                model,
                mb,
                cfg.temperature,
                entropy=True,
                entropy_grad=cfg.entropy_coef != 0,
                share_prompts=cfg.share_prompts,
            )
            old = old_all[idx, :width] if old_all is not None else logp.detach()
            adv_mb = advantages[idx] if advantages.dim() == 1 else advantages[idx, :width]
            loss, _stats = policy_loss(
                logp,
                old,
                adv_mb,
                mask,
                cfg.clip_ratio_low,
                cfg.clip_ratio_high,
                cfg.loss_aggregation,
                max_tokens=cfg.max_new_tokens,
                behaviour_logprobs=behaviour[idx, :width] if behaviour is not None else None,
                tis_cap=trainer.config.ray.tis_cap if behaviour is not None else None,
            )
            kl_tok = None
            if ref_all is not None:
                kl_tok = kl_penalty(logp, ref_all[idx, :width], cfg.kl_estimator)
                loss = loss + cfg.kl_coef * aggregate(kl_tok, mask, cfg.loss_aggregation, cfg.max_new_tokens)
            if cfg.entropy_coef:
                loss = loss - cfg.entropy_coef * aggregate(ent, mask, cfg.loss_aggregation, cfg.max_new_tokens)
            loss = loss * loss_scale
            if epoch == 0:
                with torch.no_grad():
                    denom = mask.sum(1).clamp(min=1)
                    orig = active[idx]  # positions in the step's full list of trajectories
                    seq_entropy[orig] = (ent.detach() * mask).sum(1) / denom
                    if kl_tok is not None:
                        seq_kl[orig] = (kl_tok.detach() * mask).sum(1) / denom
                    ratio = torch.exp(logp.detach() - old)
                    adv = adv_mb if adv_mb.dim() == 2 else adv_mb.unsqueeze(1)
                    clipped = ((adv > 0) & (ratio > 1 + cfg.clip_ratio_high)) | (
                        (adv < 0) & (ratio < 1 - cfg.clip_ratio_low)
                    )
                    seq_clip[orig] = (clipped.float() * mask).sum(1) / denom
            if cfg.advantage == "gae":
                value_losses.append(trainer.critic.update(mb, returns[idx]))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(trainer.trainable_parameters(), cfg.max_grad_norm)
            if not (torch.isfinite(loss) and torch.isfinite(grad_norm)):
                optimizer.zero_grad(set_to_none=True)
                skipped += 1
                warnings.warn(f"non-finite loss or gradient at RL step {trainer.step}: update skipped", stacklevel=1)
                continue
            optimizer.step()
            losses.append(float(loss.detach()))
            grad_norms.append(float(grad_norm))
    scheduler.step()
    return {
        "loss": _mean(losses),
        "grad_norm": _mean(grad_norms),
        "skipped_updates": skipped,
        "updates": cfg.epochs * math.ceil(n / mb_size),
        "trained_sequences": n,
        "seq_entropy": seq_entropy.tolist(),
        "seq_kl": seq_kl.tolist(),
        "seq_clip": seq_clip.tolist(),
        "zero_variance": zero_variance_groups(rewards, group_ids).tolist(),
        "critic": {**critic_stats, "value_loss": _mean(v for v in value_losses if v is not None)}
        if critic_stats
        else {},
    }


def critic_only_update(trainer, trajs: list[Trajectory]) -> dict[str, float]:
    """One pass of value-loss updates over ``trajs`` (``rl.minibatches`` minibatches); the policy is untouched."""
    cfg = trainer.config.rl
    batch = collate_trajectories(trainer, trajs)
    rewards = torch.tensor([t.reward for t in trajs], dtype=torch.float32)
    _, returns, stats = trainer.critic.advantages(batch, rewards)
    losses = []
    mb_size = math.ceil(len(trajs) / cfg.minibatches)
    perm = torch.randperm(len(trajs))
    for start in range(0, len(trajs), mb_size):
        idx = perm[start : start + mb_size]
        loss = trainer.critic.update(batch.select(idx), returns[idx])
        if loss is not None:
            losses.append(loss)
    return {**stats, "value_loss": _mean(losses), "reward": _mean(t.reward for t in trajs)}


def step_metrics(
    trajs: list[Trajectory], update: dict[str, Any], info: dict[str, Any], elapsed: float
) -> dict[str, float]:
    """Overall and per-task metrics for one RL step (per-task keys are ``<metric>/<task>``)."""
    by_task: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(trajs):
        by_task[t.task].append(i)

    def summarize(idx: list[int]) -> dict[str, float]:
        groups = {trajs[i].group for i in idx}
        zero_var = {trajs[i].group for i in idx if update["zero_variance"][i]}
        return {
            "reward": _mean(trajs[i].reward for i in idx),
            "accuracy": _mean(trajs[i].verdict.correct for i in idx),
            "score": _mean(trajs[i].verdict.score for i in idx),
            "format_rate": _mean(trajs[i].verdict.format_ok for i in idx),
            "response_length": _mean(len(trajs[i].response_ids) for i in idx),
            # entropy is measured on the sequences that were trained on (zero-advantage ones are skipped)
            "entropy": _mean(x for x in (update["seq_entropy"][i] for i in idx) if x == x),
            "kl": _mean(update["seq_kl"][i] for i in idx),
            "clip_fraction": _mean(update["seq_clip"][i] for i in idx),
            "zero_variance_frac": len(zero_var) / max(len(groups), 1),
            "tokens": float(sum(len(trajs[i].response_ids) for i in idx)),
            **{
                f"reward_terms/{term}": _mean(trajs[i].reward_terms.get(term, 0.0) for i in idx)
                for term in sorted({k for i in idx for k in trajs[i].reward_terms})
            },
            **{
                f"reward_failures/{term}": float(sum(term in trajs[i].info.get("reward_failures", {}) for i in idx))
                for term in sorted({k for i in idx for k in trajs[i].info.get("reward_failures", {})})
            },
            # a swapped pairwise judge whose two verdicts disagreed (position bias; the sample keeps its reward)
            **(
                {
                    "judge_position_inconsistent": float(
                        sum(bool(trajs[i].info.get("judge_position_inconsistent")) for i in idx)
                    )
                }
                if any("judge_position_inconsistent" in trajs[i].info for i in idx)
                else {}
            ),
        }

    out = summarize(list(range(len(trajs)))) if trajs else {}
    for name, idx in sorted(by_task.items()):
        out.update({f"{k}/{name}": v for k, v in summarize(idx).items()})
    if "zero_variance_frac" in out and info["groups_generated"]:
        # with dynamic sampling, dropped groups count towards the fraction the sampler produced
        kept_groups = len({t.group for t in trajs})
        zero_kept = out["zero_variance_frac"] * kept_groups
        out["zero_variance_frac"] = (zero_kept + info["groups_dropped"]) / info["groups_generated"]
    out.update(episode_metrics(trajs))
    out.update({k: update[k] for k in ("loss", "grad_norm", "skipped_updates")})
    out.update(update.get("critic", {}))
    out["tokens_per_s"] = info["gen_tokens"] / max(info["gen_time"], 1e-9)
    out["completions_per_s"] = len(trajs) / max(elapsed, 1e-9)
    out["step_time"] = elapsed
    out["groups_dropped"] = info["groups_dropped"]
    return out
