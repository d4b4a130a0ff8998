"""The episode loop of multi-turn rollouts: many concurrent episodes, one batched ``generate`` call per turn.

Episodes come back unscored but finished: their token ids and masks, each turn's span, version and
environment reward, and a verdict from the environment's outcome (``success``, ``score``, ``end_reason``).
Their reward is :func:`polyrl.rewards.stage.score`'s (the ``env_return`` term, with the task's weights).
"""

from __future__ import annotations

import warnings

from polyrl.envs.env_registry import ENV_CONCURRENCY, MAX_EPISODE_TOKENS
from polyrl.envs.environment import Environment, Message, StepResult
from polyrl.forward.batch import join
from polyrl.policy.generation import GenerationBackend
from polyrl.policy.prompts import PromptBuilder
from polyrl.rollout.chat import ChatCodec, observation_pictures, user_text
from polyrl.rollout.dispatch import PolicySource, Sampling, register_rollout_kind
from polyrl.rollout.env_steps import EnvSteps, Episode
from polyrl.rollout.trajectory import Trajectory, number_groups
from polyrl.tasks import Problem, Verdict


def _finish(ep: Episode, result: StepResult | None, reason: str | None = None) -> None:
    ep.done = True
    info = dict(result.info) if result is not None else {}
    info.setdefault("success", False)
    info.setdefault("score", 0.0)
    if reason is not None:
        info["end_reason"] = reason
    ep.info = info
    ep.env.close_once()


def _reset(env: Environment) -> list[Message]:
    return env.reset()


def rollout_episodes(
    problems: list[Problem],
    tasks: dict,
    backend: GenerationBackend,
    prompts: PromptBuilder,
    group_size: int,
    max_new_tokens: int,
    max_episode_tokens: int = MAX_EPISODE_TOKENS,
    *,
    temperature: float,
    top_p: float,
    greedy: bool = False,
    version: int = 0,
    env_concurrency: int = ENV_CONCURRENCY,
    latest: PolicySource | None = None,
) -> list[Trajectory]:
    """:func:`episode_groups`' episodes, flat, numbered by problem (group ``k`` answers ``problems[k]``)."""
    sampling = Sampling(group_size, max_new_tokens, temperature, top_p, max_episode_tokens, env_concurrency)
    return number_groups(episode_groups(problems, tasks, backend, prompts, sampling, greedy, version, latest))


@register_rollout_kind("episode", episodic=True, interruptible=True)
def episode_groups(
    problems: list[Problem],
    tasks: dict,
    backend: GenerationBackend,
    prompts: PromptBuilder,
    sampling: Sampling,
    greedy: bool = False,
    version: int = 0,
    latest: PolicySource | None = None,
) -> list[list[Trajectory]]:
    """The episode kind, every environment task's: ``sampling.group_size`` episodes per problem; every turn, all
    live episodes generate in one call, then their environments step concurrently (:class:`EnvSteps`, at most
    ``sampling.env_concurrency`` at once). One group per problem, in problem order.

    ``sampling.max_new_tokens`` bounds one policy turn; ``sampling.max_episode_tokens`` the whole response (policy
    and environment tokens). Every episode ends with a reason in ``info["end_reason"]``; none is dropped.

    ``latest`` makes generation interruptible across weight updates (partial rollouts, as in AReaL, Fu et
    al. 2025, §4): before every turn it names the newest weights, which generate that turn. Each trajectory
    then records the version of every turn (``turn_versions``) and is as old as its oldest turn
    (``policy_version``); the behaviour log-probs must come from each turn's own weights.
    """
    codec = ChatCodec(prompts)
    steps = EnvSteps(sampling.env_concurrency)
    envs = []
    try:
        for g, problem in enumerate(problems):
            task = tasks[problem.task]
            for _ in range(sampling.group_size):
                env = task.make_env(problem)
                codec.bind(env)
                envs.append((g, task, env, problem))
        generation = {"temperature": sampling.temperature, "top_p": sampling.top_p, "greedy": greedy}
        return _run_episodes(
            envs,
            problems,
            backend,
            codec,
            steps,
            sampling.max_new_tokens,
            sampling.max_episode_tokens,
            generation,
            version,
            latest,
        )
    finally:
        try:
            _close_unfinished(envs)  # unfinished environments first, then the stepping threads
        finally:
            steps.close()


