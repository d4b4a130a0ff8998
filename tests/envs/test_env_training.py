import json

import pytest

from polyrl.errors import UserError
from polyrl.train.trainer import Trainer


def test_a_mix_of_environments_and_single_turn_tasks_trains_end_to_end(tiny_train_config):
    config = tiny_train_config(
        tasks=[
            {"name": "env/calculator:addition", "difficulty": "easy"},
            {"name": "env/retry:sort_digits"},
            "addition",
        ],
        env={"max_turns": 2, "max_episode_tokens": 64},
        rl__max_new_tokens=24,
        rl__advantage_level="turn",
        rl__steps=2,
        rl__prompts_per_step=6,
        rl__group_size=2,
        sft__steps=2,
        sft__rejection_sampling_rounds=1,
        sft__rejection_problems=4,
        sft__rejection_samples=2,
        sft__rejection_steps=1,
        eval={"problems_per_task": 2, "pass_k": 1},
    )
    results = Trainer(config).run()
    assert set(results["after_rl"]) == {"env/calculator:addition", "env/retry:sort_digits", "addition", "mean"}
    records = [json.loads(line) for line in open(f"{config.run_dir}/metrics.jsonl")]
    rl = [r for r in records if r["stage"] == "rl"]
    assert len(rl) == 2
    logged = {k for r in rl for k in r}
    per_episode = ("success", "turns", "tool_calls", "tool_errors", "invalid_actions")
    for key in (*per_episode, "policy_tokens_per_episode", "env_tokens_per_episode", "policy_tokens"):
        assert f"{key}/env/calculator:addition" in logged and f"{key}/env/retry:sort_digits" in logged
    assert "success/addition" not in logged  # single-turn tasks keep their own metrics
    assert all(r["skipped_updates"] == 0 for r in rl)
    assert any("rft_pass_rate" in r for r in records)  # rejection sampling plays episodes too


def test_an_unknown_environment_in_the_config_is_a_user_error(tiny_train_config):
    with pytest.raises(UserError, match="unknown environment"):
        Trainer(tiny_train_config(tasks=["env/no_such_env"]))


def test_ppo_with_a_critic_trains_on_multi_turn_episodes(tiny_train_config, monkeypatch):
    """GAE over episodes: the critic's token advantages are zero on environment tokens, and the run logs
    value metrics next to the episode metrics."""
    import torch

    from polyrl.algos import get_objective
    from polyrl.learner import update as learner

    seen = []
    original = get_objective("ppo_clip")

    def spy(inputs, settings):
        seen.append((inputs.advantages.detach().clone(), inputs.mask.clone()))
        return original(inputs, settings)

    monkeypatch.setattr(learner, "get_objective", lambda name: spy)
    config = tiny_train_config(
        tasks=[{"name": "env/retry:addition", "difficulty": "easy"}, "addition"],
        env={"max_turns": 3, "max_episode_tokens": 400},
        rl__max_new_tokens=12,
        rl__advantage="gae",
        rl__critic={"loss": "hl_gauss", "warmup_steps": 1},
        rl__steps=2,
        rl__prompts_per_step=4,
        rl__group_size=2,
        rl__epochs=1,
        rl__minibatches=1,
        sft__steps=2,
        eval={"problems_per_task": 2, "pass_k": 1},
    )
    Trainer(config).run()
    records = [json.loads(line) for line in open(f"{config.run_dir}/metrics.jsonl")]
    rl = [r for r in records if r["stage"] == "rl"]
    assert len(rl) == 2 and all("value_explained_variance" in r and "turns/env/retry:addition" in r for r in rl)
    assert [r["step"] for r in records if r["stage"] == "critic_warmup"] == [1]
    assert seen, "the policy loss ran"
    inner_env_tokens = 0
    for _, mask in seen:
        for row in mask:
            policy = torch.nonzero(row).flatten()
            if len(policy):  # zeros between the first and last policy token are environment tokens
                inner_env_tokens += int((row[policy[0] : policy[-1]] == 0).sum())
    assert inner_env_tokens > 0, "some episode had more than one turn"
    for advantages, mask in seen:
        assert advantages.dim() == 2  # token-level advantages from the critic
        assert torch.all(advantages[mask == 0] == 0), "no advantage on prompt, environment or padding tokens"
        assert torch.any(advantages[mask == 1] != 0)
