"""What an agent's return value says about its episode: :class:`Outcome` and the reader of the accepted shapes.

A returned reward is held to the standard of a user's reward function (:func:`polyrl.rewards.callables.
checked_value`): a number (bool, int, float, numpy or torch scalar) that is finite and at most
``REWARD_BOUND`` in magnitude. Anything else — ``1e200``, NaN, infinity, a string — scores 0 and is a
failure of the ``env_return`` term (counted in ``reward_failures/env_return``), so that one agent's bad
value cannot make every update non-finite. A named number beyond the bound is dropped the same way
(``reward_failures/harness/<name>``); named values that are not numbers are not terms and are ignored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from polyrl.rewards.callables import checked_value

__all__ = ["Outcome", "outcome"]


@dataclass(frozen=True)
class Outcome:
    """What an agent's return value says about its episode."""

    reward: float | None
    """None: the task's verifier scores the last completion."""
    correct: bool | None = None
    terms: Mapping[str, float] = dataclasses.field(default_factory=dict)
    failures: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Reward terms whose returned value was unusable (term → reason): each scores 0."""


def outcome(value: Any) -> Outcome:
    """Read an agent's return value: None, a reward, a mapping (``reward``, ``correct: bool``, named
    numbers) or an :class:`Outcome`; what is unusable in it is a counted failure, never an exception."""
    if value is None:
        return Outcome(None)
    if isinstance(value, Outcome):
        reward, correct, named = value.reward, value.correct, dict(value.terms)
    elif isinstance(value, Mapping):
        reward, named = value.get("reward"), {k: v for k, v in value.items() if k not in ("reward", "correct")}
        correct = value.get("correct") if isinstance(value.get("correct"), bool) else None  # a number is a term
    else:
        reward, correct, named = value, None, {}
    failures: dict[str, str] = {}
    if reward is not None:
        reward, reason = checked_value(reward)
        if reason is not None:
            failures["env_return"] = reason
    terms = {}
    for name, raw in named.items():
        if isinstance(raw, bool | str | bytes) or not hasattr(raw, "__float__"):
            continue
        number, reason = checked_value(raw)
        if reason is None:
            terms[str(name)] = number
        else:
            failures[f"harness/{name}"] = reason
    return Outcome(reward, correct, terms, failures)
