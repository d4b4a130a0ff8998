"""Ray backend: rollout workers, weight broadcast, asynchronous staleness, dead actors, config errors."""

import json

import pytest

ray = pytest.importorskip("ray")

from rollout_sampling import sampling  # noqa: E402

from polyrl.distributed.pool import connect  # noqa: E402
from polyrl.distributed.ray_config import RayConfig  # noqa: E402
from polyrl.errors import UserError  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _rl_records(run_dir):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["stage"] == "rl"]


def test_more_rollout_workers_than_cpus_is_a_user_error(local_ray):
    with pytest.raises(UserError, match="need 3 CPUs but the cluster has 2"):
        connect(RayConfig(num_rollout_workers=3))


def test_unreachable_address_is_a_user_error():
    with pytest.raises(UserError, match=r"cannot reach the Ray cluster at '127\.0\.0\.1:9'"):
        connect(RayConfig(address="127.0.0.1:9"))


@pytest.mark.parametrize("asynchronous", [False, True])
def test_ray_training_runs_and_logs_staleness(local_ray, tiny_train_config, asynchronous):
    from polyrl.train.trainer import Trainer

    cfg = tiny_train_config(
        backend="ray",
        ray={"num_rollout_workers": 2, "async": asynchronous, "max_staleness": 1},
        rl={"steps": 4, "prompts_per_step": 4, "group_size": 4, "max_new_tokens": 8, "dynamic_sampling": False},
    )
    trainer = Trainer(cfg)
    trainer.run()
    records = _rl_records(trainer.parts.run_dir.path)
    assert len(records) == 4
    assert all(r["staleness_max"] <= 1 for r in records)
    if not asynchronous:
        assert all(r["staleness_max"] == 0 for r in records)
    stats = trainer.parts.rollout_pool.stats
    assert stats.completed == 16 and stats.failed_groups == 0
    assert stats.submitted == stats.completed + stats.abandoned + stats.failed_groups


def test_trajectories_carry_version_and_behaviour_logprobs(local_ray, tiny_train_config):
    from polyrl.train.trainer import Trainer

    trainer = Trainer(tiny_train_config(backend="ray", ray={"num_rollout_workers": 1}))
    pool = trainer.parts.rollout_pool
    try:
        pool.sync_weights(trainer.parts.policy.model, 7)
        problems = [trainer.parts.mix.tasks["addition"].generate(1, "easy")]
        (group,) = pool.groups(1, lambda n: problems * n, sampling(3, 6))
        assert [t.policy_version for t in group] == [7, 7, 7]
        for t in group:
            assert len(t.behaviour_logprobs) == len(t.response_ids)
            assert all(lp <= 0 for lp in t.behaviour_logprobs)
    finally:
        pool.shutdown()
