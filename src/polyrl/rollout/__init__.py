"""Rollouts: problems in, unscored trajectories out (one path, :func:`rollout`, for single- and multi-turn)."""

from polyrl.rollout.dispatch import Sampling, rollout, rollout_groups, rollout_problems
from polyrl.rollout.trajectory import Trajectory, number_groups

__all__ = [
    "Sampling",
    "Trajectory",
    "number_groups",
    "rollout",
    "rollout_groups",
    "rollout_problems",
]
