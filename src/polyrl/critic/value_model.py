"""The PPO critic: a separate value model with GAE advantages (the alternative to group baselines).

The value model is a copy of the policy's transformer backbone (for the tiny default and any Hugging
Face causal LM: ``model.base_model``; LoRA adapters are merged into the copy) with a linear value head
on the last hidden state. Copying the post-SFT policy is the usual PPO initialisation for language
models (Ouyang et al. 2022, InstructGPT §3.5 initialise from the RM; Yuan et al. 2025, VAPO, warm up a
critic initialised from the policy); a separate model keeps the policy's gradients free of the value
loss and works for every checkpoint without touching its architecture. The head is zero-initialised, so
building a critic draws no random numbers (resumed runs stay exact).

Position ``t`` of a ``TokenBatch`` row (its ``loss_mask`` column ``t``) is the state "prompt and the
response up to token ``t``"; the action is token ``t + 1``. The outcome reward sits on the last policy
token and :func:`polyrl.algos.gae` turns rewards and values into token-level advantages and returns
(multi-turn: environment tokens are masked out and jumped over).
"""

from __future__ import annotations

import copy

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from torch import Tensor, nn

from polyrl.algos import gae
from polyrl.critic.value_losses import VALUE_LOSSES, expected_value, value_loss
from polyrl.forward.precision import autocast_mode, forward_precision, set_autocast
from polyrl.optim import MAX_LR, clip_and_step


class CriticConfig(BaseModel):
    """The value model used when ``rl.advantage`` is ``gae``."""

    model_config = ConfigDict(extra="forbid")

    loss: str = Field("hl_gauss", description="Value loss: mse, hl_gauss (Farebrother et al. 2024) or two_hot.")
    num_bins: int = Field(51, ge=2, description="Bins of the categorical value support (hl_gauss, two_hot).")
    v_min: float = Field(-1.0, description="Lowest value of the support (returns below are clipped).")
    v_max: float = Field(1.5, description="Highest value of the support (returns above are clipped).")
    sigma_ratio: float = Field(0.75, gt=0, description="HL-Gauss sigma in bin widths (0.75 in Stop Regressing).")
    lr: float = Field(5e-4, gt=0, le=MAX_LR, description="Critic learning rate, at most 1 (AdamW, constant).")
    gamma: float = Field(1.0, ge=0, le=1, description="GAE discount per policy token.")
    lam: float = Field(1.0, ge=0, le=1, description="GAE lambda (1: Monte-Carlo returns minus the value baseline).")
    normalize_advantages: bool = Field(
        True, description="Standardize token advantages over the batch's policy tokens."
    )
    max_grad_norm: float = Field(1.0, gt=0, description="Critic gradient clipping norm.")
    warmup_steps: int = Field(
        0,
        ge=0,
        description="Critic-only steps before RL: the starting policy's rollouts train the value model, the policy is not updated (VAPO's value pretraining).",
    )

    @field_validator("loss")
    @classmethod
    def _registered_loss(cls, loss: str) -> str:
        if loss not in VALUE_LOSSES:
            raise ValueError(VALUE_LOSSES.unknown_message(loss))
        return loss

    @model_validator(mode="after")
    def _support(self):
        if self.v_min >= self.v_max:
            raise ValueError(f"v_min {self.v_min} must be below v_max {self.v_max}")
        return self


def policy_backbone(policy_model: nn.Module) -> nn.Module:
    """A trainable copy of the policy's transformer trunk (LoRA merged in)."""
    model = copy.deepcopy(policy_model)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    backbone = model.base_model
    backbone.requires_grad_(True)
    return backbone


class ValueModel(nn.Module):
    """Transformer trunk + linear value head: ``[N, L]`` ids -> ``[N, L-1]`` values or ``[N, L-1, B]`` logits."""

    def __init__(self, backbone: nn.Module, outputs: int, device: torch.device):
        super().__init__()
        self.backbone = backbone
        hidden = backbone.config.hidden_size
        self.head = nn.Linear(hidden, outputs, device=device, dtype=torch.float32)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.outputs = outputs

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        out = self.head(hidden[:, :-1].float())
        return out.squeeze(-1) if self.outputs == 1 else out


