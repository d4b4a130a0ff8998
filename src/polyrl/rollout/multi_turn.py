"""Multi-turn rollouts: many concurrent episodes, one batched ``generate`` call per turn.

Token-in, token-out: the policy's own tokens are kept exactly as sampled (policy_mask 1); everything the
environment adds between turns — the end of the assistant turn when the policy did not close it, the
rendered observation messages and the next generation prompt — is tokenized from the chat template's
text and masked out of the loss (policy_mask 0). Observations are rendered as the *difference* between
the template applied with and without them, so any chat template (tiny, Qwen, Llama) works.
"""

from __future__ import annotations

import asyncio
import inspect
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from polyrl.envs.base import Environment, EnvTask, Message, StepResult
from polyrl.envs.registry import ENV_CONCURRENCY, MAX_EPISODE_TOKENS
from polyrl.envs.tool_formats import ToolFormat, UsesToolFormat, describe_tools, resolve_tool_format
from polyrl.policy.generation import GenerationBackend
from polyrl.policy.prompts import PromptBuilder
from polyrl.rewards import RewardConfig
from polyrl.rollout.trajectory import Trajectory
from polyrl.tasks import Problem, Verdict

_PLACEHOLDER = "\x00polyrl\x00"


class ChatCodec:
    """Renders episode messages into token ids with the tokenizer's chat template (or plain text), and binds
    tool-using tasks and environments to the tool-call format of that template."""

    def __init__(self, prompts: PromptBuilder):
        self.tok = prompts.tokenizer
        self.system = prompts.config.system
        self.use_chat = prompts.use_chat
        self.content = prompts.content  # the problem in the configured field and style
        self.template_kwargs = prompts.config.chat_template_kwargs
        self.native_tools = self.use_chat and "tools" in (self.tok.chat_template or "")
        if self.use_chat:
            user = [{"role": "user", "content": "q"}]
            with_turn = self._render(user + [{"role": "assistant", "content": _PLACEHOLDER}])
            self.turn_end = with_turn[with_turn.rindex(_PLACEHOLDER) + len(_PLACEHOLDER) :]
        self.eos_text = self.tok.eos_token or ""
        self._formats: dict[str, tuple[ToolFormat, dict | None]] = {}
        self._kept: dict[str, dict[int, str]] = {}
        self.tool_format = self.resolve("auto")[0]
        """The format tools are described in when the template has no native tool format."""

    def resolve(self, requested: str) -> tuple[ToolFormat, dict | None]:
        if requested not in self._formats:
            self._formats[requested] = resolve_tool_format(requested, self.tok if self.use_chat else None)
        return self._formats[requested]

    def bind(self, target) -> None:
        """Give a tool-using task or environment this tokenizer's tool format (``env.tool_format`` resolved)."""
        if isinstance(target, UsesToolFormat):
            fmt, response_template = self.resolve(target.requested_tool_format)
            target.bind_tool_format(fmt, response_template)
            self.tool_format = fmt

    def action_text(self, completion_ids: list[int], text: str) -> str:
        """The policy's turn as the environment reads it: ``text`` (decoded without special tokens) with the
        tool format's marker tokens put back where the vocabulary makes them special (``[TOOL_CALLS]``)."""
        keep = self._kept_ids(self.tool_format)
        if not keep.keys() & set(completion_ids):
            return text
        pieces, start = [], 0
        for i, t in enumerate(completion_ids):
            if t in keep:
                pieces += [self.tok.decode(completion_ids[start:i], skip_special_tokens=True), keep[t]]
                start = i + 1
        return "".join(pieces) + self.tok.decode(completion_ids[start:], skip_special_tokens=True)

    def _kept_ids(self, fmt: ToolFormat) -> dict[int, str]:
        if fmt.name not in self._kept:
            ids = {self.tok.convert_tokens_to_ids(marker): marker for marker in fmt.keep_tokens}
            self._kept[fmt.name] = {
                i: marker
                for i, marker in ids.items()
                if i is not None and i != self.tok.unk_token_id and not self.tok.decode([i], skip_special_tokens=True)
            }
        return self._kept[fmt.name]

    def _render(self, messages: list[Message], tools=None, generation_prompt: bool = False) -> str:
        kwargs = {**self.template_kwargs, **({"tools": tools} if tools else {})}
        return self.tok.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt, **kwargs
        )

    def _ids(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False).input_ids

    def start(self, messages: list[Message], tools: list[dict], problem: Problem | None = None) -> list[int]:
        """Prompt ids of the first turn; tools go through the template when it has a native format.
        A first message that is the problem's prompt shows the configured field and style instead."""
        if problem is not None and messages and messages[0]["content"] == problem.prompt:
            messages = [{**messages[0], "content": self.content(problem)}, *messages[1:]]
        system = [self.system] if self.system else []
        if tools and not self.native_tools:
            system.append(describe_tools(tools, self.tool_format))
        if not self.use_chat:
            text = "\n".join(system + [m["content"] for m in messages]) + "\n"
            return self.tok(text).input_ids
        head = [{"role": "system", "content": "\n".join(system)}] if system else []
        return self._ids(self._render(head + messages, tools if self.native_tools else None, generation_prompt=True))

    def between_turns(self, observation: list[Message], finished: bool) -> list[int]:
        """Environment ids after a policy turn: close the turn, the observation, the next generation prompt.
        The observation is what the template renders after the (placeholder) assistant turn, so templates that
        render an earlier turn differently once it is no longer the last (Qwen3's think block) still work."""
        if not self.use_chat:
            return self._ids("".join(f"\n[{m['role']}] {m['content']}" for m in observation) + "\n")
        closing = self.turn_end
        if finished and closing.startswith(self.eos_text):
            closing = closing[len(self.eos_text) :]  # the policy already produced the end-of-turn token
        head = [{"role": "user", "content": "q"}, {"role": "assistant", "content": _PLACEHOLDER}]
        after = self._render(head + observation, generation_prompt=True)
        rest = after[after.rindex(_PLACEHOLDER) + len(_PLACEHOLDER) :]
        if not rest.startswith(self.turn_end):
            raise ValueError(f"chat template closes an assistant turn inconsistently: {rest[:40]!r}")
        return self._ids(closing + rest[len(self.turn_end) :])


