"""Advantage estimators, policy objectives and losses: small pure functions on tensors, registered by name.

``advantages`` turns rewards into per-sequence advantages (GRPO, Dr. GRPO, RLOO, REINFORCE++), plus
cross-task normalization and token-level GAE; ``objectives`` turns token log-probs and advantages into
the policy loss (PPO-clip, GSPO, CISPO) and its statistics; ``losses`` holds the aggregations, the KL penalty
and reward shaping (DAPO overlong penalty); the log-probs they read come from :mod:`polyrl.forward`.

Every public name of ``advantages`` and ``losses`` is public here too (their ``__all__`` is the one list of
them); of ``objectives``, the names below.
"""

from polyrl.algos import advantages, losses
from polyrl.algos.advantages import *  # noqa: F403
from polyrl.algos.losses import *  # noqa: F403
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
    "OBJECTIVES",
    "ObjectiveInputs",
    "ObjectiveSettings",
    "RowStat",
    "get_objective",
    "objective_settings_class",
    "objective_totals",
    "policy_loss",
    "register_objective",
]
__all__ += advantages.__all__
__all__ += losses.__all__
