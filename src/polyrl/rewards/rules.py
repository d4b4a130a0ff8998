"""Rule terms: computed per sample from its response, its verdict and (for an episode) its environment's
rewards — registered by name, in the order they are summed.

Completion terms (single-turn):

* ``verifier``: the task's verifier score in [0, 1].
* ``format``: 1 when the response follows the answer format (given on its own, so a policy can be
  rewarded for the format before it solves anything).
* ``length``: minus the completion length in units of ``max_new_tokens`` (a linear length penalty).
* ``overlong``: DAPO's soft overlong punishment (Yu et al. 2025, eq. 13): 0 up to
  ``max_new_tokens - overlong_cache``, then linearly down to -1 at ``max_new_tokens``; a truncated
  completion (no EOS) gets -1.
* ``think_format`` / ``think_length`` (reasoning models, with ``prompt.think_tags``): 1 for thinking in
  exactly one closed block before the answer; minus the share of the token budget spent thinking.

Episode terms (multi-turn):

* ``env_return``: the sum of the environment's per-turn rewards, weighted by ``verifier`` (an environment's
  return is its verifier), with the task's ``reward.tasks`` overrides like every other term.

A term returns None where it does not apply (a zero weight it would only cost time for, no think tags).
A term's name is stated once, where it is registered here; its weight is the ``RewardConfig`` field of that name
(``tests/rewards/test_term_names.py`` holds the two together). So this table holds the built-ins only; a new term of
your own is a reward term (:func:`polyrl.rewards.register_reward_term`), configurable by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from polyrl.tasks import Problem, Task, Verdict
from polyrl.tasks.thinking import think_format, thinking_length


@dataclass(frozen=True)
class Sample:
    """What a rule term sees of one completion or episode."""

    task: Task
    problem: Problem
    text: str
    length: int
    """Response tokens."""
    finished: bool
    max_new_tokens: int
    verdict: Verdict
    weights: dict[str, float]
    """Every term's weight for this sample's task."""
    overlong_cache: int
    turn_rewards: list[float] | None = None
    """An episode's environment reward per policy turn (None for a single-turn completion)."""


@dataclass(frozen=True)
class RuleTerm:
    fn: Callable[[Sample], float | None]
    episode: bool
    """Applies to episodes (True) or to single-turn completions (False)."""
    weight: str
    """The name of its weight in ``RewardConfig.weights``."""


RULES: dict[str, RuleTerm] = {}
"""The built-in rule terms by name, in the order they are computed and summed. Not an extension kind (each has
its own ``RewardConfig`` weight): a term of your own is a reward term (:data:`polyrl.rewards.REWARD_SOURCES`)."""


def rule_term(name: str, episode: bool = False, weight: str | None = None) -> Callable[[Callable], Callable]:
    """Decorator: ``fn(sample) -> value or None`` becomes rule term ``name`` (weighted by ``weight``, default ``name``)."""

    def decorator(fn):
        RULES[name] = RuleTerm(fn, episode, weight or name)
        return fn

    return decorator


def soft_overlong(length: int, finished: bool, max_len: int, cache: int) -> float:
    if not finished or length >= max_len:
        return -1.0
    start = max_len - cache
    if length <= start or cache == 0:
        return 0.0
    return -(length - start) / cache


@rule_term("verifier")
def _verifier(s: Sample) -> float:
    return s.verdict.score


@rule_term("format")
def _format(s: Sample) -> float:
    return float(s.verdict.format_ok)


@rule_term("length")
def _length(s: Sample) -> float | None:
    return -s.length / s.max_new_tokens if s.weights["length"] else None


@rule_term("overlong")
def _overlong(s: Sample) -> float | None:
    if not s.weights["overlong"]:
        return None
    return soft_overlong(s.length, s.finished, s.max_new_tokens, s.overlong_cache)


def _thinks(s: Sample) -> Any:
    tags = s.task.answer_format.think_tags
    return tags if tags is not None and (s.weights["think_format"] or s.weights["think_length"]) else None


@rule_term("think_format")
def _think_format(s: Sample) -> float | None:
    tags = _thinks(s)
    return None if tags is None else think_format(s.text, tags)


@rule_term("think_length")
def _think_length(s: Sample) -> float | None:
    tags = _thinks(s)
    if tags is None:
        return None
    # the thinking's share of the response's characters, in units of the token budget
    return -(thinking_length(s.text, tags) / max(len(s.text), 1)) * s.length / s.max_new_tokens


@rule_term("env_return", episode=True, weight="verifier")
def _env_return(s: Sample) -> float:
    return sum(s.turn_rewards or ())


RULE_TERMS = tuple(name for name, rule in RULES.items() if not rule.episode)
"""The completion terms, in the order they are summed: the names registered above, each also the name of its weight
(a ``RewardConfig`` field)."""


def rule_terms(sample: Sample) -> dict[str, float]:
    """Every rule term that applies to ``sample``, in registration order."""
    episode = sample.turn_rewards is not None
    out = {}
    for name, term in RULES.items():
        if term.episode == episode:
            value = term.fn(sample)
            if value is not None:
                out[name] = value
    return out


def weight_of(term: str, weights: dict[str, float]) -> float:
    """The weight of ``term`` (a rule term's weight may have another name: ``env_return`` → ``verifier``)."""
    rule = RULES.get(term)
    return weights[rule.weight if rule is not None else term]
