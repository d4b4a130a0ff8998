"""``polyrl experiment transfer``: leave-one-category-out multi-task transfer (``experiments/transfer.py``)."""

from __future__ import annotations

import typer

from polyrl.cli.experiment import invoked_command


def transfer(
    config: str = typer.Option(..., "--config", "-c", help="Training config whose tasks span 3+ categories."),
    holdout: str = typer.Option(..., "--holdout", help="The category RL never trains on (evaluated in every arm)."),
    seeds: int = typer.Option(3, "--seeds", help="Seeds per arm (0..N-1); one SFT warm start per seed."),
    one: str | None = typer.Option(
        None, "--one", help="Comma-separated categories to train alone (default: every other category)."
    ),
    holdout_arm: bool = typer.Option(
        True, "--holdout-arm/--no-holdout-arm", help="Also RL on the held-out category itself (reference)."
    ),
    out: str = typer.Option("runs/transfer", "--out", help="Output directory (runs, report.md, results.json)."),
    budget: bool = typer.Option(False, "--budget", help="Print the number of runs and the time estimate, then stop."),
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
