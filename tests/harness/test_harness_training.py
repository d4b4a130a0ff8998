"""A few RL steps of the tiny model whose episodes are played by a tool-using agent through the real
``openai`` client, and its evaluation through the same agent (greedy)."""

import json
from pathlib import Path

import pytest

from polyrl.errors import UserError

HARNESS_RUN = {
    "tasks": [
        {"name": "addition", "difficulty": "easy", "harness": {"fn": "calc_agent:shaped_agent", "timeout_s": 60}}
    ],
    "sft__enabled": False,
    "rl__steps": 2,
    "rl__max_new_tokens": 12,
    "eval__problems_per_task": 2,
    "eval__pass_k": 1,
    "threads": 1,
    "tensorboard": False,
}


def test_a_few_rl_steps_train_on_agent_episodes(tiny_train_config):
    from polyrl.train.trainer import Trainer

    cfg = tiny_train_config(**HARNESS_RUN)
    results = Trainer(cfg).run()
    records = [json.loads(line) for line in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in records if r["stage"] == "rl"]
    assert [r["step"] for r in rl] == [1, 2]
    assert all(r["updates"] > 0 and r["loss"] is not None for r in rl)  # the graded reward gives every group signal
    assert all(r["end/returned/addition"] == 1.0 for r in rl)
    assert all(r["reward_terms/harness/requests"] >= 1 for r in rl)
    assert set(results["after_rl"]) == {"addition", "mean"}


def test_with_dynamic_sampling_a_step_whose_every_episode_timed_out_says_so(tiny_train_config):
    from polyrl.train.trainer import Trainer

    hanging = [
        {
            "name": "addition",
            "difficulty": "easy",
            "harness": {"fn": "harness_test_agents:hanging_agent", "timeout_s": 0.3},
        }
    ]
    run = {**HARNESS_RUN, "tasks": hanging, "rl__steps": 1, "rl__prompts_per_step": 2, "rl__group_size": 2}
    cfg = tiny_train_config(**{**run, "eval__problems_per_task": 1}, rl__dynamic_sampling=True, rl__max_refills=0)
    Trainer(cfg).run()
    (rl,) = [
        r
        for r in map(json.loads, (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines())
        if r["stage"] == "rl"
    ]
    assert rl["groups_dropped"] == 2 and rl["groups_kept_frac"] == 0.0  # every reward 0: no signal
    assert rl["end/timeout/addition"] == 1.0 and rl["success/addition"] == 0.0


def test_a_harness_that_cannot_be_imported_is_one_line(tiny_train_config):
    from polyrl.train.trainer import Trainer

    with pytest.raises(UserError, match="harness 'no_such_module:agent': cannot import"):
        Trainer(
            tiny_train_config(**{**HARNESS_RUN, "tasks": [{"name": "addition", "harness": "no_such_module:agent"}]})
        )


def test_harness_and_plain_tasks_train_together(tiny_train_config):
    from polyrl.train.trainer import Trainer

    tasks = [*HARNESS_RUN["tasks"], {"name": "sort_digits", "difficulty": "easy"}]
    cfg = tiny_train_config(**{**HARNESS_RUN, "tasks": tasks, "rl__steps": 1})
    results = Trainer(cfg).run()
    assert set(results["after_rl"]) == {"addition", "sort_digits", "mean"}


def test_an_agent_returning_rewards_of_1e200_does_not_stop_training(tiny_train_config):
    from polyrl.train.trainer import Trainer

    tasks = [{"name": "addition", "difficulty": "easy", "harness": "harness_test_agents:huge_reward_agent"}]
    cfg = tiny_train_config(**{**HARNESS_RUN, "tasks": tasks, "rl__max_bad_steps": 1})
    with pytest.warns(UserWarning, match="out_of_range"):
        Trainer(cfg).run()
    records = [json.loads(line) for line in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in records if r["stage"] == "rl"]
    assert [r["step"] for r in rl] == [1, 2] and all(r["reward_failures/env_return"] == 16 for r in rl)
    assert (Path(cfg.run_dir) / "final_model" / "model.safetensors").is_file()
