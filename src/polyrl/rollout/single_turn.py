"""Single-turn rollouts: generate G completions per problem (unscored: :func:`polyrl.rewards.stage.score`)."""

from __future__ import annotations

from polyrl.policy.generation import GenerationBackend
from polyrl.policy.prompts import PromptBuilder
from polyrl.rollout.trajectory import Trajectory
from polyrl.tasks import Problem


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
    groups: list[list[Trajectory]] = [[] for _ in problems]
    for k, gen in enumerate(gens):
        problem = problems[k // group_size]
        groups[k // group_size].append(
            Trajectory(
                problem.task,
                0,
                problem,
                gen.prompt_ids,
                gen.completion_ids,
                gen.text,
                gen.finished,
                0.0,
                {},
                None,
                version,
                behaviour_logprobs=gen.logprobs if getattr(backend, "behaviour_logprobs", False) else None,
                prompt_text=prompts.content(problem),
            )
        )
    return groups
