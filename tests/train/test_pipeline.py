"""The training pipeline end to end on a tiny config: outputs, metrics, formats."""

import json

import torch

from polyrl.device import HOST
from polyrl.train.trainer import Trainer

PER_STEP_METRICS = ("reward", "accuracy", "response_length", "entropy", "kl", "clip_fraction", "zero_variance_frac")


def test_pipeline_writes_models_metrics_eval_and_summary(tiny_train_config):
    cfg = tiny_train_config(rl__kl_coef=0.05)
    results = Trainer(cfg).run()
    run = cfg.run_dir
    from pathlib import Path

    run = Path(run)
    for name in ("config.yaml", "metrics.jsonl", "summary.md", "eval/after_sft.json", "eval/after_rl.json"):
        assert (run / name).is_file(), name
    assert list((run / "tb").glob("events.out.tfevents.*"))
    assert set(results["after_rl"]) == {"addition", "sort_digits", "mean"}
    assert {"accuracy", "pass@1", "pass@2", "format_rate"} <= set(results["after_rl"]["addition"])
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in records if r["stage"] == "rl"]
    assert [r["step"] for r in rl] == [1, 2, 3, 4, 5, 6]
    for key in PER_STEP_METRICS:
        assert key in rl[-1] and f"{key}/addition" in rl[-1] and f"{key}/sort_digits" in rl[-1]
    assert rl[-1]["kl"] >= 0 and rl[-1]["tokens_per_s"] > 0


