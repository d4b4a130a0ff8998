"""Same seed, same run: bit-identical at the same thread count (issue #25: with threads=2 two identical runs ended
with different weights), close but not identical at another (issue #36: threads=1 and threads=2 ended with
different weights, though the docs promised the same). ``deterministic`` is on by default."""

import json
import math
from pathlib import Path

import torch

from polyrl.train.trainer import Trainer

VOLATILE = {"step_time", "tokens_per_s", "completions_per_s"}


def _weights(run_dir, model: str = "final_model") -> dict:
    from safetensors.torch import load_file

    return load_file(str(Path(run_dir) / model / "model.safetensors"))


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


def test_sft_at_one_and_two_threads_ends_within_one_last_bit_per_step_of_each_other(tiny_train_config, tmp_path):
    """A float32 sum split across two threads adds in another order, so gradients differ in their last bits (on
    this repository's machine the first SFT step's already did; the losses first differed at step 5). AdamW's
    update m/sqrt(v) does not scale with the gradient, so a last-bit difference in a gradient moves an update
    (at most lr, far below the weights) by about as many of the update's last bits, and each step's weight then
    rounds to within one unit in the last place (ulp). Allowed: one float32 ulp of the largest weight per
    optimizer step. A run that drew different random numbers at another thread count would be about lr (3e-3)
    apart after one step. Only SFT is compared: RL samples tokens, and a token sampled differently (a last-bit
    difference on a sampling boundary) makes two runs different runs (docs/training.md, Determinism)."""
    cfgs = {t: tiny_train_config(run_dir=str(tmp_path / f"t{t}"), threads=t, rl__enabled=False) for t in (1, 2)}
    for cfg in cfgs.values():
        Trainer(cfg).run()
    one, two = (_weights(cfgs[t].run_dir, "sft_model") for t in (1, 2))
    largest = max(float(w.abs().max()) for w in one.values())
    ulp = float(torch.finfo(torch.float32).eps) * 2.0 ** math.floor(math.log2(largest))
    tolerance = cfgs[1].sft.steps * ulp
    assert one.keys() == two.keys()
    assert max(float((one[k] - two[k]).abs().max()) for k in one) <= tolerance
