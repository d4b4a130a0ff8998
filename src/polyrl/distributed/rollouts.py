"""One RL step's rollouts from the Ray pool: the Ray counterpart of ``polyrl.train.rl.collect_rollouts``."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from polyrl.rollout import Trajectory


def collect_rollouts_ray(trainer, step: int, rng: np.random.Generator) -> tuple[list[Trajectory], dict[str, Any]]:
    """Groups from ``trainer.rollout_pool``; with dynamic sampling, zero-variance groups are dropped and
    more are pulled (up to ``max_refills`` extra steps' worth)."""
    cfg = trainer.config.rl
    pool = trainer.rollout_pool
    trainer.sampler.set_step(step)

    def make_problems(n: int):
        names = trainer.sampler.sample(n, rng)
        return [
            trainer.tasks[m].generate(int(rng.integers(2**62)), trainer.difficulty(m), split="train") for m in names
        ]

    kept: list[Trajectory] = []
    generated = dropped = 0
    before = len(pool.stats.staleness)
    t0 = time.perf_counter()
    budget = cfg.prompts_per_step * (1 + (cfg.max_refills if cfg.dynamic_sampling else 0))
    need = cfg.prompts_per_step
    while need > 0 and generated < budget:
        groups = pool.groups(
            min(need, budget - generated),
            make_problems,
            group_size=cfg.group_size,
            max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
        )
        if not groups:
            break
        for members in groups:
            for t in members:
                t.group = generated
            generated += 1
            trainer.reward_scorer.score(members)
            scores = [m.verdict.score for m in members]
            trainer.sampler.update(members[0].task, scores)
            if trainer.difficulty_controller is not None:
                trainer.difficulty_controller.update(members[0].task, scores)
            rewards = [m.reward for m in members]
            if cfg.dynamic_sampling and max(rewards) - min(rewards) < 1e-9:
                dropped += 1
                continue
            kept.extend(members)
        need = cfg.prompts_per_step - len({t.group for t in kept})
    staleness = pool.stats.staleness[before:]
    info = {
        "gen_time": time.perf_counter() - t0,
        "gen_tokens": sum(len(t.response_ids) for t in kept),
        "groups_generated": generated,
        "groups_dropped": dropped,
        "refill_rounds": 0,
        "staleness_mean": float(np.mean(staleness)) if staleness else 0.0,
        "staleness_max": float(max(staleness)) if staleness else 0.0,
        "failed_groups": pool.stats.failed_groups,
        "reruns": pool.stats.reruns,
        "stale_reruns": pool.stats.stale_reruns,
        "task_errors": pool.stats.task_errors,
    }
    return kept, info