@dataclass
class Episode:
    task: EnvTask
    env: Environment
    problem: Problem
    group: int
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    policy_mask: list[int] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    """[start, end) of each policy turn within the response."""
    turn_versions: list[int] = field(default_factory=list)
    """Version of the weights that generated each policy turn."""
    finished: bool = True
    text: str = ""
    info: dict = field(default_factory=dict)
    done: bool = False

    def add(self, ids: list[int], policy: bool) -> None:
        self.response_ids += ids
        self.policy_mask += [int(policy)] * len(ids)


def _env_error(episode: Episode, exc: Exception) -> StepResult:
    warnings.warn(f"{episode.problem.task}: environment error ends the episode: {exc!r}", stacklevel=3)
    return StepResult([], 0.0, True, {"success": False, "score": 0.0, "end_reason": "env_error"})


def _step(episode: Episode, action: str) -> StepResult:
    try:
        return episode.env.step(action)
    except Exception as exc:
        return _env_error(episode, exc)


async def _astep(episode: Episode, action: str, limit: asyncio.Semaphore) -> StepResult:
    async with limit:
        try:
            return await episode.env.step(action)
        except Exception as exc:
            return _env_error(episode, exc)


def is_async_environment(env: Environment) -> bool:
    """An async-native environment: its ``step`` is a coroutine function (``async def step``)."""
    return inspect.iscoroutinefunction(env.step)


