"""Reward models and label-free rewards from the command line into a training run."""

import json
from pathlib import Path

from polyrl.cli import run
from polyrl.train.trainer import Trainer


def test_rm_cli_then_training_with_model_and_majority_terms(tmp_path, capsys, tiny_train_config):
    pairs = tmp_path / "prefs.jsonl"
    assert run(["rm", "build-data", "--tasks", "addition,sort_digits", "--n", "16", "--out", str(pairs)]) == 0
    rows = [json.loads(line) for line in pairs.read_text().splitlines()]
    assert len(rows) == 32 and {"prompt", "chosen", "rejected"} <= set(rows[0])
    rm_dir = tmp_path / "rm"
    assert run(["rm", "train", "--data", str(pairs), "--out", str(rm_dir), "--steps", "4", "--batch-size", "8"]) == 0
    assert "pairwise accuracy" in capsys.readouterr().out.lower()

    cfg = tiny_train_config(
        rl__steps=2, sft__steps=2,
        reward={"verifier": 1.0, "reward_model": 0.5, "majority_vote": 0.5,
                "reward_model_source": {"path": str(rm_dir)}},
    )
    Trainer(cfg).run()
    records = [json.loads(x) for x in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in records if r["stage"] == "rl"][-1]
    assert 0.0 <= last["reward_terms/reward_model"] <= 1.0
    assert 0.0 <= last["reward_terms/majority_vote"] <= 1.0


def test_rm_train_rejects_preference_files_without_the_columns(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "1+1=", "chosen": "2"}\n')
    assert run(["rm", "train", "--data", str(bad), "--out", str(tmp_path / "rm")]) == 2
    err = capsys.readouterr().err.strip()
    assert "rejected" in err and len(err.splitlines()) == 1
