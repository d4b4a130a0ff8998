"""PPO critics: a value model trained by regression or classification (HL-Gauss, two-hot), with GAE."""

from polyrl.critic.value_losses import (
    VALUE_LOSSES,
    bin_centers,
    bin_edges,
    expected_value,
    hl_gauss_targets,
    two_hot_targets,
    value_loss,
)
from polyrl.critic.value_model import Critic, CriticConfig, ValueModel, outcome_rewards_per_token

__all__ = [
    "VALUE_LOSSES",
    "Critic",
    "CriticConfig",
    "ValueModel",
    "bin_centers",
    "bin_edges",
    "expected_value",
    "hl_gauss_targets",
    "outcome_rewards_per_token",
    "two_hot_targets",
    "value_loss",
]
