"""Single-turn rollouts: generate G completions per problem and score them."""

from __future__ import annotations

from polyrl.policy.generation import GenerationBackend
from polyrl.policy.prompts import PromptBuilder
from polyrl.rewards import RewardConfig, compute_rewards
from polyrl.rollout.trajectory import Trajectory
from polyrl.tasks import Problem, Task
from polyrl.tasks.isolation import verify_many


def rollout_problems(
    problems: list[Problem],
    tasks: dict[str, Task],
    backend: GenerationBackend,
    prompts: PromptBuilder,
    group_size: int,
    max_new_tokens: int,
    reward: RewardConfig,
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    group_offset: int = 0,
    version: int = 0,
) -> list[Trajectory]:
    prompt_ids = [prompts.ids(p) for p in problems]
    flat = [ids for ids in prompt_ids for _ in range(group_size)]
    gens = backend.generate(flat, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, greedy=greedy)
    # every verdict of the batch at once: one round trip to the isolated verifier pool for the impure ones
    verdicts = verify_many(
        [(tasks[problems[k // group_size].task], problems[k // group_size], gen.text) for k, gen in enumerate(gens)]
    )
    out = []
    for k, gen in enumerate(gens):
        g = k // group_size
        problem = problems[g]
        r = compute_rewards(
            reward,
            tasks[problem.task],
            problem,
            gen.text,
            len(gen.completion_ids),
            gen.finished,
            max_new_tokens,
            verdicts[k],
        )
        out.append(
            Trajectory(
                problem.task,
                group_offset + g,
                problem,
                gen.prompt_ids,
                gen.completion_ids,
                gen.text,
                gen.finished,
                r.total,
                r.terms,
                r.verdict,
                version,
                behaviour_logprobs=gen.logprobs if getattr(backend, "behaviour_logprobs", False) else None,
            )
        )
    return out
