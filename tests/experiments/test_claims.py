"""Facts the claim experiments (docs/experiments.md, issue #17) rest on, checked by hand-computed numbers."""

import torch

from polyrl.algos import get_advantage_estimator, task_normalize


def test_task_normalize_is_the_identity_on_grpo_advantages_of_informative_groups():
    # two tasks of two non-constant groups each: GRPO gives every group mean 0 and population variance 1,
    # so each task's pooled advantages already have mean 0 and variance 1 (what dynamic sampling keeps)
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.5, 0.25, 0.25, 1.0, 1.0, 0.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3])
    tasks = torch.tensor([0] * 8 + [1] * 4)
    grpo = get_advantage_estimator("grpo")(rewards, groups)
    assert torch.allclose(task_normalize(grpo, tasks), grpo, atol=1e-5)


def test_task_normalize_removes_the_reward_scale_dr_grpo_keeps():
    # Dr. GRPO keeps the scale: a partial-credit task (0.5 vs 0) gets ±0.25, a binary one (1 vs 0) ±0.5;
    # task normalization gives both ±1
    rewards = torch.tensor([0.5, 0.0, 1.0, 0.0])
    dr = get_advantage_estimator("dr_grpo")(rewards, torch.tensor([0, 0, 1, 1]))
    assert dr.tolist() == [0.25, -0.25, 0.5, -0.5]
    normalized = task_normalize(dr, torch.tensor([0, 0, 1, 1]))
    assert torch.allclose(normalized, torch.tensor([1.0, -1.0, 1.0, -1.0]), atol=1e-4)
