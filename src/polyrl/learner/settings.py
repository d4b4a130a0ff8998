"""The update's settings, typed and built once from the config: what stages 3 and 4 of an RL step (advantages, update) read.

``UpdateSettings.from_config(config.rl, tis_cap=config.ray.tis_cap)`` is called once, by ``train/build.py: build_run``;
below it nothing reads the config. ``prepare_update`` (advantages, the rows to train on),
``policy_update`` and ``critic_update`` (the learner) take these frozen settings, and the objective gets
its part, :class:`~polyrl.algos.ObjectiveSettings`, with its own settings (``rl.objective_settings``,
validated against the class the objective was registered with) inside.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from polyrl.algos import ObjectiveSettings, objective_settings_class


@dataclass(frozen=True)
class UpdateSettings:
    """Everything the advantage stage and the learner read. Defaults live in ``RLConfig`` only."""

    # -- advantages and row selection (``prepare_update``) --------------------------------------------
    advantage: str
    """Registered group estimator, or ``gae`` (the critic)."""
    advantage_level: str
    """``episode`` or ``turn`` (multi-turn credit per turn)."""
    task_normalize: bool
    """Standardize group advantages within each task."""
    skip_zero_advantage: bool
    """Leave zero-advantage rows out of the forward/backward when no KL/entropy term needs them."""
    # -- the update (``policy_update``) -----------------------------------------------------------------
    objective: str
    """Registered policy objective."""
    objective_settings: ObjectiveSettings
    """What the objective reads; ``tis_cap`` is None here (the update sets it per batch:
    :func:`polyrl.learner.update.objective_settings_for`). Its ``aggregation`` and
    ``max_tokens`` (``rl.loss_aggregation``, ``rl.max_new_tokens``) are the update's too: the KL and entropy
    terms are aggregated as the policy loss is, from this one copy."""
    tis_cap: float | None
    """Truncated importance sampling cap, applied to batches that carry behaviour log-probs."""
    epochs: int
    minibatches: int
    micro_batch_tokens: int | None
    temperature: float
    """Rollout sampling temperature: log-probs are taken at it."""
    share_prompts: bool
    kl_coef: float
    kl_estimator: str
    entropy_coef: float
    max_grad_norm: float
    gradient_surgery: str

    @classmethod
    def from_config(cls, rl, tis_cap: float | None = None) -> UpdateSettings:
        """The settings of ``rl`` (an ``RLConfig``); ``tis_cap`` is ``config.ray.tis_cap`` (Ray rollouts)."""
        own_class = objective_settings_class(rl.objective)
        objective = ObjectiveSettings(
            clip_ratio_low=rl.clip_ratio_low,
            clip_ratio_high=rl.clip_ratio_high,
            aggregation=rl.loss_aggregation,
            max_tokens=rl.max_new_tokens,
            tis_cap=None,
            mask_truncated=rl.mask_truncated,
            offpolicy_kl_threshold=rl.offpolicy_kl_threshold,
            own=own_class.model_validate(rl.objective_settings) if own_class is not None else None,
        )
        return cls(
            advantage=rl.advantage,
            advantage_level=rl.advantage_level,
            task_normalize=rl.task_normalize,
            skip_zero_advantage=rl.skip_zero_advantage,
            objective=rl.objective,
            objective_settings=objective,
            tis_cap=tis_cap,
            epochs=rl.epochs,
            minibatches=rl.minibatches,
            micro_batch_tokens=rl.micro_batch_tokens,
            temperature=rl.temperature,
            share_prompts=rl.share_prompts,
            kl_coef=rl.kl_coef,
            kl_estimator=rl.kl_estimator,
            entropy_coef=rl.entropy_coef,
            max_grad_norm=rl.max_grad_norm,
            gradient_surgery=rl.gradient_surgery,
        )

    def replace(self, **changes) -> UpdateSettings:
        """A copy with ``changes`` (tests and benchmarks vary one knob)."""
        return dataclasses.replace(self, **changes)
