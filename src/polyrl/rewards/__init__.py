"""Rewards: a configured sum of terms (verifier score, format, length penalties)."""

from polyrl.rewards.compose import RewardConfig, RewardResult, compute_rewards

__all__ = ["RewardConfig", "RewardResult", "compute_rewards"]
