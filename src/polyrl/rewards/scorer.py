"""Model, group and user reward terms, scored in batches after generation and added to each trajectory.

One registry (:data:`~polyrl.rewards.compose.REWARD_SOURCES`) holds every such term by name, and a
registered term is configurable by name (``reward.<name>: weight`` or ``reward.terms``). A plain function
registers with::

    @register_reward_term("brevity")
    def brevity(response: str) -> float:                       # per completion
        return -len(response) / 1000

    @register_reward_term("diversity")
    def diversity(responses: list[str]) -> list[float]: ...     # per group (plural argument names)

(the arguments it may take are listed in :class:`polyrl.tasks.verifiers.UserCallable`), and
``reward.terms: [{fn: "package.module:function", weight}]`` uses a function without registering it. A
term that needs set-up (a model, a client) registers a source factory, which sees the whole batch at once
(a reward model scores it in forward passes, a judge in concurrent calls, majority vote per group)::

    @register_reward_source("my_term")
    def my_term(config: RewardConfig, device: str) -> Callable[[list[Trajectory]], list[tuple[float, str | None]]]: ...

Each source returns ``(value, failure reason or None)`` per trajectory; a function that raises, returns a
non-number or NaN is such a failure (value 0, reason ``error: <exception>`` or ``not_finite``), counted,
never a crash. The scorer writes
``reward_terms[<term>]``, adds ``weight * value`` to ``reward`` (with ``gate: verifier`` only for
verified-correct completions) and records failures in ``Trajectory.reward_failures`` (a failure is a
zero value with a reason; the trainer logs ``reward_failures/<term>`` counts). A swapped pairwise judge
also marks samples whose two verdicts disagree (``Trajectory.judge_position_inconsistent``, logged per step
as ``judge_position_inconsistent``); those keep their judge reward.
"""

from __future__ import annotations

import math
import sys
from collections import Counter, defaultdict
from collections.abc import Callable

from polyrl.errors import UserError
from polyrl.rewards.compose import MODEL_TERMS, REWARD_SOURCES, RULE_TERMS, RewardConfig
from polyrl.tasks.verifiers import UserCallable, import_callable, user_callable

Scores = list[tuple[float, "str | None"]]
SourceFactory = Callable[[RewardConfig, str], Callable[[list], Scores]]
# A swapped pairwise judgment whose two orders disagree: not a failure (the sample keeps its averaged judge
# reward), but counted per step, so the metrics show how position-biased the judge is.


def register_reward_source(name: str) -> Callable[[SourceFactory], SourceFactory]:
    """Decorator: ``factory(config, device) -> score(trajectories) -> Scores`` becomes reward term ``name``."""
    if name in RULE_TERMS or (name in RewardConfig.model_fields and name not in MODEL_TERMS):
        raise ValueError(f"{name!r} is a built-in reward option, not a name for a new term")

    def decorator(factory: SourceFactory) -> SourceFactory:
        return REWARD_SOURCES.add(name, factory)

    return decorator


def register_reward_term(name: str):
    """Decorator: a function of ``problem, response, extracted, target, verdict`` (any of them) returning a
    number, or of ``problems, responses, verdicts`` returning one number per completion of the group,
    becomes reward term ``name``."""

    def decorator(fn):
        term = user_callable(fn, name)
        register_reward_source(name)(lambda config, device: callable_source(term, name))
        return fn

    return decorator


def _value(raw) -> tuple[float, str | None]:
    """A user function's return value as a score, or a failure (0, reason)."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return 0.0, f"not_a_number: {type(raw).__name__}"
    return (value, None) if math.isfinite(value) else (0.0, "not_finite")


def _completion_scores(fn: UserCallable, trajs) -> Scores:
    out: Scores = []
    for t in trajs:
        try:
            raw = fn(
                problem=t.problem,
                response=t.text,
                extracted=t.verdict.answer,
                target=t.problem.answer,
                verdict=t.verdict,
            )
        except Exception as exc:
            out.append((0.0, f"error: {type(exc).__name__}: {exc}"[:200]))
            continue
        out.append(_value(raw))
    return out


def _group_scores(fn: UserCallable, trajs) -> Scores:
    groups: dict[int, list[int]] = defaultdict(list)
    for i, t in enumerate(trajs):
        groups[t.group].append(i)
    out: Scores = [(0.0, None)] * len(trajs)
    for idx in groups.values():
        members = [trajs[i] for i in idx]
        try:
            raw = fn(
                problems=[t.problem for t in members],
                responses=[t.text for t in members],
                verdicts=[t.verdict for t in members],
            )
            values = list(raw)
            if len(values) != len(idx):
                raise ValueError(f"returned {len(values)} values for a group of {len(idx)}")
        except Exception as exc:
            failure = f"error: {type(exc).__name__}: {exc}"[:200]
            for i in idx:
                out[i] = (0.0, failure)
            continue
        for i, v in zip(idx, values):
            out[i] = _value(v)
    return out


def callable_source(fn: UserCallable, term: str):
    """A reward source from a user function; its first failure is also printed once (then only counted)."""
    warned = []

    def score(trajs) -> Scores:
        scores = (_group_scores if fn.group else _completion_scores)(fn, trajs)
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


def majority_vote_scores(answers: list[str | None]) -> Scores:
    """TTRL's label-free reward (Zuo et al. 2025, "TTRL: Test-Time Reinforcement Learning", eq. 2–3): the
    most common extracted answer of the group is the pseudo-label; a completion earns 1 when its answer
    equals it. Completions without an answer earn 0 (reason ``no_answer``); ties go to the answer seen first."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return [(0.0, "no_answer")] * len(answers)
    label = max(counts, key=lambda a: (counts[a], -answers.index(a)))
    return [(0.0, "no_answer") if a is None else (float(a == label), None) for a in answers]