def _gather(steps: list[tuple[Episode, str]], concurrency: int) -> list[StepResult]:
    """Run async-native environments' steps on one event loop, at most ``concurrency`` at once."""

    async def run():
        limit = asyncio.Semaphore(concurrency)
        return await asyncio.gather(*(_astep(ep, action, limit) for ep, action in steps))

    return asyncio.run(run())


class EnvSteps:
    """Steps many episodes' environments at once, so that their waits (tool calls, sandboxes, remote APIs)
    overlap: plain environments on a pool of at most ``concurrency`` threads, async-native ones on one event
    loop. Results come back in the order of the requests, so the episodes (and the generation batches built
    from them) are exactly those of stepping one environment after another. ``concurrency`` 1 steps them
    one after another in the calling thread."""

    def __init__(self, concurrency: int):
        if concurrency < 1:
            raise ValueError(f"environment concurrency must be >= 1, got {concurrency}")
        self.concurrency = concurrency
        self._pool: ThreadPoolExecutor | None = None

    def map(self, fn: Callable, items: list) -> list:
        """``[fn(*item) for item in items]``, run on the threads."""
        if self.concurrency == 1 or len(items) < 2:
            return [fn(*item) for item in items]
        return list(self._executor().map(lambda item: fn(*item), items))

    def step(self, steps: list[tuple[Episode, str]]) -> list[StepResult]:
        """One step of each ``(episode, action)``."""
        is_async = [is_async_environment(ep.env) for ep, _ in steps]
        plain = [s for s, a in zip(steps, is_async) if not a]
        native = [s for s, a in zip(steps, is_async) if a]
        if native and plain:  # the event loop runs beside the threads
            pending = self._executor().submit(_gather, native, self.concurrency)
            plain_results, native_results = self.map(_step, plain), pending.result()
        else:
            plain_results = self.map(_step, plain)
            native_results = _gather(native, self.concurrency) if native else []
        it_plain, it_native = iter(plain_results), iter(native_results)
        return [next(it_native) if a else next(it_plain) for a in is_async]

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max(2, self.concurrency), thread_name_prefix="polyrl-env")
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _finish(ep: Episode, result: StepResult | None, reason: str | None = None) -> None:
    ep.done = True
    info = dict(result.info) if result is not None else {}
    info.setdefault("success", False)
    info.setdefault("score", 0.0)
    if reason is not None:
        info["end_reason"] = reason
    ep.info = info
    ep.env.close()


def _reset(env: Environment) -> list[Message]:
    return env.reset()


PolicySource = Callable[[], tuple[GenerationBackend, int]]
"""``latest()``: the generation backend of the newest weights and their version (interruptible generation)."""


def rollout_episodes(
    problems: list[Problem],
    tasks: dict,
    backend: GenerationBackend,
    prompts: PromptBuilder,
    group_size: int,
    max_new_tokens: int,
    reward: RewardConfig,
    max_episode_tokens: int = MAX_EPISODE_TOKENS,
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    group_offset: int = 0,
    version: int = 0,
    env_concurrency: int = ENV_CONCURRENCY,
    latest: PolicySource | None = None,
) -> list[Trajectory]:
    """Play ``group_size`` episodes per problem; every turn, all live episodes generate in one call, then
    their environments step concurrently (:class:`EnvSteps`, at most ``env_concurrency`` at once).

    ``max_new_tokens`` bounds one policy turn; ``max_episode_tokens`` the whole response (policy and
    environment tokens). Every episode ends with a reason in ``info["end_reason"]``; none is dropped.

    ``latest`` makes generation interruptible across weight updates (partial rollouts, as in AReaL, Fu et
    al. 2025, §4): before every turn it names the newest weights, which generate that turn. Each trajectory
    then records the version of every turn (``turn_versions``) and is as old as its oldest turn
    (``policy_version``); the behaviour log-probs must come from each turn's own weights.
    """
    codec = ChatCodec(prompts)
    steps = EnvSteps(env_concurrency)
    try:
        return _play(
            problems,
            tasks,
            backend,
            codec,
            steps,
            group_size,
            max_new_tokens,
            max_episode_tokens,
            {"temperature": temperature, "top_p": top_p, "greedy": greedy},
            group_offset,
            version,
            latest,
            reward,
        )
    finally:
        steps.close()


