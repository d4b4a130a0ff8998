"""Model and group reward terms, scored in batches after generation and added to each trajectory.

Reward sources are registered by name; a source sees a whole batch of trajectories at once (a reward
model scores them in forward passes, a judge in concurrent calls, majority vote per group)::

    @register_reward_source("my_term")
    def my_term(config: RewardConfig, device: str) -> Callable[[list[Trajectory]], list[tuple[float, str | None]]]: ...

Each source returns ``(value, failure reason or None)`` per trajectory. The scorer writes
``reward_terms[<term>]``, adds ``weight * value`` to ``reward`` (with ``gate: verifier`` only for
verified-correct completions) and records failures in ``Trajectory.reward_failures`` (a failure is a
zero value with a reason; the trainer logs ``reward_failures/<term>`` counts). A swapped pairwise judge
also marks samples whose two verdicts disagree (``Trajectory.judge_position_inconsistent``, logged per step
as ``judge_position_inconsistent``); those keep their judge reward.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable

from polyrl.errors import UserError
from polyrl.rewards.compose import MODEL_TERMS, RewardConfig

Scores = list[tuple[float, "str | None"]]
SourceFactory = Callable[[RewardConfig, str], Callable[[list], Scores]]
# A swapped pairwise judgment whose two orders disagree: not a failure (the sample keeps its averaged judge
# reward), but counted per step, so the metrics show how position-biased the judge is.
REWARD_SOURCES: dict[str, SourceFactory] = {}


def register_reward_source(name: str) -> Callable[[SourceFactory], SourceFactory]:
    def decorator(factory: SourceFactory) -> SourceFactory:
        REWARD_SOURCES[name] = factory
        return factory

    return decorator


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


class RewardScorer:
    """The model and group terms of a run, built once at start-up (configuration errors surface here)."""

    def __init__(self, config: RewardConfig, task_names: list[str], device: str = "cpu"):
        self.config = config
        unknown = sorted(set(config.tasks) - set(task_names))
        if unknown:
            raise UserError(f"reward.tasks names task(s) not in the mix: {', '.join(unknown)}")
        self.weights = {name: config.weights(name) for name in task_names}
        used = [term for term in MODEL_TERMS if any(w[term] for w in self.weights.values())]
        self.sources = {term: REWARD_SOURCES[term](config, device) for term in used}

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
