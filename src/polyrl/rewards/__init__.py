"""Rewards: rule terms (verifier, format, length, an episode's return), reward models, LLM judges, label-free
majority vote and user functions, combined with per-task weights by one scoring stage (:func:`score`); every
term is logged on its own."""

from polyrl.rewards.builtin_terms import MODEL_TERMS, majority_vote_scores
from polyrl.rewards.callables import REWARD_BOUND
from polyrl.rewards.judge import JudgeConfig, JudgeSource, parse_verdict
from polyrl.rewards.reward_config import (
    RewardConfig,
    RewardResult,
    RewardTermSpec,
    compute_rewards,
)
from polyrl.rewards.reward_model import RewardModelConfig, RewardModelSource, build_tiny_reward_model
from polyrl.rewards.rules import RULE_TERMS
from polyrl.rewards.stage import RewardScorer, score, scoring, verify_trajectories
from polyrl.rewards.terms import REWARD_SOURCES, register_reward_source, register_reward_term

__all__ = [
    "MODEL_TERMS",
    "REWARD_BOUND",
    "REWARD_SOURCES",
    "RULE_TERMS",
    "JudgeConfig",
    "JudgeSource",
    "RewardConfig",
    "RewardModelConfig",
    "RewardModelSource",
    "RewardResult",
    "RewardScorer",
    "RewardTermSpec",
    "build_tiny_reward_model",
    "compute_rewards",
    "majority_vote_scores",
    "parse_verdict",
    "register_reward_source",
    "register_reward_term",
    "score",
    "scoring",
    "verify_trajectories",
]
