"""The in-process backend steps environments concurrently; the latency models of the slow-tool wrapper."""

import asyncio
import math
import random
import time
from dataclasses import replace

import pytest
import torch
from pydantic import ValidationError
from rollout_sampling import sampling

from polyrl.device import HOST
from polyrl.envs import EnvConfig, get_env_task
from polyrl.envs.environment import Environment, EnvTask, StepResult
from polyrl.envs.latency import LatencyModel, with_latency
from polyrl.rewards import RewardConfig, score
from polyrl.rollout import rollout
from polyrl.rollout.env_steps import EnvSteps
from polyrl.rollout.episodes import rollout_episodes


def answer(prompt_text):
    """Answers the addition question in the prompt correctly."""
    question = prompt_text.rsplit("<|user|>", 1)[1].split("<|assistant|>")[0]
    a, b = question.rstrip("=").split("+")
    return f"<answer>{int(a) + int(b)}</answer>"


def _problems(task, n):
    return [task.generate(seed, "easy") for seed in range(n)]


def test_environment_waits_overlap_up_to_the_concurrency(prompts, scripted):
    task = with_latency(get_env_task("env/retry:addition"), 0.2)
    problems = _problems(task, 4)
    t0 = time.perf_counter()
    trajs = rollout_episodes(
        problems, {task.name: task}, scripted(answer), prompts, 2, 40, env_concurrency=8, temperature=1.0, top_p=1.0
    )
    concurrent = time.perf_counter() - t0
    assert all(t.verdict.correct for t in trajs) and len(trajs) == 8
    # 8 one-step episodes: one 0.2 s wait when all 8 overlap; sequential waits take at least 1.6 s, so any time well
    # under that shows the overlap (the margin is for a loaded machine, where threads wake late)
    assert concurrent < 1.2
    t0 = time.perf_counter()
    rollout_episodes(
        problems, {task.name: task}, scripted(answer), prompts, 2, 40, env_concurrency=1, temperature=1.0, top_p=1.0
    )
    assert time.perf_counter() - t0 >= 1.6


def test_concurrent_stepping_gives_the_trajectories_of_sequential_stepping(prompts, tiny_tokenizer):
    from polyrl.policy import TransformersBackend, load_policy
    from polyrl.policy.loading import ModelConfig

    model = load_policy(
        ModelConfig(path="tiny", tiny={"hidden_size": 32, "num_layers": 1, "num_heads": 2}), device=HOST
    ).model
    tail = LatencyModel("lognormal", median_s=0.002, p99_over_p50=20, timeout_s=0.01)
    task = with_latency(get_env_task("env/retry:addition"), tail)
    problems = _problems(task, 4)

    def play(concurrency):
        torch.manual_seed(7)
        backend = TransformersBackend(model, tiny_tokenizer, device=HOST)
        trajs = rollout(problems, {task.name: task}, backend, prompts, sampling(3, 8, env_concurrency=concurrency))
        score(trajs, {task.name: task}, RewardConfig(), 8)
        task._episodes.clear()  # the next run numbers the episodes of each problem from 0 again
        return [(t.group, t.response_ids, t.policy_mask, t.reward, t.verdict.reason) for t in trajs]

    sequential, concurrent = play(1), play(6)
    assert concurrent == sequential
    assert len({tuple(r[1]) for r in sequential}) > 1  # sampled, not all the same


class SleepyAsyncEnv(Environment):
    """Async-native: ``step`` awaits 0.2 s, then ends the episode with success."""

    async def step(self, action: str) -> StepResult:
        await asyncio.sleep(0.2)
        return self.end(1.0, True, 1.0, "answered", action)

    def reset(self):
        return [{"role": "user", "content": self.problem.prompt}]


class SleepyAsyncTask(EnvTask):
    name = "sleepy_async"

    def __init__(self, inner):
        self.inner = inner

    def generate(self, seed, difficulty=None):
        return self.inner.generate(seed, difficulty)

    def make_env(self, problem):
        return SleepyAsyncEnv(problem, 1)


def test_async_native_environments_step_on_an_event_loop_beside_plain_ones(prompts, scripted):
    plain = with_latency(get_env_task("env/retry:addition"), 0.2)
    native = SleepyAsyncTask(plain)
    problems = _problems(plain, 2) + [replace(p, task=native.name) for p in _problems(plain, 2)]
    t0 = time.perf_counter()
    tasks = {plain.name: plain, native.name: native}
    trajs = rollout(problems, tasks, scripted(answer), prompts, sampling(4, 40))
    assert time.perf_counter() - t0 < 1.6  # 16 waits of 0.2 s overlap (one after another: at least 3.2 s)
    assert [t.task for t in trajs] == [plain.name] * 8 + [native.name] * 8
    score(trajs, tasks, RewardConfig(), 40)
    assert [t.verdict.reason for t in trajs[8:]] == ["answered"] * 8 and all(t.reward == 1.0 for t in trajs)


