"""The one rollout path: RL, held-out evaluation, rejection sampling and the Ray workers all call :func:`rollout`.

Problems go to their task's rollout kind (``task.rollout_kind``), a name in :data:`ROLLOUT_KINDS`, registered like
every other extension kind (``register_rollout_kind``, the ``polyrl.rollout_kinds`` entry-point group):

- ``single_turn`` (here, :func:`rollout_problems`): G completions of each prompt; every :class:`~polyrl.tasks.Task`;
- ``episode`` (:mod:`polyrl.rollout.episodes`): multi-turn episodes; every environment task
  (:class:`~polyrl.envs.environment.EnvTask`, whichever hub its environment comes from);
- ``harness`` (:mod:`polyrl.rollout.harness.rollout`): episodes played by the user's own agent through a local
  OpenAI-compatible endpoint.

One group per problem comes back, in problem order, unscored (:func:`polyrl.rewards.stage.score` makes the rewards).
The sampling settings travel as one :class:`Sampling`, built from the config once by the trainer, so no caller has
its own copy of a default.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from polyrl.envs.env_registry import EnvConfig
from polyrl.policy.generation import GenerationBackend
from polyrl.policy.prompts import PromptBuilder
from polyrl.registry import Registry
from polyrl.rollout.trajectory import Trajectory, number_groups
from polyrl.tasks import Problem

PolicySource = Callable[[], tuple[GenerationBackend, int]]
"""``latest()``: the generation backend of the newest weights and their version (interruptible generation)."""


@dataclass(frozen=True)
class Sampling:
    """How completions are sampled: one group of ``group_size`` per problem. No field has a default: each comes
    from the config (:meth:`of`), the one home of its default."""

    group_size: int
    max_new_tokens: int
    """Token budget of one completion (of one policy turn of an episode)."""
    temperature: float
    top_p: float
    max_episode_tokens: int
    """Token budget of a whole episode, policy and environment tokens (``env.max_episode_tokens``)."""
    env_concurrency: int
    """Environment steps run at once (``env.concurrency``)."""

    @classmethod
    def of(cls, rl, env: EnvConfig) -> Sampling:
        """The sampling of the config's ``rl`` section (an ``RLConfig``) and ``env`` section."""
        return cls(rl.group_size, rl.max_new_tokens, rl.temperature, rl.top_p, env.max_episode_tokens, env.concurrency)


class Play(Protocol):
    """What a rollout kind registers: one unscored group per problem, in problem order (groups not yet numbered).
    ``latest`` (interruptible kinds only; None for the others, which the dispatcher hands the weights ``latest``
    names when they start) gives the newest weights whenever the kind asks."""

    def __call__(
        self,
        problems: list[Problem],
        tasks: dict,
        backend: GenerationBackend,
        prompts: PromptBuilder,
        sampling: Sampling,
        greedy: bool,
        version: int,
        latest: PolicySource | None,
    ) -> list[list[Trajectory]]: ...


@dataclass(frozen=True)
class RolloutKind:
    """A registered rollout kind: how its problems are played, and what its rollouts are."""

    play: Play
    episodic: bool
    """Its verdict is the episode's own outcome (an environment's or an agent's), not one completion's text."""
    interruptible: bool
    """It takes ``latest`` and may move to newer weights while it runs (episodes, turn by turn); the others get
    the weights ``latest`` names when they start, and play first."""


def _kind_entry(name: str, obj, *, episodic: bool, interruptible: bool = False) -> RolloutKind:
    if not callable(obj):
        raise TypeError(f"rollout kind {name!r} must be a function play(problems, tasks, backend, ...), got {obj!r}")
    return RolloutKind(obj, episodic, interruptible)


ROLLOUT_KINDS: Registry[RolloutKind] = Registry(
    "rollout kind",
    "polyrl.rollout_kinds",
    builtins=("polyrl.rollout.dispatch", "polyrl.rollout.episodes", "polyrl.rollout.harness.rollout"),
    entry=_kind_entry,
)
"""Rollout kinds by name (``task.rollout_kind``): the built-in ``single_turn``, ``episode`` and ``harness``, every
:func:`register_rollout_kind` and the plugins of the ``polyrl.rollout_kinds`` entry-point group."""


