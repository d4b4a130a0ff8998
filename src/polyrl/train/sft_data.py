"""The SFT stage's data: reference solutions (the warm start) and the policy's own verified samples (rejection
sampling). The step that trains on them is :func:`polyrl.learner.sft_step.sft_step`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from polyrl.envs import is_environment
from polyrl.learner.sft_step import Sequence
from polyrl.rewards.stage import verify_trajectories
from polyrl.rollout import Sampling, rollout
from polyrl.rollout.reference import reference_episode


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
