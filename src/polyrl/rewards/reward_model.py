"""Bradley–Terry reward models as a reward source (term ``reward_model``).

A reward model is any Hugging Face ``AutoModelForSequenceClassification`` with ``num_labels=1`` (for the
tiny default: a ``LlamaForSequenceClassification`` on the tiny config and character tokenizer). It is
trained on preference pairs by ``polyrl rm train`` (:mod:`polyrl.rewards.rm_training`) and scores
``prompt + response`` text; the reward is ``sigmoid(score)`` (the Bradley–Terry probability of beating a
response of score 0) or the raw score.

Tokenizers: the reward model always **re-tokenizes from text** with its own tokenizer, so it need not
share the policy's vocabulary (the policy's token ids are never fed to it). Start-up checks what can be
checked without scoring: a sequence-classification config with one label, a tokenizer that loads, and
a pad token (the EOS token is used when there is none).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from polyrl.errors import UserError

if TYPE_CHECKING:
    import torch


REWARD_MODEL_MAX_LENGTH = 512
"""Longest prompt + response in reward-model tokens: what ``polyrl rm train`` trains on and, by default, what a
reward-model term scores (``reward.reward_model.max_length``)."""


class RewardModelConfig(BaseModel):
    """A trained reward model used as a reward term."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        description="Directory written by `polyrl rm train`, or any Hugging Face sequence-classification model with one label (a directory or a Hub id)."
    )
    revision: str | None = Field(
        None, description="Hub ids: the branch, tag or commit (a run records the commit it loaded)."
    )
    normalize: Literal["sigmoid", "none"] = Field(
        "sigmoid", description="Map the raw score to [0, 1] with a sigmoid, or use it as is."
    )
    batch_size: int = Field(64, ge=1, description="Completions scored per forward pass.")
    max_length: int = Field(
        REWARD_MODEL_MAX_LENGTH,
        ge=8,
        description="Longest prompt + response in reward-model tokens (longer ones are cut from the left).",
    )


def build_tiny_reward_model(seed: int = 0, **shape):
    """A fresh ``LlamaForSequenceClassification`` (one label) on the tiny config and character tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from polyrl.policy.tiny import TinyModelConfig, build_tiny_tokenizer

    cfg = TinyModelConfig(**shape)
    tokenizer = build_tiny_tokenizer()
    hf = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=cfg.max_positions,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForSequenceClassification(hf)
    return model, tokenizer


def load_reward_model(path: str | Path, device: torch.device | str, revision: str | None = None):
    """``(model, tokenizer)`` of a reward model (a directory or a Hub id at ``revision``), the model on ``device``;
    UserError when it is not one."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from polyrl.policy.model_files import check_weight_files
    from polyrl.policy.resolve import resolve_model_path

    p = Path(resolve_model_path(str(path), revision))
    cfg_file = p / "config.json"
    if not cfg_file.is_file():
        raise UserError(f"reward model {str(path)!r} has no config.json: not a Hugging Face model directory")
    try:
        cfg = json.loads(cfg_file.read_text())
    except ValueError:
        raise UserError(f"reward model config {cfg_file} is not valid JSON") from None
    labels = cfg.get("num_labels", len(cfg.get("id2label", {})) or 2)
    archs = cfg.get("architectures") or []
    if labels != 1 or not any(a.endswith("ForSequenceClassification") for a in archs):
        raise UserError(
            f"reward model {str(path)!r} must be a sequence-classification model with num_labels=1 "
            f"(found architectures={archs}, num_labels={labels}); train one with `polyrl rm train`"
        )
    check_weight_files(p)
    try:
        tokenizer = AutoTokenizer.from_pretrained(p)
        model = AutoModelForSequenceClassification.from_pretrained(p)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot load reward model from {str(path)!r}: {str(exc).splitlines()[0]}") from None
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:
            raise UserError(f"reward model tokenizer at {str(path)!r} has neither a pad nor an EOS token")
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id
    return model.to(device).eval(), tokenizer


def pair_text(tokenizer, prompt: str, response: str) -> str:
    """How a (prompt, response) pair is shown to a reward model: its chat template when it has one."""
    if getattr(tokenizer, "chat_template", None):
        messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
        return tokenizer.apply_chat_template(messages, tokenize=False)
    return f"{prompt}\n{response}"


def encode_pairs(tokenizer, prompts: list[str], responses: list[str], max_length: int):
    """Right-padded ids and attention mask, each row cut from the left to ``max_length`` tokens."""
    import torch

    rows = [
        tokenizer(pair_text(tokenizer, p, r), add_special_tokens=False).input_ids[-max_length:]
        for p, r in zip(prompts, responses)
    ]
    width = max(1, max(len(r) for r in rows))
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1
    return ids, mask


class RewardModelSource:
    """Batched scoring of completions by a reward model (one forward pass per ``batch_size`` completions)."""

    def __init__(self, config: RewardModelConfig, device: torch.device | str):
        """``device``: where the reward model runs (the run's placement's)."""

        self.config = config
        self.device = device
        self.model, self.tokenizer = load_reward_model(config.path, self.device, config.revision)

    def raw_scores(self, prompts: list[str], responses: list[str]) -> list[float]:
        import torch

        out: list[float] = []
        with torch.no_grad():
            for start in range(0, len(prompts), self.config.batch_size):
                ids, mask = encode_pairs(
                    self.tokenizer,
                    prompts[start : start + self.config.batch_size],
                    responses[start : start + self.config.batch_size],
                    self.config.max_length,
                )
                logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
                out += logits[:, 0].float().cpu().tolist()
        return out

    def score(self, prompts: list[str], responses: list[str]) -> list[tuple[float, str | None]]:
        """``(reward, failure reason or None)`` per completion; a non-finite score is a logged zero."""
        out = []
        for s in self.raw_scores(prompts, responses):
            if not math.isfinite(s):
                out.append((0.0, "non_finite_score"))
            elif self.config.normalize == "sigmoid":
                out.append((1.0 / (1.0 + math.exp(-max(min(s, 60.0), -60.0))), None))
            else:
                out.append((s, None))
        return out