def test_an_async_environment_that_raises_ends_its_episode_as_env_error(prompts, scripted):
    class Broken(SleepyAsyncEnv):
        async def step(self, action):
            raise RuntimeError("tool server down")

    task = SleepyAsyncTask(get_env_task("env/retry:addition"))
    task.make_env = lambda problem: Broken(problem, 1)
    with pytest.warns(UserWarning, match="tool server down"):
        (t,) = rollout_episodes(
            [replace(p, task=task.name) for p in _problems(task.inner, 1)],
            {task.name: task},
            scripted(answer),
            prompts,
            1,
            40,
            temperature=1.0,
            top_p=1.0,
        )
    assert t.verdict.reason == "env_error" and t.info["success"] is False


def test_env_steps_return_results_in_request_order():
    steps = EnvSteps(4)
    try:
        out = steps.map(lambda x: (time.sleep(0.01 * (5 - x)), x)[1], [(i,) for i in range(5)])
    finally:
        steps.close()
    assert out == [0, 1, 2, 3, 4]


def test_concurrency_must_be_positive():
    with pytest.raises(ValueError, match="concurrency"):
        EnvSteps(0)
    with pytest.raises(ValidationError):
        EnvConfig(concurrency=0)
    assert EnvConfig().concurrency == 16


# -- latency models -------------------------------------------------------------------------------------------


def test_lognormal_p99_is_the_stated_multiple_of_the_median():
    model = LatencyModel("lognormal", median_s=0.1, p99_over_p50=20)
    assert model.sigma == pytest.approx(math.log(20) / 2.3263478740408408)  # 1.2877
    assert model.quantile(0.5) == pytest.approx(0.1)
    assert model.quantile(0.99) == pytest.approx(2.0)
    rng = random.Random(0)
    delays = sorted(model.delay(rng) for _ in range(40_000))
    assert delays[20_000] == pytest.approx(0.1, rel=0.05)
    assert delays[39_600] == pytest.approx(2.0, rel=0.15)


def test_fixed_latency_waits_the_median_every_step():
    model = LatencyModel("fixed", median_s=0.3)
    assert [model.delay(random.Random(s)) for s in range(3)] == [0.3, 0.3, 0.3]
    assert with_latency(get_env_task("env/retry:addition"), 0.3).model == model


def test_a_step_longer_than_the_timeout_ends_the_episode_as_tool_timeout(prompts, scripted):
    task = with_latency(get_env_task("env/retry:addition"), LatencyModel("fixed", 2.0, timeout_s=0.05))
    t0 = time.perf_counter()
    (t,) = rollout_episodes(
        _problems(task, 1), {task.name: task}, scripted(answer), prompts, 1, 40, temperature=1.0, top_p=1.0
    )
    assert time.perf_counter() - t0 < 1.0  # waited the 0.05 s timeout, not the 2 s delay
    score([t], {task.name: task}, RewardConfig(), 40)
    assert t.verdict.reason == "tool_timeout" and t.reward == 0.0 and t.info["tool_timeouts"] == 1


def test_delays_depend_on_the_problem_and_episode_index_not_on_scheduling():
    model = LatencyModel("lognormal", median_s=0.1, p99_over_p50=10)
    inner = get_env_task("env/retry:addition")
    a, b = with_latency(inner, model), with_latency(inner, model)
    p, q = _problems(inner, 2)
    first = [a.make_env(p).rng.random(), a.make_env(p).rng.random(), a.make_env(q).rng.random()]
    second = [b.make_env(q).rng.random(), b.make_env(p).rng.random(), b.make_env(p).rng.random()]
    assert first == [second[1], second[2], second[0]]
    assert len(set(first)) == 3


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kind": "pareto"}, "fixed or lognormal"),
        ({"median_s": -0.1}, ">= 0"),
        ({"kind": "lognormal", "p99_over_p50": 0.5}, "p99_over_p50"),
        ({"timeout_s": 0}, "timeout_s"),
    ],
)
def test_bad_latency_models_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LatencyModel(**kwargs)
