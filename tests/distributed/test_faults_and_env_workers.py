"""Dead actors never lose groups silently; environment steps run on environment worker actors."""

import pytest

ray = pytest.importorskip("ray")

from rollout_sampling import sampling  # noqa: E402

from polyrl.device import HOST  # noqa: E402
from polyrl.distributed.pool import RolloutPool  # noqa: E402
from polyrl.distributed.ray_config import RayConfig  # noqa: E402
from polyrl.policy import load_policy  # noqa: E402
from polyrl.policy.loading import ModelConfig  # noqa: E402
from polyrl.policy.prompts import PromptConfig  # noqa: E402
from polyrl.tasks import resolve_task  # noqa: E402

MODEL = ModelConfig(path="tiny", tiny={"hidden_size": 32, "intermediate_size": 64, "num_layers": 2, "num_heads": 2})
SAMPLING = sampling(2, 6, max_episode_tokens=64)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _pool(tasks, **ray_options):
    pool = RolloutPool(
        RayConfig(**ray_options),
        model_config=MODEL,
        seed=0,
        prompt_config=PromptConfig(field="question"),
        tasks=tasks,
    )
    pool.sync_weights(load_policy(MODEL, seed=0, device=HOST).model, 0)
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
        groups = pool.groups(8, make, SAMPLING)
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
        groups = pool.groups(3, make, SAMPLING)
        assert groups == [] and pool.stats.failed_groups == 3 and pool.stats.reruns == 3
    finally:
        pool.shutdown()


def test_environment_steps_run_on_env_workers(local_ray):
    name = "env/retry:addition"
    task = resolve_task(name)
    pool = _pool({name: task}, num_rollout_workers=1, num_env_workers=2, rollout_concurrency=2)
    try:
        groups = pool.groups(4, _problems(task), SAMPLING)
        trajs = [t for g in groups for t in g]
        assert len(trajs) == 8
        assert all(t.info["turns"] >= 1 and t.verdict.reason != "env_error" for t in trajs)
        assert all(len(t.behaviour_logprobs) == len(t.response_ids) for t in trajs)
        counts = ray.get([w.counts.remote() for w in pool.env_workers])
        assert [c["started"] for c in counts] == [4, 4]  # episodes spread over both environment workers
        assert sum(c["steps"] for c in counts) == sum(t.info["turns"] for t in trajs)
    finally:
        pool.shutdown()


def test_groups_older_than_max_staleness_are_rerun_at_the_current_version(local_ray):
    task = resolve_task("addition")
    pool = _pool(
        {"addition": task},
        num_rollout_workers=1,
        rollout_concurrency=2,
        max_staleness=1,
        interruptible=False,
        **{"async": True},
    )
    try:
        model = load_policy(MODEL, seed=0, device=HOST).model
        make = _problems(task)
        pool.sampling = SAMPLING
        pool._fill(4, make)  # four groups in flight at version 0
        pool.sync_weights(model, 1)
        pool.sync_weights(model, 2)  # the trainer is now two updates ahead of them
        groups = pool.groups(2, make, SAMPLING)
        stats = pool.stats
        assert len(groups) == 2
        assert all(t.policy_version == 2 for g in groups for t in g), "nothing older than max_staleness is trained on"
        assert stats.stale_reruns >= 2 and set(stats.staleness) == {0}
        # every group is accounted for: completed, or still in flight (re-runs are new requests of the same group)
        assert stats.submitted == stats.completed + len(pool.inflight) + stats.failed_groups
    finally:
        pool.shutdown()


