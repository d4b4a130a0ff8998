import json

import pytest

from polyrl.errors import UserError
from polyrl.train.trainer import Trainer


def test_a_mix_of_environments_and_single_turn_tasks_trains_end_to_end(tiny_train_config):
    config = tiny_train_config(
        tasks=[{"name": "env/calculator:addition", "difficulty": "easy"}, {"name": "env/retry:sort_digits"}, "addition"],
        env={"max_turns": 2, "max_episode_tokens": 64}, rl__max_new_tokens=24, rl__advantage_level="turn",
        rl__steps=2, rl__prompts_per_step=6, rl__group_size=2, sft__steps=2,
        sft__rejection_sampling_rounds=1, sft__rejection_problems=4, sft__rejection_samples=2, sft__rejection_steps=1,
        eval={"problems_per_task": 2, "pass_k": 1},
    )
    results = Trainer(config).run()
    assert set(results["after_rl"]) == {"env/calculator:addition", "env/retry:sort_digits", "addition", "mean"}
    records = [json.loads(line) for line in open(f"{config.run_dir}/metrics.jsonl")]
    rl = [r for r in records if r["stage"] == "rl"]
    assert len(rl) == 2
    logged = {k for r in rl for k in r}
    for key in ("success", "turns", "tool_calls", "tool_errors", "invalid_actions", "policy_tokens", "env_tokens"):
        assert f"{key}/env/calculator:addition" in logged and f"{key}/env/retry:sort_digits" in logged
    assert "success/addition" not in logged  # single-turn tasks keep their own metrics
    assert all(r["skipped_updates"] == 0 for r in rl)
    assert any("rft_pass_rate" in r for r in records)  # rejection sampling plays episodes too


def test_an_unknown_environment_in_the_config_is_a_user_error(tiny_train_config):
    with pytest.raises(UserError, match="unknown environment"):
        Trainer(tiny_train_config(tasks=["env/no_such_env"]))
