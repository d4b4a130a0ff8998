"""The RL stage's config section (``rl:``), with each objective's own settings nested in it."""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from polyrl.algos import (
    KL_ESTIMATORS,
    advantage_estimator,
    get_aggregation,
    get_objective,
    objective_settings_class,
    uses_critic,
    zeroes_groups_of_one,
)
from polyrl.algos.gradient_surgery import get_surgery
from polyrl.critic import CriticConfig
from polyrl.forward.logprobs import DEFAULT_SHARE_PROMPTS, DEFAULT_TEMPERATURE
from polyrl.optim import MAX_LR
from polyrl.policy.generation import DEFAULT_TOP_P
from polyrl.registry import registered
from polyrl.train.config_fields import Strict

MOVED_OBJECTIVE_KEYS = {
    "gspo_clip_ratio_low": ("gspo", "clip_ratio_low"),
    "gspo_clip_ratio_high": ("gspo", "clip_ratio_high"),
    "cispo_clip_ratio_high": ("cispo", "clip_ratio_high"),
}
"""Flat ``rl.`` keys of earlier versions → (objective, key in ``rl.objective_settings``)."""


class RLConfig(Strict):
    """The RL stage (after SFT): multi-task RL with verifiable rewards."""

    enabled: bool = Field(True, description="Run the RL stage.")
    steps: int = Field(400, ge=0, description="RL steps (one batch of rollouts each).")
    prompts_per_step: int = Field(
        16,
        ge=0,
        description="Distinct problems per step from the task sampler (0 only with selfplay: proposed problems only).",
    )
    group_size: int = Field(8, ge=1, description="Completions per problem (G).")
    max_new_tokens: int = Field(24, ge=1, description="Longest completion in tokens.")
    temperature: float = Field(DEFAULT_TEMPERATURE, gt=0, description="Sampling temperature for rollouts.")
    top_p: float = Field(DEFAULT_TOP_P, gt=0, le=1, description="Nucleus sampling for rollouts.")
    lr: float = Field(1e-4, gt=0, le=MAX_LR, description="Learning rate, at most 1 (constant after warmup).")
    warmup_steps: int = Field(0, ge=0, description="Linear warmup steps.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    epochs: int = Field(1, ge=1, description="Optimization passes over each batch (PPO epochs).")
    minibatches: int = Field(
        1, ge=1, description="Optimizer steps per epoch: the trained rows are split into this many minibatches."
    )
    micro_batch_tokens: int | None = Field(
        None,
        ge=1,
        description="Largest padded micro-batch (rows x longest sequence) per forward/backward; gradients accumulate over a minibatch's micro-batches (same gradient, bounded memory). null: the whole minibatch at once.",
    )
    objective: str = Field(
        "ppo_clip",
        description="Policy objective (registered): ppo_clip (PPO with DAPO's asymmetric clip), gspo (sequence-level ratio), cispo (clipped IS weights).",
    )
    mask_truncated: bool = Field(
        False,
        description="Leave completions cut off by max_new_tokens out of the policy loss (DAPO overlong filtering).",
    )
    offpolicy_kl_threshold: float | None = Field(
        None,
        gt=0,
        description="Mask whole sequences whose KL(behaviour || current policy) exceeds this (off-policy sequence masking; needs behaviour log-probs, i.e. Ray rollouts). null: off.",
    )
    advantage: str = Field(
        "grpo",
        description="Advantage estimator: grpo, dr_grpo, rloo, reinforce_pp, reinforce_pp_baseline, or gae (PPO with the critic below).",
    )
    critic: CriticConfig = Field(
        default_factory=CriticConfig, description="Value model and value loss (used when advantage is gae)."
    )
    advantage_level: str = Field(
        "episode",
        description="Multi-turn credit: one advantage per episode, or per turn from the group-normalized reward-to-go.",
    )
    task_normalize: bool = Field(
        False, description="Standardize advantages within each task across the batch (AgentRL)."
    )
    clip_ratio_low: float = Field(0.2, ge=0, lt=1, description="PPO clip below 1 (1 - eps_low).")
    clip_ratio_high: float = Field(0.28, ge=0, description="PPO clip above 1 (1 + eps_high; DAPO clip-higher).")
    objective_settings: dict[str, Any] = Field(
        default_factory=dict,
        description="The objective's own settings, validated against the settings class it was registered with (gspo: clip_ratio_low 3e-4, clip_ratio_high 4e-4; cispo: clip_ratio_high 4.0; ppo_clip has none). Unset keys take that class's defaults; the saved config lists them all.",
    )
    loss_aggregation: str = Field(
        "token_mean", description="token_mean (DAPO), seq_mean_token_mean (GRPO), seq_mean_token_sum_norm (Dr. GRPO)."
    )
    dynamic_sampling: bool = Field(
        True, description="Drop groups whose rewards are all equal (no signal) and refill the batch (DAPO)."
    )
    max_refills: int = Field(2, ge=0, description="Extra generation rounds per step to refill dropped groups.")
    kl_coef: float = Field(0.0, ge=0, description="Weight of the KL penalty to the frozen reference (0 disables it).")
    kl_estimator: str = Field("k3", description="KL estimator (registered; Schulman's k1, k2, k3).")
    entropy_coef: float = Field(0.0, description="Entropy bonus weight.")
    skip_zero_advantage: bool = Field(
        True,
        description="Leave zero-advantage sequences out of the update when no KL/entropy term needs them (same gradient, less compute).",
    )
    share_prompts: bool = Field(
        DEFAULT_SHARE_PROMPTS,
        description="Run each distinct prompt through the model once per group, in generation and in the update (same numbers, less compute; off: one full forward per completion).",
    )
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    gradient_surgery: str = Field(
        "none",
        description="Combine per-task gradients before each step: none (their sum), pcgrad (Yu et al. 2020), cagrad (Liu et al. 2021). Costs one backward per task and a gradient copy per task.",
    )
    max_bad_steps: int = Field(5, ge=1, description="Consecutive NaN/inf steps that stop the run.")

    _advantage = field_validator("advantage")(registered(lambda name: advantage_estimator(name, "rewards", "critic")))
    _level = field_validator("advantage_level")(
        registered(lambda name: name == "episode" or advantage_estimator(name, "turns"))
    )
    _aggregation = field_validator("loss_aggregation")(registered(get_aggregation))
    _objective = field_validator("objective")(registered(get_objective))
    _surgery = field_validator("gradient_surgery")(registered(get_surgery))
    _kl = field_validator("kl_estimator")(registered(KL_ESTIMATORS.lookup))

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data):
        """The flat per-objective keys of earlier versions: a one-line error naming the new key."""
        if isinstance(data, dict):
            for old, (objective, key) in MOVED_OBJECTIVE_KEYS.items():
                if old in data:
                    raise ValueError(
                        f"rl.{old} has moved: set rl.objective_settings.{key} (read when rl.objective is {objective})"
                    )
        return data

    @model_validator(mode="after")
    def _own_settings(self):
        """``objective_settings`` validated against the objective's settings class, defaults filled in."""
        own = objective_settings_class(self.objective)
        if own is None:
            if self.objective_settings:
                raise ValueError(
                    f"rl.objective={self.objective} has no settings of its own; remove rl.objective_settings "
                    f"({', '.join(sorted(self.objective_settings))})"
                )
            return self
        try:
            self.objective_settings = own.model_validate(self.objective_settings).model_dump()
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            msg = "unknown option" if err["type"] == "extra_forbidden" else err["msg"]
            raise ValueError(f"rl.objective_settings.{where} ({self.objective}): {msg}") from None
        return self

    def _groups_of_one(self) -> None:
        """``rl.group_size=1`` trained nothing without a word (issue #43): refused where it cannot train."""
        if self.group_size != 1 or not self.prompts_per_step or not (self.enabled and self.steps):
            return
        if zeroes_groups_of_one(self.advantage):
            raise ValueError(
                f"rl.group_size=1 trains nothing with rl.advantage={self.advantage}: its baseline is the group's own "
                "rewards, so a group of one completion has advantage 0 whatever its reward; use rl.group_size of 2 "
                "or more, or rl.advantage=reinforce_pp (the batch's baseline) or gae (a critic)"
            )
        if self.dynamic_sampling:
            raise ValueError(
                "rl.group_size=1 with rl.dynamic_sampling drops every group (the rewards of one completion are "
                "always all equal) and trains nothing: set rl.dynamic_sampling=false, or rl.group_size of 2 or more"
            )

    @model_validator(mode="after")
    def _compatible(self):
        if uses_critic(self.advantage) and self.task_normalize:
            raise ValueError(
                f"rl.task_normalize applies to group advantages, not rl.advantage={self.advantage} (the critic's "
                "advantages are normalized by rl.critic.normalize_advantages)"
            )
        level = self.advantage_level
        if level != "episode":
            if self.advantage != "grpo":
                raise ValueError(
                    f"rl.advantage_level={level} computes every advantage itself (turn: GRPO's normalization of the "
                    f"reward-to-go); it cannot be combined with rl.advantage={self.advantage}"
                )
            if self.task_normalize:
                raise ValueError(f"rl.advantage_level={level} cannot be combined with rl.task_normalize")
        self._groups_of_one()
        rows = self.prompts_per_step * self.group_size
        if rows and self.minibatches > rows:  # rows 0: self-play supplies them (selfplay:)
            raise ValueError(
                f"rl.minibatches={self.minibatches} is more than the {rows} rows of a step "
                f"(prompts_per_step × group_size): a minibatch cannot be smaller than one row"
            )
        if self.micro_batch_tokens is not None and self.micro_batch_tokens < self.max_new_tokens:
            raise ValueError(
                f"rl.micro_batch_tokens={self.micro_batch_tokens} cannot hold one completion of "
                f"rl.max_new_tokens={self.max_new_tokens} tokens; raise it (or leave it null: no split)"
            )
        return self