def _close_unfinished(envs: list) -> None:
    """Close every environment whose episode did not end (the rollout failed: a reset raised, generation failed,
    Ctrl-C), so that no process, sandbox or server session outlives it. Ended episodes were closed as they ended."""
    for _, _, env, _ in envs:
        try:
            env.close_once()
        except Exception as exc:  # the rollout's own error, if any, is the one to report
            warnings.warn(f"closing an environment after a failed rollout raised {exc!r}", stacklevel=2)


def _run_episodes(
    envs: list,
    problems: list[Problem],
    backend: GenerationBackend,
    codec: ChatCodec,
    steps: EnvSteps,
    max_new_tokens: int,
    max_episode_tokens: int,
    sampling: dict,
    version: int,
    latest: PolicySource | None,
) -> list[list[Trajectory]]:
    firsts = steps.map(_reset, [(env,) for _, _, env, _ in envs])
    episodes = [
        Episode(
            task,
            env,
            problem,
            g,
            codec.start(first, env.tools, problem),
            prompt_text=user_text(codec.shown(first, problem)),
        )
        for (g, task, env, problem), first in zip(envs, firsts)
    ]
    live = list(episodes)
    while live:
        if latest is not None:
            backend, version = latest()
        gens = backend.generate(
            [join(e.prompt_ids, e.response_ids) for e in live], max_new_tokens=max_new_tokens, **sampling
        )
        acting = []
        for ep, gen in zip(live, gens):
            room = max_episode_tokens - len(ep.response_ids)
            start = len(ep.response_ids)
            ep.add(gen.completion_ids[:room], policy=True)
            ep.turn_spans.append((start, len(ep.response_ids)))
            ep.turn_versions.append(version)
            ep.text += gen.text
            ep.finished = gen.finished
            if len(gen.completion_ids) > room:
                ep.turn_rewards.append(0.0)
                _finish(ep, None, "token_budget")
                continue
            acting.append((ep, gen))
        results = steps.step([(ep, codec.action_text(gen.completion_ids, gen.text)) for ep, gen in acting])
        for (ep, gen), result in zip(acting, results):
            ep.turn_rewards.append(float(result.reward))
            if result.done:
                _finish(ep, result)
                continue
            env_ids = codec.between_turns(result.observation, gen.finished)
            codec.check_pictures(ep.problem, join(ep.prompt_ids, ep.response_ids), env_ids)
            if len(ep.response_ids) + len(env_ids) >= max_episode_tokens:
                _finish(ep, result, "token_budget")
                continue
            ep.add(env_ids, policy=False)
            ep.text += "".join(f"\n[{m['role']}] {m['content']}\n" for m in result.observation)
            shown = observation_pictures(result.observation)
            if shown:
                ep.observation_images.append((len(ep.turn_spans), shown))
        live = [e for e in live if not e.done]
    groups: list[list[Trajectory]] = [[] for _ in problems]
    for ep in episodes:
        groups[ep.group].append(_trajectory(ep))
    return groups


def _trajectory(ep: Episode) -> Trajectory:
    """The finished episode, unscored (reward 0 until :func:`polyrl.rewards.stage.score`)."""
    info = ep.info
    verdict = Verdict(
        float(info["score"]),
        bool(info["success"]),
        str(info.get("end_reason", "unknown")),
        info.get("answer") is not None,
        info.get("answer"),
    )
    stats = ep.env.stats
    info.update(
        {
            "turns": len(ep.turn_spans),
            "policy_tokens": sum(ep.policy_mask),
            "env_tokens": len(ep.policy_mask) - sum(ep.policy_mask),
            **stats,
        }
    )
    return Trajectory(
        ep.problem.task,
        0,
        ep.problem,
        ep.prompt_ids,
        ep.response_ids,
        ep.text,
        ep.finished,
        0.0,
        {},
        verdict,
        min(ep.turn_versions),
        ep.policy_mask,
        turn_spans=list(ep.turn_spans),
        turn_versions=list(ep.turn_versions),
        turn_rewards=list(ep.turn_rewards),
        info=info,
        logged_terms=ep.env.logged_terms(),
        prompt_text=ep.prompt_text,
        observation_images=list(ep.observation_images),
    )
