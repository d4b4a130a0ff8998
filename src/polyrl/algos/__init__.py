"""Advantage estimators and policy losses: small pure functions on tensors, registered by name.

``advantages`` turns rewards into per-sequence advantages (GRPO, Dr. GRPO, RLOO, REINFORCE++), plus
cross-task normalization and token-level GAE; ``losses`` turns token log-probs and advantages into a
scalar loss (clipped surrogate, KL penalty) and shapes rewards (DAPO overlong penalty).
"""

from polyrl.algos.advantages import (
    ADVANTAGE_ESTIMATORS,
    dr_grpo,
    gae,
    get_advantage_estimator,
    grpo,
    register_advantage,
    reinforce_pp,
    reinforce_pp_baseline,
    rloo,
    task_normalize,
    zero_variance_group_fraction,
    zero_variance_groups,
)
from polyrl.algos.losses import (
    AGGREGATIONS,
    KL_ESTIMATORS,
    aggregate,
    entropy_from_logits,
    get_aggregation,
    kl_penalty,
    overlong_penalty,
    policy_loss,
    register_aggregation,
    token_logprobs,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "aggregate",
    "dr_grpo",
    "entropy_from_logits",
    "gae",
    "get_advantage_estimator",
    "get_aggregation",
    "grpo",
    "kl_penalty",
    "overlong_penalty",
    "policy_loss",
    "register_advantage",
    "register_aggregation",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "rloo",
    "task_normalize",
    "token_logprobs",
    "zero_variance_group_fraction",
    "zero_variance_groups",
]
