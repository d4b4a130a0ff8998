"""``polyrl experiment critic``: GRPO vs PPO with MSE and HL-Gauss critics, over seeds, as a Markdown report.

It reuses the curriculum experiment's machinery (shared SFT warm start per seed, one run per arm and
seed, report.md): the arms are the ``strategies:`` of the config, which here set ``rl.advantage`` and
``rl.critic``.
"""

from __future__ import annotations

import shlex
import sys

import typer


def critic(
    config: str = typer.Option(
        "configs/ppo_critic.yaml", "--config", "-c", help="Experiment config (YAML with strategies: per arm)."
    ),
    seeds: int = typer.Option(3, "--seeds", help="Seeds per arm (0..N-1)."),
    arms: str | None = typer.Option(
        None, "--arms", help="Comma-separated arms from the config's strategies (default: all)."
    ),
    out: str = typer.Option("runs/ppo_critic", "--out", help="Output directory (runs, report.md, results.json)."),
    share_sft: bool = typer.Option(True, "--share-sft/--sft-per-seed", help="One SFT warm start for all seeds."),
) -> None:
    """Compare advantage estimators (GRPO, PPO+MSE critic, PPO+HL-Gauss critic) on the same budget."""
    from polyrl.experiments.curriculum import plan_experiment, run_experiment

    names = [s.strip() for s in arms.split(",") if s.strip()] if arms else None
    plan = plan_experiment(config, seeds, names, out, share_sft=share_sft)
    command = "polyrl " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["experiment"] else None
    summary = run_experiment(
        plan,
        log=lambda m: print(m, flush=True),
        command=command,
        title="PPO critics (MSE, HL-Gauss) vs GRPO",
        baseline="grpo",
        verdict_split="easy",
    )
    for name, row in summary["strategies"].items():
        easy = row["easy"]["mean"]
        print(f"{name:16s} held-out accuracy {100 * easy[0]:5.1f} ± {100 * easy[1]:4.1f}")
    print(f"report: {plan.out / 'report.md'}")
