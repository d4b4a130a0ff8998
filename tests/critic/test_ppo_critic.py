"""PPO with a critic in the trainer: GAE advantages, value metrics, per-loss runs, exact resume."""

from pathlib import Path

import pytest
import torch

from polyrl.critic import Critic, CriticConfig, outcome_rewards_per_token
from polyrl.device import HOST
from polyrl.errors import UserError
from polyrl.train.trainer import Trainer


def test_outcome_reward_sits_on_the_last_policy_token():
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    got = outcome_rewards_per_token(torch.tensor([2.0, -1.0, 5.0]), mask)
    assert got.tolist() == [[0, 0, 2, 0], [0, 0, 0, -1], [0, 0, 0, 0]]


def test_fresh_critic_predicts_support_midpoint_and_learns_a_return():
    from polyrl.forward import collate
    from polyrl.policy.tiny import TinyModelConfig, build_tiny_policy

    model, tok = build_tiny_policy(TinyModelConfig(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2))
    critic = Critic(CriticConfig(loss="hl_gauss", v_min=-1.0, v_max=1.0, num_bins=11, lr=1e-2), model, device=HOST)
    batch = collate([([5, 6, 7], [8, 9, 2])], tok.pad_token_id)
    _adv, returns, _ = critic.advantages(batch, torch.tensor([1.0]))
    assert returns[batch.loss_mask.bool()].tolist() == pytest.approx([1.0, 1.0, 1.0])  # gamma = lam = 1
    for _ in range(30):
        critic.update(batch, returns)
    values = critic.values_from(critic._outputs(batch)).detach()[batch.loss_mask.bool()]
    assert values.min() > 0.6


@pytest.mark.parametrize("loss", ["mse", "two_hot"])
def test_every_value_loss_trains(loss):
    from polyrl.forward import collate
    from polyrl.policy.tiny import TinyModelConfig, build_tiny_policy

    model, tok = build_tiny_policy(TinyModelConfig(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2))
    critic = Critic(CriticConfig(loss=loss, lr=1e-2), model, device=HOST)
    batch = collate([([5, 6, 7], [8, 9, 2]), ([5, 6], [9, 2])], tok.pad_token_id)
    _, returns, _ = critic.advantages(batch, torch.tensor([1.0, 0.0]))
    first = critic.update(batch, returns)
    for _ in range(20):
        last = critic.update(batch, returns)
    assert last < first


def test_gae_run_logs_value_metrics(tiny_train_config):
    cfg = tiny_train_config(rl={**tiny_train_config().rl.model_dump(), "advantage": "gae"})
    trainer = Trainer(cfg)
    trainer.run()
    import json

    rows = [json.loads(line) for line in Path(cfg.run_dir, "metrics.jsonl").read_text().splitlines()]
    rl_rows = [r for r in rows if r.get("stage") == "rl"]
    assert rl_rows and all("value_loss" in r and "value_explained_variance" in r for r in rl_rows)
    assert all(r["value_loss"] == r["value_loss"] for r in rl_rows)  # finite, not NaN
    assert "reward_terms/verifier" in rl_rows[0]


def test_gae_with_task_normalize_is_a_config_error(tiny_train_config):
    with pytest.raises(UserError, match=r"rl\.task_normalize .* rl\.advantage=gae"):
        tiny_train_config(rl={**tiny_train_config().rl.model_dump(), "advantage": "gae", "task_normalize": True})


def test_resumed_gae_run_matches_uninterrupted(tiny_train_config, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    rl = {**tiny_train_config().rl.model_dump(), "advantage": "gae"}
    full = tiny_train_config(run_dir=str(tmp_path / "full"), rl=rl)
    Trainer(full).run()

    cfg = tiny_train_config(run_dir=str(tmp_path / "crashed"), rl=rl)
    from polyrl.train import rl_stage

    original, calls = rl_stage.policy_update, {"n": 0}

    def crash_after_four(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:
            raise RuntimeError("simulated crash")
        return original(*args, **kwargs)

    monkeypatch.setattr(rl_stage, "policy_update", crash_after_four)
    with pytest.raises(RuntimeError, match="simulated crash"):
        Trainer(cfg).run()
    monkeypatch.setattr(rl_stage, "policy_update", original)
    Trainer(cfg, resume=True).run()
    a = load_file(str(tmp_path / "full" / "final_model" / "model.safetensors"))
    b = load_file(str(tmp_path / "crashed" / "final_model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_critic_warmup_trains_the_value_model_and_leaves_the_policy_alone(tiny_train_config, monkeypatch):
    import copy
    import json

    from polyrl.train import rl_stage

    rl = {**tiny_train_config().rl.model_dump(), "advantage": "gae", "steps": 1, "critic": {"warmup_steps": 3}}
    cfg = tiny_train_config(rl=rl)
    seen = {}
    original = rl_stage.policy_update

    def first_update(model, *args, critic=None, **kwargs):  # right after the warm-up, before the first update
        if not seen:
            seen["policy"] = copy.deepcopy(model.state_dict())
            seen["head"] = critic.model.head.weight.detach().clone()
        return original(model, *args, critic=critic, **kwargs)

    monkeypatch.setattr(rl_stage, "policy_update", first_update)
    trainer = Trainer(cfg)
    trainer.sft.run(None)
    after_sft = copy.deepcopy(trainer.parts.policy.model.state_dict())
    trainer.rl.run(None)
    trainer.parts.run_dir.close()
    assert all(torch.equal(after_sft[k], seen["policy"][k]) for k in after_sft), "warm-up must not move the policy"
    assert seen["head"].abs().sum() > 0, "the zero-initialised value head was trained"
    rows = [json.loads(line) for line in Path(cfg.run_dir, "metrics.jsonl").read_text().splitlines()]
    warm = [r for r in rows if r.get("stage") == "critic_warmup"]
    assert [r["step"] for r in warm] == [1, 2, 3]
    assert all(r["value_loss"] == r["value_loss"] and "value_explained_variance" in r for r in warm)
    assert [r["step"] for r in rows if r.get("stage") == "rl"] == [1]


def test_negative_critic_warmup_is_a_config_error(tiny_train_config):
    with pytest.raises(UserError, match=r"rl\.critic\.warmup_steps"):
        tiny_train_config(rl={**tiny_train_config().rl.model_dump(), "critic": {"warmup_steps": -1}})
