"""reasoning-gym tasks end to end: training, reward-model data and every environment wrapper take rg/ tasks."""

import json

import pytest
from system_packages import needs_bwrap

from polyrl.cli import run
from polyrl.envs.env_registry import get_env_task
from polyrl.train.trainer import Trainer

pytest.importorskip("reasoning_gym")


def test_training_runs_a_few_steps_on_an_rg_task(tiny_train_config, tmp_path):
    cfg = tiny_train_config(tasks=[{"name": "rg/basic_arithmetic", "difficulty": "easy"}], rl__steps=2)
    results = Trainer(cfg).run()
    assert set(results["after_rl"]) == {"rg/basic_arithmetic", "mean"}
    rl = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rl if r["stage"] == "rl"] == [1, 2]


def test_rm_build_data_takes_rg_tasks(tmp_path, capsys):
    out = tmp_path / "pairs.jsonl"
    assert run(["rm", "build-data", "--tasks", "rg/basic_arithmetic", "--n", "3", "--out", str(out)]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 3 and all(r["chosen"] != r["rejected"] for r in rows)


@pytest.mark.parametrize("wrapper", ["retry", "calculator", pytest.param("python", marks=needs_bwrap)])
def test_every_environment_wrapper_plays_rg_problems(wrapper):
    env = get_env_task(f"env/{wrapper}:rg/gcd")
    problem = env.generate(2**40, "easy")  # a trainer-sized seed
    assert problem.task == f"env/{wrapper}:rg/gcd"
    assert env.verify(problem, f"<answer>{problem.solution}</answer>").correct
    assert env.reference_actions(problem)[-1] == f"<answer>{problem.solution}</answer>"
