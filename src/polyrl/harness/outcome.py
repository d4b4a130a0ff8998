"""What an agent's return value says about its episode: :class:`Outcome` and the reader of the accepted shapes."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Outcome", "outcome"]


@dataclass(frozen=True)
class Outcome:
    """What an agent's return value says about its episode."""

    reward: float | None
    """None: the task's verifier scores the last completion."""
    correct: bool | None = None
    terms: Mapping[str, float] = dataclasses.field(default_factory=dict)


def outcome(value: Any) -> Outcome:
    """Read an agent's return value (ValueError when it is none of the accepted shapes)."""
    if value is None or isinstance(value, Outcome):
        return value or Outcome(None)
    if isinstance(value, bool) or not isinstance(value, (int, float, Mapping)):
        raise ValueError(f"an agent returns a number, a mapping or None, not {type(value).__name__}")
    if not isinstance(value, Mapping):
        value = {"reward": value}
    reward = value.get("reward")
    correct = value.get("correct") if isinstance(value.get("correct"), bool) else None  # a number is a term
    terms = {str(k): float(v) for k, v in value.items() if k != "reward" and _number(v)}
    if reward is not None and not (_number(reward) and math.isfinite(float(reward))):
        raise ValueError(f"an agent's reward must be a finite number, not {reward!r}")
    return Outcome(None if reward is None else float(reward), None if correct is None else bool(correct), terms)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
