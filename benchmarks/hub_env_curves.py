"""Curves of runs on environments from other hubs (docs/hub-environments.md): per run, the training episodes'
success and mean reward per RL step (moving average over ``--window`` steps), with the held-out accuracy before
and after RL as the line's two ends; prints the held-out table.

    python benchmarks/hub_env_curves.py runs/smollm2_gem runs/smollm2_openenv --out docs/img/hub_envs_smollm2.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _smooth(values: list[float], window: int) -> list[float]:
    return [
        sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
        for i in range(len(values))
    ]


def curves(run_dir: Path) -> dict:
    """The run's environment, per-step training success and reward, and held-out accuracy before and after RL."""
    records = _records(run_dir)
    rl = [r for r in records if r.get("stage") == "rl"]
    (env,) = {k.split("/", 1)[1] for r in rl for k in r if k.startswith("success/")}
    evals = [r for r in records if r.get("stage") == "eval"]
    held_out = [r.get(f"accuracy/{env}") for r in evals]
    return {
        "env": env,
        "steps": [r["step"] for r in rl],
        "success": [r[f"success/{env}"] for r in rl],
        "reward": [r["reward"] for r in rl],
        "before": held_out[0] if held_out else None,
        "after": held_out[-1] if held_out else None,
    }


def plot(runs: list[dict], out: Path, window: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(5.5 * len(runs), 3.8), squeeze=False)
    for ax, run in zip(axes[0], runs):
        ax.plot(run["steps"], _smooth(run["success"], window), label=f"training success ({window}-step mean)")
        ax.plot(run["steps"], _smooth(run["reward"], window), label=f"training reward ({window}-step mean)")
        if run["before"] is not None:
            ax.scatter([0, run["steps"][-1]], [run["before"], run["after"]], color="black", zorder=3)
            ax.plot([0, run["steps"][-1]], [run["before"], run["after"]], "k--", label="held-out accuracy")
        ax.set_title(run["env"], fontsize=9)
        ax.set_xlabel("RL step")
        ax.set_ylim(-0.05, 1.05)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--window", type=int, default=10)
    args = parser.parse_args()
    runs = [curves(r) for r in args.runs]
    for run in runs:
        before, after = run["before"], run["after"]
        delta = f"{100 * (after - before):+.1f}" if before is not None and after is not None else "—"
        print(f"| `{run['env']}` | {100 * (before or 0):.1f}% | {100 * (after or 0):.1f}% | {delta} |")
    plot(runs, args.out, args.window)
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