def _play(
    problems: list[Problem],
    tasks: dict,
    backend: GenerationBackend,
    codec: ChatCodec,
    steps: EnvSteps,
    group_size: int,
    max_new_tokens: int,
    max_episode_tokens: int,
    sampling: dict,
    group_offset: int,
    version: int,
    latest: PolicySource | None,
    reward: RewardConfig,
) -> list[Trajectory]:
    """The episode loop of :func:`rollout_episodes`: environments reset and step through ``steps``."""
    envs = []
    for g, problem in enumerate(problems):
        task = tasks[problem.task]
        for _ in range(group_size):
            env = task.make_env(problem)
            codec.bind(env)
            envs.append((g, task, env, problem))
    firsts = steps.map(_reset, [(env,) for _, _, env, _ in envs])
    episodes = [
        Episode(task, env, problem, group_offset + g, codec.start(first, env.tools, problem))
        for (g, task, env, problem), first in zip(envs, firsts)
    ]
    live = list(episodes)
    while live:
        if latest is not None:
            backend, version = latest()
        gens = backend.generate(
            [e.prompt_ids + e.response_ids for e in live], max_new_tokens=max_new_tokens, **sampling
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
            if len(ep.response_ids) + len(env_ids) >= max_episode_tokens:
                _finish(ep, result, "token_budget")
                continue
            ep.add(env_ids, policy=False)
            ep.text += "".join(f"\n[{m['role']}] {m['content']}\n" for m in result.observation)
        live = [e for e in live if not e.done]
    return [_trajectory(ep, reward) for ep in episodes]


def _trajectory(ep: Episode, reward: RewardConfig) -> Trajectory:
    info = ep.info
    ret = sum(ep.turn_rewards)
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
        ep.group,
        ep.problem,
        ep.prompt_ids,
        ep.response_ids,
        ep.text,
        ep.finished,
        reward.verifier * ret,
        {"env_return": ret},
        verdict,
        min(ep.turn_versions),
        ep.policy_mask,
        turn_spans=list(ep.turn_spans),
        turn_versions=list(ep.turn_versions),
        turn_rewards=list(ep.turn_rewards),
        info=info,
    )


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


def turn_advantages(trajs: list[Trajectory], width: int, eps: float = 1e-6) -> torch.Tensor:
    """Per-token advantages ``[N, width]`` aligned with ``TokenBatch.loss_mask``: the tokens of turn ``k``
    get the episode's return-to-go from turn ``k``, minus the group's mean return, over the group's std
    (GRPO's normalization applied to reward-to-go; REINFORCE with a group baseline, Williams 1992). A group
    whose returns are all equal is not scaled (dividing by a zero std would blow up later turns' credit)."""
    out = torch.zeros(len(trajs), width)
    groups: dict[int, list[float]] = {}
    for t in trajs:
        groups.setdefault(t.group, []).append(t.reward)
    for i, t in enumerate(trajs):
        returns = torch.tensor(groups[t.group])
        mean, std = returns.mean(), returns.std(unbiased=False)
        std = std if std > eps else torch.tensor(1.0)
        rewards = t.turn_rewards or [t.reward]
        spans = t.turn_spans or [(0, len(t.response_ids))]
        scale = t.reward / sum(rewards) if sum(rewards) else 1.0  # reward-config weight on the return
        offset = len(t.prompt_ids) - 1
        for k, (a, b) in enumerate(spans):
            to_go = scale * sum(rewards[k:])
            out[i, offset + a : offset + b] = (to_go - mean) / std
    return out


