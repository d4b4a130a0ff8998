"""The built-in batched reward terms: majority vote (label-free, per group), a trained reward model and an
LLM judge. Each is a source factory in :data:`~polyrl.rewards.terms.REWARD_SOURCES`."""

from __future__ import annotations

from collections import Counter, defaultdict

from polyrl.errors import UserError
from polyrl.rewards.callables import Scores
from polyrl.rewards.terms import register_reward_source

_REGISTERED: list[str] = []


def _model_term(name: str):
    """``register_reward_source`` for a built-in batched term: ``name`` is also its weight's ``RewardConfig`` field."""
    _REGISTERED.append(name)
    return register_reward_source(name)


def majority_vote_scores(answers: list[str | None]) -> Scores:
    """TTRL's label-free reward (Zuo et al. 2025, "TTRL: Test-Time Reinforcement Learning", eq. 2–3): the
    most common extracted answer of the group is the pseudo-label; a completion earns 1 when its answer
    equals it. Completions without an answer earn 0 (reason ``no_answer``); ties go to the answer seen first."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return [(0.0, "no_answer")] * len(answers)
    label = max(counts, key=lambda a: (counts[a], -answers.index(a)))
    return [(0.0, "no_answer") if a is None else (float(a == label), None) for a in answers]


def _prompt_text(t) -> str:
    return t.problem.question


@_model_term("reward_model")
def _reward_model(config, device: str):
    from polyrl.rewards.reward_model import RewardModelSource

    if config.reward_model_source is None:
        raise UserError("the reward_model term has a weight but reward.reward_model_source is not set")
    source = RewardModelSource(config.reward_model_source, device)
    return lambda trajs: source.score([_prompt_text(t) for t in trajs], [t.text for t in trajs])


@_model_term("judge")
def _judge(config, device: str):
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


@_model_term("majority_vote")
def _majority_vote(config, device: str):
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


MODEL_TERMS = tuple(_REGISTERED)
"""The built-in batched terms, in the order they are scored: the names registered above, each also the name of its
weight (a ``RewardConfig`` field)."""
