"""Rollouts: problems in, scored trajectories out."""

from polyrl.rollout.batch import TokenBatch, collate, sequence_logprobs
from polyrl.rollout.single_turn import rollout_problems
from polyrl.rollout.trajectory import Trajectory

__all__ = ["TokenBatch", "Trajectory", "collate", "rollout_problems", "sequence_logprobs"]