def outcome_rewards_per_token(rewards: Tensor, mask: Tensor) -> Tensor:
    """``[N, T]`` with each sequence's reward on its last policy token (0 elsewhere)."""
    last = (mask * torch.arange(1, mask.shape[1] + 1, dtype=mask.dtype)).argmax(1)
    out = torch.zeros_like(mask, dtype=torch.float32)
    has = mask.sum(1) > 0
    out[has, last[has]] = rewards[has].float()
    return out


class Critic:
    """A value model, its optimizer and the two things PPO asks of it: advantages and a value update."""

    def __init__(self, config: CriticConfig, policy_model: nn.Module, device: torch.device | str):
        self.config = config
        self.device = torch.device(device)
        """Where the policy is, and so the value model copied from it (the run's placement decided it)."""
        outputs = VALUE_LOSSES.lookup(config.loss).head_size(config.num_bins)
        self.model = ValueModel(policy_backbone(policy_model), outputs, self.device)
        set_autocast(self.model, autocast_mode(policy_model))
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=config.lr, weight_decay=0.0)

    def _outputs(self, batch) -> Tensor:
        """The value head's outputs on ``batch`` (a TokenBatch already on :attr:`device`)."""
        with forward_precision(self.model, self.device):
            return self.model(batch.input_ids, batch.attention_mask)

    def values_from(self, outputs: Tensor) -> Tensor:
        if self.config.loss == "mse":
            return outputs.float()
        return expected_value(outputs, self.config.v_min, self.config.v_max)

    @torch.no_grad()
    def advantages(self, batch, rewards: Tensor) -> tuple[Tensor, Tensor, dict[str, float]]:
        """Token advantages and returns ``[N, T]`` by GAE over the critic's values (Schulman et al. 2016, eq. 16)."""
        cfg = self.config
        mask = batch.loss_mask  # the host batch: advantages and returns are host tensors, like the batch's rewards
        values = self.values_from(self._outputs(batch.to(self.device))).cpu()
        adv, returns = gae(outcome_rewards_per_token(rewards, mask), values, mask, cfg.gamma, cfg.lam)
        valid = mask.bool()
        stats = {
            "value_mean": float(values[valid].mean()) if valid.any() else float("nan"),
            "return_mean": float(returns[valid].mean()) if valid.any() else float("nan"),
        }
        resid = (returns - values)[valid]
        var = returns[valid].var() if valid.sum() > 1 else torch.tensor(float("nan"))
        stats["value_explained_variance"] = float(1 - resid.var() / var) if var > 0 else float("nan")
        if cfg.normalize_advantages and valid.sum() > 1:
            mean, std = adv[valid].mean(), adv[valid].std()
            adv = torch.where(valid, (adv - mean) / (std + 1e-6), torch.zeros_like(adv))
        return adv, returns, stats

    def update(self, batch, returns: Tensor, micro_batch_tokens: int | None = None) -> float | None:
        """One optimizer step on the value loss over ``batch``'s policy tokens; None when skipped (non-finite).
        Runs in micro-batches of at most ``micro_batch_tokens`` padded tokens, accumulating gradients: each
        micro-batch's mean is weighted by its share of the batch's tokens, so the gradient is the unsplit one."""
        cfg = self.config
        total_tokens = batch.loss_mask.sum().clamp(min=1)
        self.optimizer.zero_grad(set_to_none=True)
        loss = torch.zeros(())
        for rows in batch.row_chunks(micro_batch_tokens):
            micro = batch.select(rows).to(self.device)
            mask = micro.loss_mask
            micro_returns = returns[rows, : mask.shape[1]].to(self.device)
            mean = value_loss(
                self._outputs(micro), micro_returns, mask, cfg.loss, cfg.v_min, cfg.v_max, cfg.sigma_ratio
            )
            micro_loss = mean * mask.sum().clamp(min=1) / total_tokens.to(self.device)
            micro_loss.backward()
            loss = loss + micro_loss.detach().cpu()
        if clip_and_step(self.optimizer, list(self.model.parameters()), cfg.max_grad_norm, loss) is None:
            return None
        return float(loss)

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
