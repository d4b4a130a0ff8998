"""``polyrl experiment transfer`` (leave-one-category-out, ``experiments/transfer.py``) and ``polyrl experiment
specialists`` (joint vs single-task specialists, ``experiments/specialists.py``): multi-task transfer."""

from __future__ import annotations

from typing import Annotated

import typer

from polyrl.cli.experiment import Budget, Jobs, invoked_command

Seeds = Annotated[int, typer.Option("--seeds", help="Seeds per arm (0..N-1); one SFT warm start per seed.")]


def transfer(
    config: str = typer.Option(..., "--config", "-c", help="Training config whose tasks span 3+ categories."),
    holdout: str = typer.Option(..., "--holdout", help="The category RL never trains on (evaluated in every arm)."),
    seeds: Seeds = 3,
    one: str | None = typer.Option(
        None, "--one", help="Comma-separated categories to train alone (default: every other category)."
    ),
    holdout_arm: bool = typer.Option(
        True, "--holdout-arm/--no-holdout-arm", help="Also RL on the held-out category itself (reference)."
    ),
    out: str = typer.Option("runs/transfer", "--out", help="Output directory (runs, report.md, results.json)."),
    budget: Budget = False,
) -> None:
    """RL on one other category vs several vs none, all on the same budget, scored on a held-out category."""
    from polyrl.experiments.budget import estimate_budget, format_budget
    from polyrl.experiments.transfer import ALL_OTHERS, WARM_START, plan_transfer, run_transfer

    ones = [c.strip() for c in one.split(",") if c.strip()] if one is not None else None
    plan, design = plan_transfer(config, holdout, seeds, out, ones, holdout_arm)
    for arm, cats in design.arms.items():
        on = "; ".join(f"{c} ({', '.join(design.categories[c])})" for c in cats)
        print(f"arm {arm:24s} RL on {on}")
    print(format_budget(estimate_budget(plan, probe=budget)), flush=True)
    if budget:
        return
    command = invoked_command()
    summary = run_transfer(plan, design, log=lambda m: print(m, flush=True), command=command)
    t = summary["transfer"]
    for arm, ci in t["heldout"].items():
        print(f"{arm:24s} held-out {design.holdout} accuracy {100 * ci['mean']:5.1f} ± {100 * ci['sd']:4.1f}")
    for label, d in t["differences"].items():
        if label.startswith(ALL_OTHERS) and not label.endswith(WARM_START):
            print(f"{label:32s} {100 * d['mean']:+5.1f} points [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]")
    print(f"report: {plan.out / 'report.md'}")


def specialists(
    config: str = typer.Option(
        ..., "--config", "-c", help="Training config: its tasks are scored in every arm; rl.steps is the joint budget."
    ),
    train: str = typer.Option(
        ..., "--train", help="Comma-separated tasks RL trains (joint and one specialist each); the rest transfer."
    ),
    holdout_category: str | None = typer.Option(
        None,
        "--holdout-category",
        help="Also leave-one-category-out: RL on the other trained tasks vs this one alone.",
    ),
    seeds: Seeds = 3,
    out: str = typer.Option("runs/specialists", "--out", help="Output directory (runs, report.md, results.json)."),
    jobs: Jobs = 1,
    prune_checkpoints: bool = typer.Option(
        False,
        "--prune-checkpoints",
        help="Delete each finished arm run's checkpoints and its copy of the warm start (its final model stays), "
        "and a seed's SFT checkpoint once its arms finished.",
    ),
    budget: Budget = False,
    target_mde: float | None = typer.Option(
        None,
        "--target-mde",
        help="Points: from the finished seeds (2 or more: a pilot), the seeds joint − specialists needs for this MDE.",
    ),
) -> None:
    """Joint multi-task RL vs single-task specialists on the same RL budget, scored in-domain and on transfer tasks."""
    import dataclasses

    from polyrl.errors import UserError
    from polyrl.experiments.budget import estimate_budget, format_budget
    from polyrl.experiments.specialists import JOINT, SPECIALISTS, plan_specialists, run_specialists

    if jobs < 1:
        raise UserError(f"--jobs must be at least 1, got {jobs}")
    if target_mde is not None and not 0 < target_mde < 100:
        raise UserError(f"--target-mde is in points, between 0 and 100; got {target_mde}")
    tasks = [t.strip() for t in train.split(",") if t.strip()]
    plan, design = plan_specialists(config, tasks, seeds, out, holdout_category)
    plan = dataclasses.replace(plan, prune_checkpoints=prune_checkpoints)
    for arm, (on, steps) in design.arms.items():
        print(f"arm {arm:28s} {steps:4d} RL steps on {', '.join(on)}")
    print(f"transfer tasks (no arm trains them): {', '.join(design.transfer) or 'none'}")
    print(format_budget(estimate_budget(plan, probe=budget), jobs=jobs), flush=True)
    if target_mde is not None:
        print(sizing_line(plan, design, target_mde), flush=True)
    if budget:
        return
    summary = run_specialists(plan, design, log=lambda m: print(m, flush=True), command=invoked_command(), jobs=jobs)
    s = summary["specialists"]
    for arm, m in s["means"].items():
        cells = "   ".join(f"{g} {100 * ci['mean']:5.1f} ± {100 * ci['sd']:4.1f}" for g, ci in m.items())
        print(f"{arm:14s} {cells}")
    for group, d in s["differences"][f"{JOINT} − {SPECIALISTS}"].items():
        if group in ("trained", "transfer"):
            print(
                f"joint − specialists, {group}: {100 * d['mean']:+5.1f} points [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"
            )
    print(f"report: {plan.out / 'report.md'}")


def sizing_line(plan, design, target_mde: float) -> str:
    """The seeds the design needs for ``target_mde`` points (``experiments/by_problem.py: size_seeds``)."""
    from polyrl.experiments.by_problem import seconds_per_seed, size_seeds

    sizing = size_seeds(plan, design, target_mde / 100)
    if sizing is None:
        return (
            "sizing: needs 2 or more finished seeds whose runs kept per-problem answers (a pilot: run --seeds 2 first)"
        )
    return sizing.line(seconds_per_seed(plan, design))
