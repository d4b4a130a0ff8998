"""Harness tasks on Ray rollout workers: each worker runs the endpoint and the agents of the groups it plays,
and the trajectories come back with the sampling weights' behaviour log-probs, as for any Ray rollout."""

import json
import os
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def local_ray():
    # the workers import the agent's module by name, as the trainer does: it must be on their path too
    path = os.pathsep.join(str(p) for p in (HERE.parents[1] / "examples", HERE.parents[1] / "src"))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield
    ray.shutdown()


def test_rl_steps_on_ray_workers_play_the_agent(local_ray, tiny_train_config):
    from rollout_sampling import sampling

    from polyrl.train.trainer import Trainer

    cfg = tiny_train_config(
        tasks=[{"name": "addition", "harness": "calc_agent:shaped_agent"}],
        sft__enabled=False,
        rl__steps=2,
        rl__max_new_tokens=12,
        eval__problems_per_task=2,
        eval__pass_k=1,
        backend="ray",
        ray={"num_rollout_workers": 1},
        threads=1,
        tensorboard=False,
    )
    trainer = Trainer(cfg)
    pool = trainer.parts.rollout_pool
    pool.sync_weights(trainer.parts.policy.model, 0)
    problems = [trainer.parts.mix.tasks["addition"].generate(1, "easy")]
    (group,) = pool.groups(1, lambda n: problems * n, sampling(3, 6))
    assert [t.info["end_reason"] for t in group] == ["returned"] * 3
    assert all(len(t.behaviour_logprobs) == len(t.response_ids) for t in group)
    trainer.run()
    rl = [json.loads(line) for line in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rl if r["stage"] == "rl"]
    assert [r["step"] for r in rl] == [1, 2] and all(
        r["end/returned/addition"] == 1.0 and r["updates"] > 0 for r in rl
    )
