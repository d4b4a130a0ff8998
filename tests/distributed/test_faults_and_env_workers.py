"""Dead actors never lose groups silently; environment steps run on environment worker actors."""

import pytest

ray = pytest.importorskip("ray")

from polyrl.distributed.config import RayConfig  # noqa: E402
from polyrl.distributed.pool import RolloutPool  # noqa: E402
from polyrl.envs import resolve_task  # noqa: E402
from polyrl.policy import load_policy  # noqa: E402
from polyrl.policy.loading import ModelConfig  # noqa: E402
from polyrl.policy.prompts import PromptConfig  # noqa: E402
from polyrl.rewards import RewardConfig  # noqa: E402

MODEL = ModelConfig(path="tiny", tiny={"hidden_size": 32, "intermediate_size": 64, "num_layers": 2, "num_heads": 2})
SAMPLING = {"group_size": 2, "max_new_tokens": 6, "temperature": 1.0, "top_p": 1.0}


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _pool(tasks, **ray_options):
    pool = RolloutPool(RayConfig(**ray_options), model_config=MODEL, seed=0, prompt_config=PromptConfig(field="question"),
                       reward_config=RewardConfig(), max_episode_tokens=64, tasks=tasks)
    pool.sync_weights(load_policy(MODEL, seed=0).model, 0)
    return pool


def _problems(task):
    seeds = iter(range(10_000))
    return lambda n: [task.generate(next(seeds), "easy") for _ in range(n)]


def test_killed_rollout_worker_is_restarted_and_its_groups_rerun(local_ray):
    task = resolve_task("addition")
    pool = _pool({"addition": task}, num_rollout_workers=2, rollout_concurrency=1, max_restarts=2, max_reruns=2)
    try:
        make = _problems(task)
        pool.sampling = SAMPLING
        pool._fill(8, make)  # 8 groups in flight, 4 queued on each worker
        ray.kill(pool.workers[0], no_restart=False)
        groups = pool.groups(8, make, **SAMPLING)
        stats = pool.stats
        assert stats.reruns >= 1
        assert len(groups) + stats.failed_groups == 8 == stats.submitted
        assert stats.completed == len(groups) == 8  # the restarted actor re-ran them with the broadcast weights
        assert all(len(g) == 2 for g in groups)
    finally:
        pool.shutdown()


def test_groups_of_a_worker_that_keeps_dying_are_counted_as_failed(local_ray):
    task = resolve_task("addition")
    pool = _pool({"addition": task}, num_rollout_workers=1, rollout_concurrency=1, max_restarts=0, max_reruns=1)
    try:
        make = _problems(task)
        pool.sampling = SAMPLING
        pool._fill(3, make)
        ray.kill(pool.workers[0], no_restart=True)
        groups = pool.groups(3, make, **SAMPLING)
        assert groups == [] and pool.stats.failed_groups == 3 and pool.stats.reruns == 3
    finally:
        pool.shutdown()


def test_environment_steps_run_on_env_workers(local_ray):
    name = "env/retry:addition"
    task = resolve_task(name)
    pool = _pool({name: task}, num_rollout_workers=1, num_env_workers=2, rollout_concurrency=2)
    try:
        groups = pool.groups(4, _problems(task), **SAMPLING)
        trajs = [t for g in groups for t in g]
        assert len(trajs) == 8
        assert all(t.info["turns"] >= 1 and t.verdict.reason != "env_error" for t in trajs)
        assert all(len(t.info["behaviour_logprobs"]) == len(t.response_ids) for t in trajs)
        counts = ray.get([w.counts.remote() for w in pool.env_workers])
        assert [c["started"] for c in counts] == [4, 4]  # episodes spread over both environment workers
        assert sum(c["steps"] for c in counts) == sum(t.info["turns"] for t in trajs)
    finally:
        pool.shutdown()