def rollout_mixed(
    problems: list[Problem],
    tasks: dict,
    backend: GenerationBackend,
    prompts: PromptBuilder,
    group_size: int,
    max_new_tokens: int,
    reward: RewardConfig,
    max_episode_tokens: int = MAX_EPISODE_TOKENS,
    group_offset: int = 0,
    env_concurrency: int = ENV_CONCURRENCY,
    latest: PolicySource | None = None,
    **sampling,
) -> list[Trajectory]:
    """Single-turn problems through :func:`rollout_problems`, environment problems through
    :func:`rollout_episodes` (``env_concurrency``, ``latest``: see there; single-turn completions are
    generated by the weights ``latest`` names when they start); trajectories come back in problem order
    with their group indices."""
    from polyrl.envs.base import is_environment
    from polyrl.rollout.own_rollouts import with_own_rollouts
    from polyrl.rollout.single_turn import rollout_problems

    own = [i for i, p in enumerate(problems) if hasattr(tasks[p.task], "play")]  # a task kind with its own rollout
    if own:
        if latest is not None:
            backend, sampling["version"] = latest()
        trajs = with_own_rollouts(
            own,
            problems,
            tasks,
            lambda chosen: rollout_mixed(
                chosen,
                tasks,
                backend,
                prompts,
                group_size,
                max_new_tokens,
                reward,
                max_episode_tokens,
                env_concurrency=env_concurrency,
                **sampling,
            ),
            lambda task, chosen: task.play(
                chosen, tasks, backend, prompts, group_size, max_new_tokens, reward, max_episode_tokens, **sampling
            ),
        )
        for t in trajs:
            t.group += group_offset
        return trajs
    env_idx = [i for i, p in enumerate(problems) if is_environment(tasks[p.task])]
    if latest is not None and len(env_idx) < len(problems):
        backend, sampling["version"] = latest()
    if not env_idx:
        return rollout_problems(
            problems,
            tasks,
            backend,
            prompts,
            group_size,
            max_new_tokens,
            reward,
            group_offset=group_offset,
            **sampling,
        )
    single_idx = sorted(set(range(len(problems))) - set(env_idx))
    out: dict[int, list[Trajectory]] = {}
    for idx, multi in ((single_idx, False), (env_idx, True)):
        if not idx:
            continue
        chosen = [problems[i] for i in idx]
        if multi:
            trajs = rollout_episodes(
                chosen,
                tasks,
                backend,
                prompts,
                group_size,
                max_new_tokens,
                reward,
                max_episode_tokens=max_episode_tokens,
                env_concurrency=env_concurrency,
                latest=latest,
                **sampling,
            )
        else:
            trajs = rollout_problems(chosen, tasks, backend, prompts, group_size, max_new_tokens, reward, **sampling)
            for t in trajs:  # explicit all-policy masks, so a mixed batch collates with one mask per row
                t.policy_mask = [1] * len(t.response_ids)
        for t in trajs:
            t.group = group_offset + idx[t.group]
            out.setdefault(t.group, []).append(t)
    return [t for g in sorted(out) for t in out[g]]


EPISODE_METRICS = ("turns", "tool_calls", "tool_errors", "invalid_actions", "policy_tokens", "env_tokens")


def episode_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """Per environment: ``success``, mean turns, tool calls, tool errors, invalid actions and tokens, and the
    fraction of episodes ending for each reason (``end/<reason>/<env>``)."""
    by_env: dict[str, list[Trajectory]] = {}
    for t in trajs:
        if t.is_episode:
            by_env.setdefault(t.task, []).append(t)
    out: dict[str, float] = {}
    for name, ts in sorted(by_env.items()):
        n = len(ts)
        out[f"success/{name}"] = sum(t.verdict.correct for t in ts) / n
        for key in EPISODE_METRICS:
            out[f"{key}/{name}"] = sum(t.info.get(key, 0) for t in ts) / n
        for reason in sorted({t.verdict.reason for t in ts}):
            out[f"end/{reason}/{name}"] = sum(t.verdict.reason == reason for t in ts) / n
    return out
