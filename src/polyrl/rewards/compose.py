"""Reward = a weighted sum of terms, each logged on its own.

* ``verifier``: the task's verifier score in [0, 1].
* ``format``: 1 when the response follows the answer format (given on its own, so a policy can be
  rewarded for the format before it solves anything).
* ``length``: minus the completion length in units of ``max_new_tokens`` (a linear length penalty).
* ``overlong``: DAPO's soft overlong punishment (Yu et al. 2025, eq. 13): 0 up to
  ``max_new_tokens - overlong_cache``, then linearly down to -1 at ``max_new_tokens``; a truncated
  completion (no EOS) gets -1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from polyrl.tasks import Problem, Task, Verdict


class RewardConfig(BaseModel):
    """Weights of the reward terms."""

    model_config = ConfigDict(extra="forbid")

    verifier: float = Field(1.0, description="Weight of the task verifier's score.")
    format: float = Field(0.0, description="Weight of the format-compliance term (1 if the answer format is followed).")
    length: float = Field(0.0, ge=0.0, description="Weight of the linear length penalty (fraction of max_new_tokens).")
    overlong: float = Field(0.0, ge=0.0, description="Weight of DAPO's soft overlong penalty.")
    overlong_cache: int = Field(8, ge=0, description="Tokens before max_new_tokens where the soft overlong penalty starts.")


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
    verdict = task.verify(problem, text)
    terms = {"verifier": verdict.score, "format": float(verdict.format_ok)}
    if config.length:
        terms["length"] = -length / max_new_tokens
    if config.overlong:
        terms["overlong"] = soft_overlong(length, finished, max_new_tokens, config.overlong_cache)
    weights = config.model_dump()
    total = sum(weights[name] * value for name, value in terms.items())
    return RewardResult(total, terms, verdict)