@register_reward_source("majority_vote")
def _majority_vote(config: RewardConfig, device: str):
    def score(trajs) -> Scores:
        groups: dict[int, list[int]] = defaultdict(list)
        for i, t in enumerate(trajs):
            groups[t.group].append(i)
        out: list = [None] * len(trajs)
        for idx in groups.values():
            answers = [trajs[i].verdict.answer for i in idx]
            for i, s in zip(idx, majority_vote_scores(answers)):
                out[i] = s
        return out

    return score


def _prompt_text(t) -> str:
    return t.problem.question


@register_reward_source("reward_model")
def _reward_model(config: RewardConfig, device: str):
    from polyrl.rewards.reward_model import RewardModelSource

    if config.reward_model_source is None:
        raise UserError("the reward_model term has a weight but reward.reward_model_source is not set")
    source = RewardModelSource(config.reward_model_source, device)
    return lambda trajs: source.score([_prompt_text(t) for t in trajs], [t.text for t in trajs])


@register_reward_source("judge")
def _judge(config: RewardConfig, device: str):
    from polyrl.rewards.judge import JudgeSource

    if config.judge_source is None:
        raise UserError("the judge term has a weight but reward.judge_source is not set")
    source = JudgeSource(config.judge_source, device)

    def score(trajs) -> Scores:
        out: Scores = [(0.0, "no_reference")] * len(trajs)
        pairwise = config.judge_source.mode == "pairwise"
        idx = [i for i, t in enumerate(trajs) if not pairwise or t.problem.solution is not None]
        refs = [str(trajs[i].problem.solution) if trajs[i].problem.solution is not None else None for i in idx]
        judged = source.judge([_prompt_text(trajs[i]) for i in idx], [trajs[i].text for i in idx], refs) if idx else []
        for i, j in zip(idx, judged):
            out[i] = (j.value, j.reason)
            if j.position_inconsistent:  # counted per step as judge_position_inconsistent
                trajs[i].judge_position_inconsistent = True
        return out

    score.judge_source = source  # its counters (calls, position_inconsistent) for callers and tests
    return score


def _source(term, config: RewardConfig, device: str):
    """The scoring function of a built-in term (by name) or of a ``reward.terms`` entry."""
    if isinstance(term, str):
        return REWARD_SOURCES[term](config, device)
    if term.fn is not None:
        return callable_source(import_callable(term.fn), term.label)
    return REWARD_SOURCES[term.name](config, device)


class RewardScorer:
    """The model and group terms of a run, built once at start-up (configuration errors surface here)."""

    def __init__(self, config: RewardConfig, task_names: list[str], device: str = "cpu"):
        self.config = config
        unknown = sorted(set(config.tasks) - set(task_names))
        if unknown:
            raise UserError(f"reward.tasks names task(s) not in the mix: {', '.join(unknown)}")
        for spec in config.terms:
            outside = sorted(set(spec.tasks or ()) - set(task_names))
            if outside:
                raise UserError(f"reward term {spec.label!r} names task(s) not in the mix: {', '.join(outside)}")
        self.weights = {name: config.weights(name) for name in task_names}
        terms = {**{term: term for term in MODEL_TERMS}, **{spec.label: spec for spec in config.terms}}
        used = [term for term in terms if any(w[term] for w in self.weights.values())]
        self.sources = {term: _source(terms[term], config, device) for term in used}

    def __bool__(self) -> bool:
        return bool(self.sources)

    def score(self, trajs: list) -> None:
        """Add every model/group term to ``trajs`` in place."""
        for term, source in self.sources.items():
            chosen = [t for t in trajs if self.weights[t.task][term]]
            if not chosen:
                continue
            for t, (value, reason) in zip(chosen, source(chosen)):
                t.reward_terms[term] = value
                if reason is not None:
                    t.reward_failures[term] = reason
                if self.config.gate == "verifier" and not t.verdict.correct:
                    continue
                t.reward += self.weights[t.task][term] * value
