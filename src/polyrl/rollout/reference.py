"""Reference episodes: an environment's scripted actions played through the chat codec, for the SFT warm start."""

from __future__ import annotations

from polyrl.envs.environment import EnvTask
from polyrl.policy.prompts import PromptBuilder
from polyrl.rollout.chat import ChatCodec
from polyrl.rollout.env_steps import Episode
from polyrl.tasks import Problem


def reference_episode(
    task: EnvTask, problem: Problem, prompts: PromptBuilder, eos_id: int
) -> tuple[list[int], list[int], list[int]] | None:
    """``(prompt_ids, response_ids, policy_mask)`` of the environment's reference trajectory, or None."""
    codec = ChatCodec(prompts)
    codec.bind(task)
    actions = task.reference_actions(problem)
    if not actions:
        return None
    env = task.make_env(problem)
    codec.bind(env)
    try:
        ep = Episode(task, env, problem, 0, codec.start(env.reset(), env.tools, problem))
        for action in actions:
            ep.add(prompts.tokenizer(action, add_special_tokens=False).input_ids + [eos_id], policy=True)
            result = env.step(action)
            if result.done:
                return (ep.prompt_ids, ep.response_ids, ep.policy_mask) if result.info.get("success") else None
            ep.add(codec.between_turns(result.observation, finished=True), policy=False)
        return None
    finally:
        env.close()
