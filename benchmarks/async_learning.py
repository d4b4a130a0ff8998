"""Does the default suite still learn with asynchronous rollouts? In-process synchronous RL, Ray synchronous
and Ray asynchronous (bounded staleness, truncated importance sampling) from one SFT warm start, equal RL
steps, held-out accuracy of each — in one run.

    python benchmarks/async_learning.py [--rl-steps 150] [--sft-steps 600] [--seeds 0] [--max-staleness 1]
                                        [--modes local,ray-sync,ray-async] [--markdown]

The default job's config (configs/default.yaml) with ``rl.steps`` shortened; every mode starts from the same
SFT model directory (``model.path=<dir>``, ``sft.enabled=false``) with the same seed, so the modes differ
only in where rollouts run and how stale they may be. Held-out: ``eval.problems_per_task`` eval-split
problems per task (greedy accuracy and pass@k as in the default job). Ray: 2 rollout actors on a local
instance (``num_cpus`` 2).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import tempfile
import time
import warnings
from pathlib import Path

import torch
from machine import (  # benchmarks/machine.py (scripts run from benchmarks/)
    cpu_model,
    markdown_table,
    mean_std,
)

from polyrl.cli.train import default_config_path
from polyrl.train.config import load_config
from polyrl.train.trainer import Trainer

MODES = ("local", "ray-sync", "ray-async")


def sft_model(args, work: Path, seed: int) -> tuple[Path, dict, str]:
    cfg = load_config(
        default_config_path(),
        [
            f"run_dir={work / 'sft'}",
            f"seed={seed}",
            f"sft.steps={args.sft_steps}",
            "rl.enabled=false",
            "progress=false",
            "tensorboard=false",
            f"eval.problems_per_task={args.eval_problems}",
            f"threads={args.threads}",
        ],
    )
    trainer = Trainer(cfg)
    results = trainer.run()
    return trainer.parts.run_dir.model_dir("sft_model"), results["after_sft"], trainer.config.prompt.style


def rl_run(args, work: Path, seed: int, mode: str, start: Path, style: str) -> dict:
    overrides = [
        f"prompt.style={style}",  # as in SFT (a model directory would otherwise get its family's default style)
        f"run_dir={work / mode}",
        f"seed={seed}",
        f"model.path={start}",
        "sft.enabled=false",
        f"rl.steps={args.rl_steps}",
        "progress=false",
        "tensorboard=false",
        f"eval.problems_per_task={args.eval_problems}",
        f"threads={args.threads}",
        f"checkpoint_every={args.rl_steps}",
    ]
    if mode != "local":
        overrides += [
            "backend=ray",
            "ray.num_rollout_workers=2",
            "ray.num_cpus=2",
            f"ray.max_staleness={args.max_staleness}",
            f"ray.async={'true' if mode == 'ray-async' else 'false'}",
        ]
    trainer = Trainer(load_config(default_config_path(), overrides))
    t0 = time.perf_counter()
    results = trainer.run()
    wall = time.perf_counter() - t0
    rl = [json.loads(line) for line in trainer.parts.run_dir.metrics_file.read_text().splitlines()]
    rl = [r for r in rl if r.get("stage") == "rl"]
    out = {
        "mode": mode,
        "accuracy": results["after_rl"],
        "wall_s": wall,
        "rl_s": sum(r["step_time"] for r in rl),
        "updates": trainer.state.policy_version,
    }
    pool = trainer.parts.rollout_pool
    if pool is not None:
        out["staleness"] = dict(sorted(collections.Counter(pool.stats.staleness).items()))
        out["stale_reruns"], out["failed_groups"], out["reruns"] = (
            pool.stats.stale_reruns,
            pool.stats.failed_groups,
            pool.stats.reruns,
        )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rl-steps", type=int, default=150)
    p.add_argument("--sft-steps", type=int, default=600)
    p.add_argument("--eval-problems", type=int, default=100, help="held-out problems per task")
    p.add_argument("--max-staleness", type=int, default=1)
    p.add_argument("--seeds", default="0", help="comma-separated; each runs SFT once and every mode")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--threads", type=int, default=1, help="torch threads of the trainer process")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        p.error(f"unknown mode(s) {unknown}; choose from {', '.join(MODES)}")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    load = [os.getloadavg()[0]]
    runs = []
    for seed in seeds:
        with tempfile.TemporaryDirectory(prefix="polyrl-async-learning-") as tmp:
            work = Path(tmp)
            t0 = time.perf_counter()
            start, sft_acc, style = sft_model(args, work, seed)
            print(
                f"# seed {seed}: SFT {time.perf_counter() - t0:.0f} s, held-out mean {100 * sft_acc['mean']['accuracy']:.1f}%",
                flush=True,
            )
            row = {"seed": seed, "sft": sft_acc}
            for mode in modes:
                row[mode] = rl_run(args, work, seed, mode, start, style)
                r = row[mode]
                print(
                    f"# seed {seed} {mode}: {r['wall_s']:.0f} s, held-out mean {100 * r['accuracy']['mean']['accuracy']:.1f}%, "
                    f"updates {r['updates']}, staleness {r.get('staleness', '-')}",
                    flush=True,
                )
            runs.append(row)
    load.append(os.getloadavg()[0])

    tasks = [t for t in runs[0]["sft"] if t != "mean"]
    header = ["task", "SFT start", *modes]
    rows = [
        [
            t,
            mean_std([100 * r["sft"][t]["accuracy"] for r in runs]) + "%",
            *(mean_std([100 * r[m]["accuracy"][t]["accuracy"] for r in runs]) + "%" for m in modes),
        ]
        for t in [*tasks, "mean"]
    ]
    passk = next((k for k in runs[0]["sft"]["mean"] if k.startswith("pass@") and k != "pass@1"), None)
    if passk:
        rows.append(
            [
                f"{passk} mean",
                mean_std([100 * r["sft"]["mean"][passk] for r in runs]) + "%",
                *(mean_std([100 * r[m]["accuracy"]["mean"][passk] for r in runs]) + "%" for m in modes),
            ]
        )
    speed_header = [
        "mode",
        "RL stage s",
        "policy updates",
        "staleness (trajectories per lag)",
        "stale re-runs",
        "failed groups",
    ]
    speed = []
    for m in modes:
        staleness = collections.Counter()
        for r in runs:
            staleness.update(r[m].get("staleness", {}))
        speed.append(
            [
                m,
                mean_std([r[m]["rl_s"] for r in runs], "{:.0f}"),
                mean_std([r[m]["updates"] for r in runs], "{:.0f}"),
                str(dict(sorted(staleness.items()))) if staleness else "—",
                str(sum(r[m].get("stale_reruns", 0) for r in runs)),
                str(sum(r[m].get("failed_groups", 0) for r in runs)),
            ]
        )
    machine = (
        f"{cpu_model()}, {os.cpu_count()} cores (load average {load[0]:.1f} at start, {load[1]:.1f} at end), "
        f"torch {torch.__version__}, Python {platform.python_version()}"
    )
    setup = (
        f"default suite, SFT {args.sft_steps} steps, then {args.rl_steps} RL steps per mode (16 prompts × G=8, dynamic "
        f"sampling), max_staleness {args.max_staleness}, seeds {', '.join(map(str, seeds))}, "
        f"{args.eval_problems} held-out problems per task"
    )
    if args.markdown:
        print(f"Machine: {machine}.\n\nSetup: {setup}.\n")
        for h, rs in ((header, rows), (speed_header, speed)):
            print(markdown_table(h, rs) + "\n")
        return
    print(machine)
    print(setup)
    for h, rs in ((header, rows), (speed_header, speed)):
        print("\t".join(h))
        for r in rs:
            print("\t".join(r))


if __name__ == "__main__":
    main()
