"""The composition experiment: does RL on depth-2 compositions teach a policy to compose primitives it learned
alone? (Yuan et al., "From f(x) and g(x) to f(g(x)): LLMs Learn New Skills in RL by Composing Old Ones", 2025.)

Every arm starts RL from the same SFT warm start of its seed (the base config's tasks: the primitives) and gets
the same RL budget; arms differ in their RL task mix (``strategies:`` in the experiment file, as for
``polyrl experiment curriculum``). Each final policy is evaluated greedily on the held-out compositions
(:func:`polyrl.tasks.builtin.compose.held_out_chains`): chains no arm ever trains on.

    out/runs/sft/seed<k>/            the shared warm start (eval/heldout_sft.json)
    out/runs/<arm>/seed<k>/          a full run directory (eval/heldout.json)
    out/report.md, out/results.json
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from polyrl.errors import UserError
from polyrl.experiments.curriculum import ExperimentPlan, plan_experiment, train_all
from polyrl.run_dir import atomic_write_text
from polyrl.tasks.base import DEFAULT_DIFFICULTY
from polyrl.tasks.builtin.compositions import PRIMITIVES, chain_name, held_out_chains, training_chains


@dataclass(frozen=True)
class HeldOutSuite:
    """Which chains the final policies are evaluated on, at which difficulty, with how many problems."""

    difficulty: float | str = DEFAULT_DIFFICULTY
    """Knob or preset of every chain (``easy``, the default: strings of 4 letters from a-f)."""
    problems: int = 32
    """Eval-split problems per chain (seeds 0..problems-1)."""
    depth3: int = 0
    """How many held-out depth-3 chains (the first in sorted order); 0: all of them."""

    def groups(self) -> dict[str, list[str]]:
        """Group name → task names: the trained primitives and depth-2 chains, and the held-out ones."""
        deep = held_out_chains(3)
        return {
            "primitives": [chain_name((op,)) for op in PRIMITIVES],
            "train_depth2": [chain_name(c) for c in training_chains(2)],
            "heldout_depth2": [chain_name(c) for c in held_out_chains(2)],
            "heldout_depth3": [chain_name(c) for c in (deep[: self.depth3] if self.depth3 else deep)],
        }


def evaluate_held_out(trainer, suite: HeldOutSuite) -> dict[str, dict[str, float]]:
    """Greedy accuracy and mean verifier score of ``trainer``'s policy on every chain of ``suite``."""
    from polyrl.tasks import get_task
    from polyrl.train.evaluation import evaluate

    names = sorted({n for group in suite.groups().values() for n in group})
    tasks = {n: (get_task(n), suite.difficulty) for n in names}
    return evaluate(trainer.config, trainer.parts.backend, trainer.parts.prompts, tasks, suite.problems, pass_k=1)


def plan_compose(
    config_path: str | Path, seeds: int, arms: list[str] | None, out: str | Path, share_sft: bool = False
) -> ExperimentPlan:
    """The experiment file's base config (the SFT tasks) and arms, checked before any training."""
    plan = plan_experiment(config_path, seeds, arms, out, share_sft=share_sft)
    if len(plan.strategies) < 2:
        raise UserError("the composition experiment needs at least two arms under strategies:")
    return plan


def run_compose(plan: ExperimentPlan, suite: HeldOutSuite, log=print, command: str | None = None) -> dict[str, Any]:
    """Train every (arm, seed) not yet finished, evaluate it on ``suite``, write report.md; returns the summary."""
    train_all(plan, lambda trainer: evaluate_held_out(trainer, suite), ("heldout_sft.json", "heldout.json"), log)
    summary = summarize_compose(plan, suite)
    atomic_write_text(plan.out / "results.json", json.dumps(summary, indent=2))
    atomic_write_text(plan.out / "report.md", format_report(summary, command))
    return summary


def group_means(evals: dict[str, dict[str, float]], groups: dict[str, list[str]], key: str) -> dict[str, float]:
    """The mean of ``key`` over the chains of each group (each chain weighs the same)."""
    return {g: float(np.mean([evals[n][key] for n in names])) for g, names in groups.items() if names}


def summarize_compose(plan: ExperimentPlan, suite: HeldOutSuite) -> dict[str, Any]:
    """Per arm (and the SFT start): per group, mean ± std over seeds of greedy accuracy and verifier score."""
    groups = suite.groups()
    runs = {"sft": list(dict.fromkeys(plan.sft_dir(s) / "eval" / "heldout_sft.json" for s in plan.seeds))}
    runs.update(
        {a.name: [plan.run_dir(a.name, s) / "eval" / "heldout.json" for s in plan.seeds] for a in plan.strategies}
    )
    rows = {}
    for arm, files in runs.items():
        evals = [json.loads(f.read_text()) for f in files]
        rows[arm] = {
            key: {
                g: (float(np.mean(v)), float(np.std(v)))
                for g, v in _per_group([group_means(e, groups, key) for e in evals]).items()
            }
            for key in ("accuracy", "score")
        }
    return {
        "seeds": plan.seeds,
        "difficulty": suite.difficulty,
        "problems": suite.problems,
        "groups": groups,
        "arms": rows,
    }


def _per_group(means: list[dict[str, float]]) -> dict[str, list[float]]:
    return {g: [m[g] for m in means] for g in means[0]}


def format_report(summary: dict[str, Any], command: str | None) -> str:
    groups = summary["groups"]
    lines = ["# Composition experiment", ""]
    if command:
        lines += ["```", command, "```", ""]
    lines += [
        f"Seeds: {len(summary['seeds'])}. Difficulty {summary['difficulty']}, {summary['problems']} eval-split "
        "problems per chain, greedy decoding. Each cell: the mean over a group's chains, then mean ± std over "
        "seeds. `sft` is the shared warm start every arm's RL starts from.",
        "",
        "Held-out chains: " + ", ".join(n.removeprefix("compose/") for n in groups["heldout_depth2"]) + " (depth 2); "
        f"{len(groups['heldout_depth3'])} of depth 3.",
        "",
    ]
    for key, title in (("accuracy", "Exact-match accuracy (%)"), ("score", "Verifier score (%, partial credit)")):
        lines += [f"## {title}", "", "| arm | " + " | ".join(groups) + " |", "|---|" + "---:|" * len(groups)]
        for arm, row in summary["arms"].items():
            cells = [f"{100 * row[key][g][0]:.1f} ± {100 * row[key][g][1]:.1f}" for g in groups]
            lines.append(f"| {arm} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)
