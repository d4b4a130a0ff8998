"""``polyrl experiment``: reproducible comparisons that train several runs and write a Markdown report."""

from __future__ import annotations

import shlex
import sys
from typing import Annotated

import typer

from polyrl.tasks.base import DEFAULT_DIFFICULTY


def invoked_command() -> str | None:
    """The ``polyrl experiment …`` command line this process runs, for the report; None when called otherwise
    (from Python, or through another entry point)."""
    return "polyrl " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["experiment"] else None


app = typer.Typer(help="Run experiments that compare training strategies.", no_args_is_help=True)

# Options several experiment commands take, each stated once (the default stays at each command).
Jobs = Annotated[
    int, typer.Option("--jobs", help="Seeds trained in parallel worker processes (each at the config's threads).")
]
Budget = Annotated[bool, typer.Option("--budget", help="Print the number of runs and the time estimate, then stop.")]


def _names(text: str | None) -> list[str] | None:
    return [s.strip() for s in text.split(",") if s.strip()] if text else None


@app.command()
def curriculum(
    config: str = typer.Option(..., "--config", "-c", help="Base training config (YAML; may define strategies:)."),
    seeds: int = typer.Option(3, "--seeds", help="Seeds per strategy (0..N-1)."),
    samplers: str | None = typer.Option(
        None,
        "--samplers",
        help="Comma-separated strategies: sampler names, "
        "<sampler>+difficulty, or names under strategies: in the config.",
    ),
    out: str = typer.Option("runs/curriculum", "--out", help="Output directory (runs, report.md, plots)."),
    hard_difficulty: float = typer.Option(
        0.5, "--hard-difficulty", help="Hard-split knob for tasks without eval_difficulty."
    ),
    share_sft: bool = typer.Option(
        False,
        "--share-sft/--sft-per-seed",
        help="One SFT warm start for all seeds (seeds differ only in RL), or one per seed (the default).",
    ),
    jobs: Jobs = 1,
    budget: Budget = False,
) -> None:
    """Train the same budget with several samplers over several seeds; write report.md with plots."""
    from polyrl.errors import UserError
    from polyrl.experiments.budget import estimate_budget, format_budget
    from polyrl.experiments.curriculum import plan_experiment, run_experiment

    if jobs < 1:
        raise UserError(f"--jobs must be at least 1, got {jobs}")
    plan = plan_experiment(config, seeds, _names(samplers), out, hard_difficulty, share_sft)
    print(format_budget(estimate_budget(plan, probe=budget), jobs=jobs), flush=True)
    if budget:
        return
    command = invoked_command()
    summary = run_experiment(plan, log=lambda m: print(m, flush=True), command=command, jobs=jobs)
    for name, row in summary["strategies"].items():
        easy, hard = row["easy"]["mean"], row["hard"]["mean"]
        print(
            f"{name:32s} easy {100 * easy[0]:5.1f} ± {100 * easy[1]:4.1f}   hard {100 * hard[0]:5.1f} ± {100 * hard[1]:4.1f}"
        )
    print(f"report: {plan.out / 'report.md'}")


@app.command("mixture-search")
def mixture_search(
    config: str = typer.Option(..., "--config", "-c", help="Base training config (YAML)."),
    candidates: int = typer.Option(6, "--candidates", help="Proxy runs (candidate mixtures)."),
    proxy_steps: int = typer.Option(10, "--proxy-steps", help="RL steps per proxy run."),
    out: str = typer.Option("runs/mixture_search", "--out", help="Output directory (proxy runs, mixture.yaml)."),
    seed: int = typer.Option(0, "--seed", help="Seed for the candidate mixtures and proxy runs."),
) -> None:
    """Short proxy runs over candidate mixtures, a ridge fit from weights to held-out score, the best mixture."""
    from polyrl.experiments.mixture_search import search_mixture

    result = search_mixture(config, candidates, proxy_steps, out, seed, log=lambda m: print(m, flush=True))
    weights = ", ".join(f"{t}: {w:.3f}" for t, w in result["weights"].items())
    print(f"chosen mixture (predicted held-out score {result['predicted_score']:.3f}): {weights}")
    print(f"written: {result['file']}  (use it as `sampler: {{name: weighted, options: {{weights: ...}}}}`)")


@app.command()
def compose(
    config: str = typer.Option("configs/compose.yaml", "--config", "-c", help="Experiment file (base + strategies:)."),
    seeds: int = typer.Option(3, "--seeds", help="Seeds per arm (0..N-1)."),
    arms: str | None = typer.Option(None, "--arms", help="Comma-separated arms (default: all under strategies:)."),
    out: str = typer.Option("runs/compose", "--out", help="Output directory (runs, report.md, results.json)."),
    difficulty: str = typer.Option(DEFAULT_DIFFICULTY, "--difficulty", help="Knob or preset of the evaluated chains."),
    problems: int = typer.Option(32, "--problems", help="Held-out problems per chain."),
    depth3: int = typer.Option(0, "--depth3", help="Held-out depth-3 chains to evaluate (0: all)."),
    share_sft: bool = typer.Option(
        False, "--share-sft", help="One SFT warm start for all seeds (seeds differ only in RL)."
    ),
) -> None:
    """SFT on primitive string ops, RL on several task mixes, greedy eval on held-out compositions."""
    from polyrl.experiments.compose import HeldOutSuite, plan_compose, run_compose

    plan = plan_compose(config, seeds, _names(arms), out, share_sft)
    suite = HeldOutSuite(difficulty, problems, depth3)
    command = invoked_command()
    summary = run_compose(plan, suite, log=lambda m: print(m, flush=True), command=command)
    for name, row in summary["arms"].items():
        cells = "   ".join(f"{g} {100 * m:5.1f} ± {100 * s:4.1f}" for g, (m, s) in row["accuracy"].items())
        print(f"{name:20s} {cells}")
    print(f"report: {plan.out / 'report.md'}")
