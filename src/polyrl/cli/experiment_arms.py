"""``polyrl experiment critic`` and ``polyrl experiment surgery``: arms defined in a config, compared over seeds.

Both reuse the curriculum experiment's machinery (shared SFT warm start per seed, one run per arm and seed,
report.md): the arms are the config's ``strategies:``. ``critic`` compares GRPO with PPO critics (MSE,
HL-Gauss); ``surgery`` compares summed multi-task gradients with PCGrad and CAGrad.
"""

from __future__ import annotations

from typing import Annotated

import typer

from polyrl.cli.experiment import Budget, Jobs, invoked_command
from polyrl.errors import UserError

# The options every arms command takes, each stated once (the defaults stay at each command).
Config = Annotated[str, typer.Option("--config", "-c", help="Experiment config (YAML with strategies: per arm).")]
Seeds = Annotated[int, typer.Option("--seeds", help="Seeds per arm (0..N-1).")]
Arms = Annotated[
    str | None, typer.Option("--arms", help="Comma-separated arms from the config's strategies (default: all).")
]
Out = Annotated[str, typer.Option("--out", help="Output directory (runs, report.md, results.json).")]
ShareSft = Annotated[bool, typer.Option("--share-sft/--sft-per-seed", help="One SFT warm start for all seeds.")]


def _compare(
    config: str,
    seeds: int,
    arms: str | None,
    out: str,
    share_sft: bool,
    title: str,
    baseline: str,
    budget: bool = False,
    hard_difficulty: float | None = 0.5,
    verdict_split: str = "easy",
    jobs: int = 1,
    prune_checkpoints: bool = False,
) -> None:
    import dataclasses

    from polyrl.experiments.curriculum import plan_experiment, run_experiment
    from polyrl.experiments.summary import split_names

    names = [s.strip() for s in arms.split(",") if s.strip()] if arms else None
    if jobs < 1:
        raise UserError(f"--jobs must be at least 1, got {jobs}")
    plan = plan_experiment(config, seeds, names, out, hard_difficulty=hard_difficulty, share_sft=share_sft)
    plan = dataclasses.replace(plan, prune_checkpoints=prune_checkpoints)
    if not any(s.name == baseline for s in plan.strategies):
        raise UserError(
            f"--baseline {baseline!r} is not one of the arms: {', '.join(s.name for s in plan.strategies)}"
        )
    if verdict_split not in split_names(plan):
        raise UserError(
            f"--verdict-split {verdict_split!r} is not a split of this comparison: {', '.join(split_names(plan))}"
        )
    _print_budget(plan, probe=budget, jobs=jobs)
    if budget:
        return
    command = invoked_command()
    summary = run_experiment(
        plan,
        log=lambda m: print(m, flush=True),
        command=command,
        title=title,
        baseline=baseline,
        verdict_split=verdict_split,
        jobs=jobs,
    )
    for name, row in summary["strategies"].items():
        for split in split_names(plan):
            mean, std = row[split]["mean"]
            label = "held-out accuracy" if split == "easy" else f"held-out {split}"
            print(f"{name:16s} {label:18s} {100 * mean:5.1f} ± {100 * std:4.1f}")
    print(f"report: {plan.out / 'report.md'}")


def critic(
    config: Config = "configs/ppo_critic.yaml",
    seeds: Seeds = 3,
    arms: Arms = None,
    out: Out = "runs/ppo_critic",
    share_sft: ShareSft = True,
) -> None:
    """Compare advantage estimators (GRPO, PPO+MSE critic, PPO+HL-Gauss critic) on the same budget."""
    _compare(config, seeds, arms, out, share_sft, "PPO critics (MSE, HL-Gauss) vs GRPO", "grpo")


def surgery(
    config: Config = "configs/gradient_surgery.yaml",
    seeds: Seeds = 3,
    arms: Arms = None,
    out: Out = "runs/gradient_surgery",
    share_sft: ShareSft = False,
) -> None:
    """Compare multi-task gradient surgery (PCGrad, CAGrad) with summed gradients on the same budget."""
    title = "Multi-task gradient surgery: PCGrad and CAGrad vs summed gradients"
    _compare(config, seeds, arms, out, share_sft, title, "summed")


def _print_budget(plan, probe: bool, jobs: int = 1) -> None:
    """The runs left and their estimated wall time; without ``probe`` only from what is already recorded."""
    from polyrl.experiments.budget import estimate_budget, format_budget

    print(format_budget(estimate_budget(plan, probe=probe), jobs=jobs), flush=True)


def arms(
    config: Config,
    baseline: str = typer.Option(..., "--baseline", help="The arm every other arm is compared with."),
    seeds: Seeds = 3,
    arms: Arms = None,
    out: Out = "runs/arms",
    share_sft: ShareSft = False,
    title: str | None = typer.Option(None, "--title", help="The report's title (default: from the config name)."),
    budget: Budget = False,
    verdict_split: str = typer.Option(
        "easy", "--verdict-split", help="The held-out split the verdict is on (easy; attempt2 with eval.attempts: 2)."
    ),
    jobs: Jobs = 1,
    prune_checkpoints: bool = typer.Option(
        False,
        "--prune-checkpoints",
        help="Delete each finished arm run's checkpoints (optimizer states; ~1.6 GB each on a 135M model) and its "
        "copy of the warm start (its final model and evals stay), and a seed's SFT checkpoint once its arms finished.",
    ),
) -> None:
    """Compare the arms defined under the config's strategies: with a baseline over seeds (paired by seed)."""
    from pathlib import Path

    _compare(
        config,
        seeds,
        arms,
        out,
        share_sft,
        title or f"{Path(config).stem}: arms vs {baseline}",
        baseline,
        budget,
        hard_difficulty=None,
        verdict_split=verdict_split,
        jobs=jobs,
        prune_checkpoints=prune_checkpoints,
    )
