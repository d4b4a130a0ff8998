"""Same seed, same run, at any thread count (issue #25: with threads=2 two identical runs ended with different
weights). ``deterministic`` is on by default."""

import json
from pathlib import Path

import torch

from polyrl.train.trainer import Trainer

VOLATILE = {"step_time", "tokens_per_s", "completions_per_s"}


def _weights(run_dir) -> dict:
    from safetensors.torch import load_file

    return load_file(str(Path(run_dir) / "final_model" / "model.safetensors"))


def _records(run_dir) -> list[dict]:
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in VOLATILE} for line in lines]


def test_two_runs_with_two_threads_end_with_the_same_weights_and_metrics(tiny_train_config, tmp_path):
    runs = [tiny_train_config(run_dir=str(tmp_path / name), threads=2, tensorboard=False) for name in "ab"]
    for cfg in runs:
        Trainer(cfg).run()
    a, b = (_weights(cfg.run_dir) for cfg in runs)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert _records(runs[0].run_dir) == _records(runs[1].run_dir)


def test_deterministic_is_the_default_and_switches_torchs_deterministic_algorithms(tiny_train_config, tmp_path):
    try:
        cfg = tiny_train_config(run_dir=str(tmp_path / "off"), deterministic=False)
        Trainer(cfg)
        assert not torch.are_deterministic_algorithms_enabled()
        cfg = tiny_train_config(run_dir=str(tmp_path / "on"))
        assert cfg.deterministic
        Trainer(cfg)
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(False)
