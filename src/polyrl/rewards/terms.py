"""The registry of batched reward terms (model, group and user terms) and the decorators that fill it.

One registry (:data:`REWARD_SOURCES`) holds every term scored after generation by name, and a registered
term is configurable by name (``reward.<name>: weight`` or ``reward.terms``). A plain function registers
with::

    @register_reward_term("brevity")
    def brevity(response: str, **kwargs) -> float:             # per completion
        return -len(response) / 1000

    @register_reward_term("diversity")
    def diversity(responses: list[str]) -> list[float]: ...     # per group (plural argument names)

    @register_reward_term("short")
    def short(completions, prompts=None, **kwargs) -> list[float]: ...   # TRL's signature, batched

(see :mod:`polyrl.rewards.callables` for the arguments and the limits every call runs under). A term that
needs set-up (a model, a client) registers a source factory, which sees the whole batch at once::

    @register_reward_source("my_term")
    def my_term(config: RewardConfig, device: str) -> Callable[[list[Trajectory]], list[tuple[float, str | None]]]: ...

Each source returns ``(value, failure reason or None)`` per trajectory; a failure scores 0 and is counted
(``reward_failures/<term>``), never a crash.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from polyrl.registry import Registry
from polyrl.rewards.callables import TERM_TIMEOUT, Scores, user_term_scores
from polyrl.rewards.rules import RULES
from polyrl.tasks.verifiers import UserCallable, user_callable

RESERVED = (*RULES, "overlong_cache", "gate", "tasks", "reward_model_source", "judge_source", "terms", "term_timeout")
"""Names a new term cannot take: the rule terms (``env_return`` included) and ``RewardConfig``'s other options."""

SourceFactory = Callable[[Any, str], Callable[[list], Scores]]


def _term_entry(name: str, obj: Any, factory: bool = False) -> SourceFactory:
    """What the registry holds for term ``name``: ``obj`` itself when it is a factory (``register_reward_source``),
    else the factory of the reward function ``obj`` (``register_reward_term``, or a ``polyrl.rewards`` entry point
    naming a function)."""
    if name in RESERVED:
        raise ValueError(f"{name!r} is a built-in reward option, not a name for a new term")
    if factory:
        return obj
    term = user_callable(obj, name)
    return lambda config, device: callable_source(term, name, config.term_timeout)


REWARD_SOURCES: Registry[SourceFactory] = Registry(
    "reward term", "polyrl.rewards", builtins=("polyrl.rewards.builtin_terms",), entry=_term_entry
)
"""The reward-term registry: a term's name → ``factory(config, device)`` returning a function that scores a
list of trajectories as ``[(value, failure reason or None), …]``. The built-in model/group terms, every
:func:`register_reward_term` / :func:`register_reward_source` and the plugins of the ``polyrl.rewards``
entry-point group land here."""


def register_reward_term(name: str) -> Callable[[Callable], Callable]:
    """Decorator: a reward function (per completion, per group or TRL's signature) becomes reward term ``name``."""
    return REWARD_SOURCES.register(name)


def register_reward_source(name: str) -> Callable[[SourceFactory], SourceFactory]:
    """Decorator: ``factory(config, device) -> score(trajectories) -> Scores`` becomes reward term ``name``."""
    return REWARD_SOURCES.register(name, factory=True)


def callable_source(fn: UserCallable, term: str, timeout: float | None = TERM_TIMEOUT):
    """A reward source from a user function, each call limited to ``timeout`` seconds; its first failure is also
    printed once (then only counted)."""
    warned = []

    def score(trajs) -> Scores:
        scores = user_term_scores(fn, trajs, timeout)
        failure = next((reason for _, reason in scores if reason is not None), None)
        if failure is not None and not warned:
            warned.append(True)
            print(
                f"polyrl: warning: reward term {term!r} ({fn.path}) failed: {failure} "
                f"(scored 0, counted in reward_failures/{term}; further failures are only counted)",
                file=sys.stderr,
            )
        return scores

    return score