def test_trained_model_loads_and_generates_in_plain_transformers(tiny_train_config):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = tiny_train_config(rl__steps=1)
    Trainer(cfg).run()
    path = f"{cfg.run_dir}/final_model"
    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    text = tok.apply_chat_template([{"role": "user", "content": "12+34="}], tokenize=False, add_generation_prompt=True)
    ids = tok(text, return_tensors="pt", add_special_tokens=False)
    out = model.generate(**ids, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == ids.input_ids.shape[1] + 4 or tok.eos_token_id in out[0].tolist()


def test_dynamic_sampling_drops_zero_variance_groups(tiny_train_config):
    cfg = tiny_train_config(rl__dynamic_sampling=True, rl__max_refills=1, rl__steps=2, sft__enabled=False)
    Trainer(cfg).run()
    from pathlib import Path

    rl = [json.loads(x) for x in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rl if r["stage"] == "rl"]
    # an untrained model fails everything: every group has zero variance and is dropped
    assert all(r["groups_dropped"] > 0 for r in rl)


def test_nonfinite_losses_skip_updates_then_stop_with_a_usable_checkpoint(tiny_train_config, monkeypatch):
    import pytest

    from polyrl.learner import update as learner
    from polyrl.train.checkpoint import latest_checkpoint
    from polyrl.train.trainer import TrainingError

    real = learner.sequence_logprobs

    def poisoned(model, batch, *args, **kwargs):
        logp, ent = real(model, batch, *args, **kwargs)
        return logp * float("nan"), ent

    monkeypatch.setattr(learner, "sequence_logprobs", poisoned)
    # an entropy bonus keeps zero-advantage sequences in the update, so every step runs a (poisoned) update
    cfg = tiny_train_config(rl__max_bad_steps=2, rl__epochs=1, rl__minibatches=1, rl__entropy_coef=0.01)
    trainer = Trainer(cfg)
    before = {k: v.clone() for k, v in trainer.parts.policy.model.state_dict().items()}
    with pytest.warns(UserWarning, match="non-finite"), pytest.raises(TrainingError, match="consecutive"):
        trainer.run()
    ckpt = latest_checkpoint(trainer.parts.run_dir.checkpoints)
    assert ckpt.stage == "rl" and ckpt.step == 1
    # the skipped updates did not touch the weights: they are the SFT weights
    from polyrl.train.checkpoint import load_model_weights

    sft_state = {k: v.clone() for k, v in trainer.parts.policy.model.state_dict().items()}
    load_model_weights(trainer.parts.policy.model, ckpt.path / "model")
    assert all(torch.equal(sft_state[k], v) for k, v in trainer.parts.policy.model.state_dict().items())
    assert any(not torch.equal(before[k], sft_state[k]) for k in before)  # SFT did train


def test_lora_training_saves_a_merged_plain_checkpoint(tiny_train_config):
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    cfg = tiny_train_config(
        model={**tiny_train_config().model.model_dump(), "lora": {"enabled": True, "r": 4, "alpha": 8}},
        rl__steps=2,
        sft__steps=2,
    )
    trainer = Trainer(cfg)
    trainable = sum(p.numel() for p in trainer.state.training.parameters())
    total = sum(p.numel() for p in trainer.parts.policy.model.parameters())
    assert 0 < trainable < total / 2
    trainer.run()
    model = AutoModelForCausalLM.from_pretrained(Path(cfg.run_dir) / "final_model")
    assert not any("lora" in name for name, _ in model.named_parameters())


def test_rejection_sampling_round_is_logged(tiny_train_config):
    from pathlib import Path

    cfg = tiny_train_config(
        sft__rejection_sampling_rounds=1, sft__rejection_problems=8, sft__rejection_steps=2, rl__enabled=False
    )
    results = Trainer(cfg).run()
    assert "after_rl" not in results
    records = [json.loads(x) for x in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    rft = [r for r in records if "rft_round" in r]
    assert len(rft) == 1 and 0.0 <= rft[0]["rft_pass_rate"] <= 1.0


def test_periodic_evaluation_during_rl(tiny_train_config):
    from pathlib import Path

    cfg = tiny_train_config(eval__every=2, sft__steps=2)
    Trainer(cfg).run()
    files = sorted(p.name for p in (Path(cfg.run_dir) / "eval").glob("rl_step_*.json"))
    assert files == ["rl_step_000002.json", "rl_step_000004.json"]


def test_skipping_zero_advantage_sequences_leaves_the_update_unchanged(tiny_train_config):
    import copy

    import numpy as np

    from polyrl.learner.settings import UpdateSettings
    from polyrl.learner.update import policy_update
    from polyrl.learner.update_batch import prepare_update

    cfg = tiny_train_config(sft__steps=4, rl__epochs=1, rl__minibatches=1, rl__group_size=4, rl__prompts_per_step=8)
    trainer = Trainer(cfg)
    trainer.sft.run(None)
    trainer.state.training.make_optimizer(cfg.rl.lr, 0, 10, cosine=False, weight_decay=0.0)
    torch.manual_seed(0)
    trajs = trainer.rl.collect(0, np.random.default_rng(0)).trajectories
    for k, t in enumerate(trajs):  # mixed rewards in the first two groups, all-zero rewards elsewhere
        t.reward = float(k % 2) if t.group < 2 else 0.0
    start = copy.deepcopy(trainer.parts.policy.model.state_dict())

    def update(skip: bool):
        trainer.parts.policy.model.load_state_dict(start)
        trainer.state.training.make_optimizer(cfg.rl.lr, 0, 10, cosine=False, weight_decay=0.0)
        rl = UpdateSettings.from_config(cfg.rl).replace(skip_zero_advantage=skip)
        batch = prepare_update(trajs, list(trainer.parts.mix.tasks), trainer.parts.policy.tokenizer.pad_token_id, rl)
        out = policy_update(
            trainer.parts.policy.model,
            trainer.state.training.optimizer,
            batch,
            rl,
            trainer.state.training.parameters(),
            device=HOST,
        )
        return out, {k: v.clone() for k, v in trainer.parts.policy.model.state_dict().items()}

    skipped, w_skip = update(True)
    full, w_full = update(False)
    assert 0 < skipped.trained_sequences < full.trained_sequences == len(trajs)
    assert all(torch.allclose(w_skip[k], w_full[k], atol=1e-6) for k in w_full)
    assert abs(skipped.loss - full.loss) < 1e-5
