"""Reward = a weighted sum of terms, each logged on its own (metrics ``reward_terms/<term>``).

Rule terms (``verifier``, ``format``, ``length``, ``overlong``, ``think_format``, ``think_length`` and an
episode's ``env_return``) are listed in :mod:`polyrl.rewards.rules`; model and group terms (``reward_model``,
``judge``, ``majority_vote``) in :mod:`polyrl.rewards.builtin_terms`. :func:`polyrl.rewards.stage.score`
computes them all for a batch and sums them with the task's weights.

Your own terms, computed with the model and group terms (see :mod:`polyrl.rewards.terms`)::

    reward:
      brevity: 0.5                                   # a term registered by name (register_reward_term)
      terms:
        - {fn: "mypkg.rewards:politeness", weight: 0.2}             # a function, imported by path
        - {name: brevity, weight: 0.1, tasks: [gsm8k]}              # only on some tasks

A term's function takes any of ``problem``, ``response``, ``extracted``, ``target``, ``verdict`` (per
completion; ``**kwargs`` takes them all) or ``problems``, ``responses``, ``verdicts`` (per group), or has TRL's
signature ``f(completions, prompts=None, **kwargs)``; see :mod:`polyrl.rewards.callables`.

With ``gate: verifier`` the terms computed after generation (model, group and your own) are a quality
bonus paid only to completions the verifier marks correct. ``tasks:`` overrides any weight per task.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from polyrl.rewards.builtin_terms import MODEL_TERMS
from polyrl.rewards.callables import TERM_TIMEOUT
from polyrl.rewards.judge import JudgeConfig
from polyrl.rewards.reward_model import RewardModelConfig
from polyrl.rewards.rules import RULE_TERMS, Sample, rule_terms, weight_of
from polyrl.rewards.terms import REWARD_SOURCES
from polyrl.tasks import Problem, Task, Verdict

__all__ = ["RewardConfig", "RewardResult", "RewardTermSpec"]


class RewardTermSpec(BaseModel):
    """One reward term of ``reward.terms``: a registered term by name, or a function by import path."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, description="A registered term's name (or the label of fn's term).")
    fn: str | None = Field(None, description="'package.module:function' scoring completions or groups.")
    weight: float = Field(1.0, description="Weight of the term in the reward.")
    tasks: list[str] | None = Field(None, description="Tasks the term applies to (default: every task).")

    @model_validator(mode="after")
    def _named(self):
        if self.name is None and self.fn is None:
            raise ValueError("a reward term needs name (a registered term) or fn ('package.module:function')")
        if self.fn is None and self.name not in REWARD_SOURCES:
            raise ValueError(REWARD_SOURCES.unknown_message(self.name))
        return self

    @property
    def label(self) -> str:
        """The term's name in metrics (``reward_terms/<label>``): ``name``, else the function's name."""
        return self.name or self.fn.rpartition(":")[2].rpartition(".")[2]


class RewardConfig(BaseModel):
    """Weights of the reward terms, per-task overrides, and the settings of model-based terms."""

    model_config = ConfigDict(extra="forbid")

    verifier: float = Field(1.0, description="Weight of the task verifier's score.")
    format: float = Field(
        0.0, description="Weight of the format-compliance term (1 if the answer format is followed)."
    )
    length: float = Field(0.0, ge=0.0, description="Weight of the linear length penalty (fraction of max_new_tokens).")
    overlong: float = Field(0.0, ge=0.0, description="Weight of DAPO's soft overlong penalty.")
    think_format: float = Field(
        0.0,
        description="Reasoning models (prompt.think_tags): weight of 1 for thinking in exactly one closed block before the answer.",
    )
    think_length: float = Field(
        0.0,
        ge=0.0,
        description="Reasoning models (prompt.think_tags): weight of the thinking length penalty, minus the share of max_new_tokens spent inside the think block.",
    )
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
    terms: list[RewardTermSpec] = Field(
        default_factory=list, description="More terms: a list of {name or fn, weight, tasks} (see docs/rewards.md)."
    )
    term_timeout: float = Field(
        TERM_TIMEOUT,
        gt=0,
        description="Seconds one call of a reward function may take; a slower call scores 0 (reward_failures/<term>).",
    )

    @model_validator(mode="before")
    @classmethod
    def _registered_terms_by_name(cls, data):
        """``reward.<term>: weight`` for a registered term is shorthand for ``terms: [{name, weight}]``."""
        if not isinstance(data, dict):
            return data
        named = {k: v for k, v in data.items() if k not in cls.model_fields and k in REWARD_SOURCES}
        if not named:
            return data
        rest = {k: v for k, v in data.items() if k not in named}
        return {**rest, "terms": [*rest.get("terms", []), *({"name": k, "weight": v} for k, v in named.items())]}

    @model_validator(mode="after")
    def _known_terms(self):
        labels = [t.label for t in self.terms]
        builtin = sorted(set(labels) & set(RULE_TERMS + MODEL_TERMS))
        if builtin:
            raise ValueError(f"reward term {builtin[0]!r} is a built-in option: set reward.{builtin[0]} instead")
        twice = sorted({x for x in labels if labels.count(x) > 1})
        if twice:
            raise ValueError(f"reward term {twice[0]!r} is configured twice (give one of them another name)")
        known = RULE_TERMS + MODEL_TERMS + tuple(labels)
        for name, weights in self.tasks.items():
            unknown = sorted(set(weights) - set(known))
            if unknown:
                raise ValueError(
                    f"task {name!r}: unknown reward term(s) {', '.join(unknown)}; known: {', '.join(known)}"
                )
        return self

    def weights(self, task: str) -> dict[str, float]:
        """The weight of every term for ``task`` (global weights with the task's overrides)."""
        base = {name: float(getattr(self, name)) for name in RULE_TERMS + MODEL_TERMS}
        base.update({t.label: float(t.weight) if t.tasks is None or task in t.tasks else 0.0 for t in self.terms})
        return {**base, **self.tasks.get(task, {})}


@dataclass
class RewardResult:
    total: float
    terms: dict[str, float]
    verdict: Verdict
    extra: dict[str, float] = field(default_factory=dict)


def compute_rewards(
    config: RewardConfig,
    task: Task,
    problem: Problem,
    text: str,
    length: int,
    finished: bool,
    max_new_tokens: int,
    verdict: Verdict | None = None,
) -> RewardResult:
    """The rule terms of one completion and their weighted sum (model and group terms come later, batched).
    ``verdict``: the task's verdict when the caller has it already (a step's verdicts come in one batch)."""
    verdict = verdict if verdict is not None else task.verify(problem, text)
    weights = config.weights(problem.task)
    sample = Sample(task, problem, text, length, finished, max_new_tokens, verdict, weights, config.overlong_cache)
    terms = rule_terms(sample)
    return RewardResult(sum(weight_of(name, weights) * value for name, value in terms.items()), terms, verdict)