def _wait_until_alive(worker, timeout: float = 120.0) -> None:
    """Block until a killed actor answers again (its restart can take tens of seconds on a loaded machine)."""
    import time

    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            ray.get(worker.counts.remote(), timeout=10)
            return
        except (ray.exceptions.ActorUnavailableError, ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            time.sleep(0.2)
    raise AssertionError(f"the environment actor did not come back within {timeout} s")


def _steps_run(worker) -> int:
    """Steps an environment actor has run; 0 while it is still restarting after a kill."""
    try:
        return ray.get(worker.counts.remote())["steps"]
    except (ray.exceptions.ActorUnavailableError, ray.exceptions.RayActorError):
        return 0


def test_environment_actor_killed_mid_episode_ends_those_episodes_and_the_run_goes_on(local_ray):
    import time

    from polyrl.envs.latency import with_latency

    name = "env/retry:addition"
    task = with_latency(resolve_task(name), 1.0)
    pool = _pool(
        {name: task},
        num_rollout_workers=1,
        num_env_workers=1,
        env_worker_concurrency=4,  # counts() answers while steps sleep, so the kill lands mid-step
        rollout_concurrency=4,
        max_restarts=4,
        max_reruns=4,  # with the backoff (1, 2, 4, 8 s) a re-run outlasts the environment actor's restart
    )
    try:
        make = _problems(task)
        pool.sampling = SAMPLING
        for _ in range(3):  # a kill that lands between calls touches no episode (a timing miss): kill again
            pool._fill(4, make)
            deadline = time.time() + 30
            while _steps_run(pool.env_workers[0]) == 0 and time.time() < deadline:
                time.sleep(0.05)  # wait until episodes are mid-way (a step has run)
            ray.kill(pool.env_workers[0], no_restart=False)
            groups = pool.groups(4, make, SAMPLING)
            trajs = [t for g in groups for t in g]
            assert len(groups) == 4 and len(trajs) == 8, "no episode is lost"
            reasons = [t.info.get("end_reason") for t in trajs]
            # the kill reaches an episode one of two ways: its env call fails (it ends with env_error, reward
            # 0), or the call meets the restarting actor inside the rollout worker (the group is re-run)
            if "env_error" in reasons or pool.stats.reruns > 0:
                break
        assert "env_error" in reasons or pool.stats.reruns > 0, (reasons, pool.stats)
        assert all(t.reward == 0 for t in trajs if t.info.get("end_reason") == "env_error")
        assert pool.stats.failed_groups == 0
        # the restarted environment actor serves new episodes
        _wait_until_alive(pool.env_workers[0])
        later = [t for g in pool.groups(2, make, SAMPLING) for t in g]
        assert len(later) == 4 and all(t.info.get("end_reason") != "env_error" for t in later)
    finally:
        pool.shutdown()


class _BrokenTask:
    """A task whose problems can't be played: ``make_env`` raises (a bug in a plugin)."""

    def __init__(self, inner):
        self.inner = inner

    def make_env(self, problem):
        raise RuntimeError("sandbox image not found")

    def __getattr__(self, name):
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def test_a_rollout_that_raises_is_rerun_then_counted_never_crashes_the_pool(local_ray):
    import sys

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    name = "env/retry:addition"
    task = _BrokenTask(resolve_task(name))
    pool = _pool({name: task}, num_rollout_workers=1, max_reruns=1)
    try:
        with pytest.warns(UserWarning, match="sandbox image not found"):
            groups = pool.groups(2, _problems(task), SAMPLING)
        stats = pool.stats
        assert groups == [] and stats.failed_groups == 2 and stats.task_errors == 4 and stats.reruns == 2
        assert "sandbox image not found" in stats.last_error
    finally:
        pool.shutdown()


def test_interruptible_groups_queued_before_an_update_start_with_the_newest_weights(local_ray):
    task = resolve_task("addition")
    pool = _pool({"addition": task}, num_rollout_workers=1, rollout_concurrency=1, max_staleness=1, **{"async": True})
    try:
        model = load_policy(MODEL, seed=0, device=HOST).model
        make = _problems(task)
        pool.sampling = SAMPLING
        pool._fill(4, make)  # submitted at version 0, played one after another
        pool.sync_weights(model, 1)
        pool.sync_weights(model, 2)
        groups = pool.groups(4, make, SAMPLING)
        versions = [t.policy_version for g in groups for t in g]
        assert len(groups) == 4 and set(versions) <= {1, 2} and 2 in versions  # nothing older than the bound
        assert pool.stats.stale_reruns < 4  # the queued groups were not all thrown away and re-run
    finally:
        pool.shutdown()


def test_a_failed_group_is_rerun_after_its_backoff_not_at_once(local_ray):
    """An actor Ray is restarting answers 'unavailable' for a while: re-runs wait 1, 2, 4… × rerun_backoff_s."""
    import sys
    import time

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    name = "env/retry:addition"
    task = _BrokenTask(resolve_task(name))
    pool = _pool({name: task}, num_rollout_workers=1, max_reruns=2, rerun_backoff_s=0.5)
    try:
        start = time.monotonic()
        with pytest.warns(UserWarning, match="sandbox image not found"):
            groups = pool.groups(1, _problems(task), SAMPLING)
        waited = time.monotonic() - start
        assert groups == [] and pool.stats.failed_groups == 1 and pool.stats.reruns == 2
        assert waited >= 0.5 + 1.0  # the two backoffs, before the group is given up
        assert not pool.delayed and not pool.inflight
    finally:
        pool.shutdown()
