"""Reward = a weighted sum of terms, each logged on its own (metrics ``reward_terms/<term>``).

Rule terms, computed per completion by :func:`compute_rewards`:

* ``verifier``: the task's verifier score in [0, 1].
* ``format``: 1 when the response follows the answer format (given on its own, so a policy can be
  rewarded for the format before it solves anything).
* ``length``: minus the completion length in units of ``max_new_tokens`` (a linear length penalty).
* ``overlong``: DAPO's soft overlong punishment (Yu et al. 2025, eq. 13): 0 up to
  ``max_new_tokens - overlong_cache``, then linearly down to -1 at ``max_new_tokens``; a truncated
  completion (no EOS) gets -1.

Model and group terms, computed in batches after generation by :class:`polyrl.rewards.RewardScorer`:

* ``reward_model``: a trained Bradley–Terry reward model's score, squashed by a sigmoid.
* ``judge``: an LLM judge's rubric score in [0, 1] (or its pairwise preference over the reference).
* ``majority_vote``: 1 when the extracted answer agrees with the group's majority (TTRL, label-free).

With ``gate: verifier`` the model and group terms are a quality bonus paid only to completions the
verifier marks correct. ``tasks:`` overrides any weight per task.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from polyrl.rewards.judge import JudgeConfig
from polyrl.rewards.reward_model import RewardModelConfig
from polyrl.tasks import Problem, Task, Verdict

RULE_TERMS = ("verifier", "format", "length", "overlong")
MODEL_TERMS = ("reward_model", "judge", "majority_vote")


class RewardConfig(BaseModel):
    """Weights of the reward terms, per-task overrides, and the settings of model-based terms."""

    model_config = ConfigDict(extra="forbid")

    verifier: float = Field(1.0, description="Weight of the task verifier's score.")
    format: float = Field(
        0.0, description="Weight of the format-compliance term (1 if the answer format is followed)."
    )
    length: float = Field(0.0, ge=0.0, description="Weight of the linear length penalty (fraction of max_new_tokens).")
    overlong: float = Field(0.0, ge=0.0, description="Weight of DAPO's soft overlong penalty.")
    overlong_cache: int = Field(
        8, ge=0, description="Tokens before max_new_tokens where the soft overlong penalty starts."
    )
    reward_model: float = Field(0.0, description="Weight of the reward-model term (needs reward.reward_model_source).")
    judge: float = Field(0.0, description="Weight of the LLM-judge term (needs reward.judge_source).")
    majority_vote: float = Field(0.0, description="Weight of the label-free majority-vote term (TTRL).")
    gate: Literal["none", "verifier"] = Field(
        "none", description="'verifier': pay model/group terms only to verified-correct completions."
    )
    tasks: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="Per-task weight overrides, e.g. {essay: {verifier: 0, judge: 1}}."
    )
    reward_model_source: RewardModelConfig | None = Field(
        None, description="The reward model scored by the reward_model term."
    )
    judge_source: JudgeConfig | None = Field(None, description="The judge and rubric scored by the judge term.")

    @field_validator("tasks")
    @classmethod
    def _known_terms(cls, tasks):
        for name, weights in tasks.items():
            unknown = sorted(set(weights) - set(RULE_TERMS) - set(MODEL_TERMS))
            if unknown:
                raise ValueError(
                    f"task {name!r}: unknown reward term(s) {', '.join(unknown)}; known: {', '.join(RULE_TERMS + MODEL_TERMS)}"
                )
        return tasks

    def weights(self, task: str) -> dict[str, float]:
        """The weight of every term for ``task`` (global weights with the task's overrides)."""
        base = {name: float(getattr(self, name)) for name in RULE_TERMS + MODEL_TERMS}
        return {**base, **self.tasks.get(task, {})}


@dataclass
class RewardResult:
    total: float
    terms: dict[str, float]
    verdict: Verdict
    extra: dict[str, float] = field(default_factory=dict)


def soft_overlong(length: int, finished: bool, max_len: int, cache: int) -> float:
    if not finished or length >= max_len:
        return -1.0
    start = max_len - cache
    if length <= start or cache == 0:
        return 0.0
    return -(length - start) / cache


def compute_rewards(
    config: RewardConfig, task: Task, problem: Problem, text: str, length: int, finished: bool, max_new_tokens: int
) -> RewardResult:
    """The rule terms of one completion and their weighted sum (model and group terms come later, batched)."""
    verdict = task.verify(problem, text)
    weights = config.weights(problem.task)
    terms = {"verifier": verdict.score, "format": float(verdict.format_ok)}
    if weights["length"]:
        terms["length"] = -length / max_new_tokens
    if weights["overlong"]:
        terms["overlong"] = soft_overlong(length, finished, max_new_tokens, config.overlong_cache)
    total = sum(weights[name] * value for name, value in terms.items())
    return RewardResult(total, terms, verdict)
