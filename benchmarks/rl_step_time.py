"""CPU seconds of each RL step of the default job's tasks on a model: run it once per source tree to compare two
versions of polyrl side by side (the one on ``PYTHONPATH`` is measured).

    PYTHONPATH=<tree>/src .venv/bin/python benchmarks/rl_step_time.py --model /tmp/smollm2 [--steps 3]
                                                                       [--prompts 2] [--group-size 8]
                                                                       [--max-new-tokens 32] [key=value ...]

Each step is ``Trainer.rl_step`` (generation, rewards, advantages, the update, metrics), timed in process CPU
seconds with one thread (a shared machine disturbs that far less than the wall time); every row is trained
on (``rl.skip_zero_advantage=false``: an untrained model's all-zero groups would otherwise skip the update).
The step's behaviour/training mismatch statistics are printed when the run logs them.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from polyrl.cli.train import default_config_path
from polyrl.train.config import load_config
from polyrl.train.trainer import Trainer

SHOWN = ("updates", "tokens", "mismatch_abs_mean", "mismatch_abs_max", "mismatch_ratio_mean", "tis_weight_mean")


def start_rl(trainer: Trainer, rl):
    """The optimizer made and the weights broadcast as the RL stage starts; the function of one RL step. Works
    with the composed Trainer (``trainer.rl``) and with the Trainer of earlier versions (``trainer.rl_step``),
    so the same script measures both trees of an A/B."""
    if hasattr(trainer, "rl_step"):  # before the Trainer was composed of stages
        trainer._make_optimizer(rl.lr, rl.warmup_steps, rl.steps, cosine=False, weight_decay=rl.weight_decay)
        trainer._broadcast_weights()
        return lambda step: trainer.rl_step(step, trainer._seed_step("rl", step))
    trainer.rl.training.make_optimizer(rl.lr, rl.warmup_steps, rl.steps, cosine=False, weight_decay=rl.weight_decay)
    trainer.rl.broadcast_weights()
    return lambda step: trainer.rl.step(step, trainer.parts.seed_step("rl", step))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("overrides", nargs="*", help="More config overrides (key=value).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        overrides = [
            f"run_dir={tmp}/run",
            f"model.path={args.model}",
            "sft.enabled=false",
            f"rl.steps={args.steps}",
            f"rl.prompts_per_step={args.prompts}",
            f"rl.group_size={args.group_size}",
            f"rl.max_new_tokens={args.max_new_tokens}",
            "rl.dynamic_sampling=false",
            "rl.skip_zero_advantage=false",
            "threads=1",
            "tensorboard=false",
            "progress=false",
            "seed=0",
            *args.overrides,
        ]
        cfg = load_config(default_config_path(), overrides)
        trainer = Trainer(cfg)
        rl_step = start_rl(trainer, cfg.rl)
        seconds = []
        for step in range(args.steps):
            start = time.process_time()
            metrics = rl_step(step)
            seconds.append(time.process_time() - start)
            shown = {k: round(metrics[k], 4) for k in SHOWN if metrics.get(k) is not None}
            print(json.dumps({"step": step + 1, "cpu_s": round(seconds[-1], 2), **shown}), flush=True)
        autocast = getattr(trainer.parts.policy.model, "polyrl_autocast", None) or "none"
        print(f"autocast {autocast}: mean {sum(seconds) / len(seconds):.2f} CPU s per step over {len(seconds)} steps")
        trainer.parts.run_dir.close()


if __name__ == "__main__":
    main()