def register_rollout_kind(name: str, *, episodic: bool, interruptible: bool = False):
    """Decorator: ``play`` (a :class:`Play`) becomes rollout kind ``name``, the one that rolls out the problems of
    every task whose ``rollout_kind`` is ``name``."""
    return ROLLOUT_KINDS.register(name, episodic=episodic, interruptible=interruptible)


def rollout_kind(task) -> RolloutKind:
    """The registered rollout kind of ``task`` (a one-line UserError naming the known kinds otherwise)."""
    return ROLLOUT_KINDS.lookup(task.rollout_kind)


def rollout_groups(
    problems: list[Problem],
    tasks: dict,
    backend: GenerationBackend,
    prompts: PromptBuilder,
    sampling: Sampling,
    greedy: bool = False,
    version: int = 0,
    latest: PolicySource | None = None,
) -> list[list[Trajectory]]:
    """One unscored group per problem, in problem order (groups not yet numbered).

    Each kind plays its problems in one call: first the kinds that take the weights once (the weights ``latest``
    names when they start), then the interruptible ones, which ``latest`` makes interruptible (see
    :func:`~polyrl.rollout.episodes.episode_groups`); by name within each."""
    by_kind: dict[str, list[int]] = {}
    for i, p in enumerate(problems):
        by_kind.setdefault(tasks[p.task].rollout_kind, []).append(i)
    kinds = {name: ROLLOUT_KINDS.lookup(name) for name in by_kind}
    out: list[list[Trajectory] | None] = [None] * len(problems)
    for name in sorted(kinds, key=lambda n: (kinds[n].interruptible, n)):
        kind, idx = kinds[name], by_kind[name]
        if kind.interruptible:
            play_backend, play_version, play_latest = backend, version, latest
        else:
            play_backend, play_version = latest() if latest is not None else (backend, version)
            play_latest = None
        chosen = [problems[i] for i in idx]
        groups = kind.play(chosen, tasks, play_backend, prompts, sampling, greedy, play_version, play_latest)
        for i, group in zip(idx, groups):
            out[i] = group
    if len(kinds) > 1:  # explicit all-policy masks on completions, so a mixed batch collates with one mask per row
        for t in (t for group in out for t in group):
            if t.policy_mask is None:
                t.policy_mask = [1] * len(t.response_ids)
    return out  # type: ignore[return-value]


def rollout(
    problems: list[Problem],
    tasks: dict,
    backend: GenerationBackend,
    prompts: PromptBuilder,
    sampling: Sampling,
    greedy: bool = False,
    version: int = 0,
    latest: PolicySource | None = None,
) -> list[Trajectory]:
    """:func:`rollout_groups`, flat: group ``k`` (``Trajectory.group``) answers ``problems[k]``."""
    return number_groups(rollout_groups(problems, tasks, backend, prompts, sampling, greedy, version, latest))


@register_rollout_kind("single_turn", episodic=False)
def _single_turn(
    problems, tasks, backend, prompts, sampling: Sampling, greedy, version, latest
) -> list[list[Trajectory]]:
    """The single-turn kind: :func:`rollout_problems` with the run's sampling."""
    return rollout_problems(
        problems,
        backend,
        prompts,
        sampling.group_size,
        sampling.max_new_tokens,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        greedy=greedy,
        version=version,
    )


def rollout_problems(
    problems: list[Problem],
    backend: GenerationBackend,
    prompts: PromptBuilder,
    group_size: int,
    max_new_tokens: int,
    *,
    temperature: float,
    top_p: float,
    greedy: bool = False,
    version: int = 0,
) -> list[list[Trajectory]]:
    """One group of ``group_size`` completions per problem, in problem order (groups not yet numbered)."""
    prompt_ids = [prompts.ids(p) for p in problems]
    flat = [ids for ids in prompt_ids for _ in range(group_size)]
    gens = backend.generate(flat, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, greedy=greedy)
    behaviour = getattr(backend, "behaviour_logprobs", False)
    groups: list[list[Trajectory]] = [[] for _ in problems]
    for k, gen in enumerate(gens):
        problem = problems[k // group_size]
        groups[k // group_size].append(
            Trajectory.from_generation(
                problem, gen, version=version, behaviour=behaviour, prompt_text=prompts.content(problem)
            )
        )
    return groups
