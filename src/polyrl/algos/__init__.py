"""Advantage estimators, policy objectives and losses: small pure functions on tensors, registered by name.

``advantages`` turns rewards into per-sequence advantages (GRPO, Dr. GRPO, RLOO, REINFORCE++), plus
cross-task normalization and token-level GAE; ``objectives`` turns token log-probs and advantages into
the policy loss (PPO-clip, GSPO, CISPO) and its statistics; ``losses`` holds log-probs from logits, the
aggregations, the KL penalty and reward shaping (DAPO overlong penalty).
"""

from polyrl.algos.advantages import (
    ADVANTAGE_ESTIMATORS,
    TOKEN_ADVANTAGE_ESTIMATORS,
    EpisodeCredit,
    dr_grpo,
    gae,
    get_advantage_estimator,
    grpo,
    register_advantage,
    reinforce_pp,
    reinforce_pp_baseline,
    rloo,
    task_normalize,
    turn_advantages,
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
    loss_totals,
    overlong_penalty,
    register_aggregation,
    register_kl_estimator,
    token_logprobs,
)
from polyrl.algos.objectives import (
    OBJECTIVES,
    ObjectiveInputs,
    ObjectiveSettings,
    RowStat,
    get_objective,
    objective_settings_class,
    objective_totals,
    policy_loss,
    register_objective,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "OBJECTIVES",
    "TOKEN_ADVANTAGE_ESTIMATORS",
    "EpisodeCredit",
    "ObjectiveInputs",
    "ObjectiveSettings",
    "RowStat",
    "aggregate",
    "dr_grpo",
    "entropy_from_logits",
    "gae",
    "get_advantage_estimator",
    "get_aggregation",
    "get_objective",
    "grpo",
    "kl_penalty",
    "loss_totals",
    "objective_settings_class",
    "objective_totals",
    "overlong_penalty",
    "policy_loss",
    "register_advantage",
    "register_aggregation",
    "register_kl_estimator",
    "register_objective",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "rloo",
    "task_normalize",
    "token_logprobs",
    "turn_advantages",
    "zero_variance_group_fraction",
    "zero_variance_groups",
]
