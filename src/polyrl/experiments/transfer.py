"""Multi-task transfer to a held-out category (Enigmata, Omni-Thinker): does RL on several task categories
help a category it never trains on more than RL on one?

Leave-one-category-out on the config's tasks, reusing the arms runner (``experiments/curriculum.py``):

- every task of every category is in each run's task list, so SFT (uniform over all tasks: the answer
  format of the held-out category is learned there too) and every evaluation cover them all;
- the arms differ only in the RL sampler: ``weighted`` with weight 0 on every task outside the arm's
  training categories (equal weight per training category, split equally among its tasks), so all arms
  have the same RL budget (prompts × group size × steps):

  ``only_<C>``     RL on one other category C (one arm per other category, or those named with ``--one``);
  ``all_others``   RL on every category but the held-out one;
  ``holdout``      RL on the held-out category itself: the in-category reference (``--no-holdout-arm`` drops it);
  ``warm start``   no RL: the SFT run's own evaluation.

One SFT warm start per seed, shared by that seed's arms, so every comparison is paired by seed. The held-out
score of a run is the mean of its greedy accuracy over the held-out category's tasks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from polyrl.errors import UserError
from polyrl.experiments.curriculum import ExperimentPlan, plan_experiment, read_design_file, read_experiment_config
from polyrl.experiments.stats import ci_text as _ci
from polyrl.experiments.stats import mean_ci, paired_difference
from polyrl.experiments.stats import pct as _pct
from polyrl.run_dir import atomic_write_text

ALL_OTHERS = "all_others"
HOLDOUT_ARM = "holdout"
ONLY_PREFIX = "only_"
WARM_START = "warm start"


@dataclass
class TransferDesign:
    """The leave-one-category-out design: which categories each arm trains on."""

    holdout: str
    categories: dict[str, list[str]]
    """Category -> its tasks in the config, in config order."""
    arms: dict[str, list[str]]
    """Arm -> the categories it trains on."""

    def train_tasks(self, arm: str) -> list[str]:
        return [t for c in self.arms[arm] for t in self.categories[c]]

    def weights(self, arm: str) -> dict[str, float]:
        """The arm's sampler weights: each training category 1 / (number of categories), split equally among
        its tasks; the other tasks get no weight (they are still evaluated)."""
        cats = self.arms[arm]
        return {t: 1.0 / (len(cats) * len(self.categories[c])) for c in cats for t in self.categories[c]}


def _names(categories: dict[str, list[str]]) -> str:
    return "; ".join(f"{c} ({', '.join(ts)})" for c, ts in categories.items())


def design_arms(
    categories: dict[str, list[str]], holdout: str, one: list[str] | None = None, holdout_arm: bool = True
) -> TransferDesign:
    """The arms for holding out ``holdout`` among the config's ``categories`` (category -> tasks): one
    ``only_<C>`` arm per other category (or per category in ``one``), ``all_others``, and, with
    ``holdout_arm``, RL on the held-out category itself. Bad input is a :class:`UserError`."""
    from polyrl.tasks.base import CATEGORIES
    from polyrl.tasks.task_registry import list_tasks

    if holdout not in categories:
        known = sorted(set(CATEGORIES) | {t.category for t in list_tasks()} | set(categories))
        if holdout not in known:
            raise UserError(f"unknown category {holdout!r}; known: {', '.join(known)}")
        raise UserError(f"no task of category {holdout!r} in the config; its categories: {_names(categories)}")
    others = [c for c in categories if c != holdout]
    if not others:
        raise UserError(
            f"every task in the config is of category {holdout!r}: holding it out leaves nothing to train on"
        )
    if len(others) < 2:
        raise UserError(
            f"the config has one category besides {holdout!r} ({others[0]}): RL on several other categories "
            "would be RL on that one; add tasks of another category"
        )
    if one is not None:
        if not one:
            raise UserError("--one names no category")
        bad = [c for c in one if c not in others]
        if bad:
            raise UserError(
                f"--one: {', '.join(map(repr, bad))} is not one of the other categories in the config "
                f"({', '.join(others)})"
            )
        if len(set(one)) != len(one):
            raise UserError("--one names a category twice")
    arms = {f"{ONLY_PREFIX}{c}": [c] for c in (one if one is not None else others)}
    arms[ALL_OTHERS] = others
    if holdout_arm:
        arms[HOLDOUT_ARM] = [holdout]
    return TransferDesign(holdout, dict(categories), arms)


def task_categories(task_specs: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Category -> the config's tasks of that category, in config order."""
    from polyrl.tasks import get_task

    out: dict[str, list[str]] = {}
    for spec in task_specs:
        out.setdefault(get_task(spec["name"]).category, []).append(spec["name"])
    return out


def plan_transfer(
    config_path: str | Path,
    holdout: str,
    seeds: int,
    out: str | Path,
    one: list[str] | None = None,
    holdout_arm: bool = True,
) -> tuple[ExperimentPlan, TransferDesign]:
    """Check the config and the held-out category, build the arms and the runner's plan (one SFT warm start
    per seed, no hard split: the held-out set is each task's training difficulty)."""
    from polyrl.train.config import load_config

    raw, defined = read_experiment_config(config_path)
    if defined:
        raise UserError(
            "a transfer config defines no strategies: (the arms come from the categories); remove the section"
        )
    sampler = raw.get("sampler")
    if sampler is not None and (
        not isinstance(sampler, dict) or sampler.get("name", "uniform") != "uniform" or sampler.get("options")
    ):
        raise UserError("transfer sets each arm's sampler (weights per category); remove sampler: from the config")
    base = load_config(None, base=raw)
    if len({t.name for t in base.tasks}) != len(base.tasks):
        raise UserError("a task is listed twice in the config")
    design = design_arms(task_categories([t.model_dump() for t in base.tasks]), holdout, one, holdout_arm)
    strategies = {
        arm: {"sampler": {"name": "weighted", "options": {"weights": design.weights(arm)}}} for arm in design.arms
    }
    plan = plan_experiment(config_path, seeds, list(strategies), out, hard_difficulty=None, strategies=strategies)
    if plan.hard:
        raise UserError(
            "transfer evaluates each task at its training difficulty; remove eval_difficulty from the tasks"
        )
    _check_out(plan.out, design)
    return plan, design


DESIGN_FILE = "transfer.json"
"""In the output directory: the held-out category and the categories' tasks the runs there were trained with."""


def _check_out(out: Path, design: TransferDesign) -> None:
    """A directory holds the runs of one held-out category and task list: finished runs of another design
    would be skipped as if they were this one's."""
    held = read_design_file(out / DESIGN_FILE)
    if held is None:
        return
    if held.get("holdout") != design.holdout or held.get("categories") != design.categories:
        raise UserError(
            f"{out} holds runs with held-out category {held.get('holdout')!r} (and its task list); "
            "use another --out for another held-out category or task list"
        )


def record_design(out: Path, design: TransferDesign) -> None:
    """Write the output directory's ``transfer.json`` (checked by the next run into it)."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / DESIGN_FILE, json.dumps({"holdout": design.holdout, "categories": design.categories}))


def _category_mean(per_task: dict[str, list[float]], tasks: list[str]) -> list[float]:
    """Per seed: the mean accuracy over ``tasks`` (each task has the same number of held-out problems)."""
    return [float(np.mean([per_task[t][k] for t in tasks])) for k in range(len(per_task[tasks[0]]))]


def transfer_summary(summary: dict[str, Any], design: TransferDesign) -> dict[str, Any]:
    """From the runner's summary (per-seed accuracy per task and arm, and of the warm starts): per arm and
    category the per-seed mean over the category's tasks; the held-out category's mean with its 95% CI per
    arm; the paired differences several − one, several − mean of the single-category arms, each arm − warm
    start and in-category − several, each with its CI and MDE; and each arm's gain on its own training tasks."""
    rows = summary["strategies"]
    per_task = {WARM_START: summary["after_sft_per_seed"]["easy"]}
    per_task.update({arm: rows[arm]["per_seed"]["easy"] for arm in design.arms})
    per_seed = {
        arm: {c: _category_mean(acc, tasks) for c, tasks in design.categories.items()} for arm, acc in per_task.items()
    }
    held = {arm: v[design.holdout] for arm, v in per_seed.items()}
    ones = [a for a in design.arms if a.startswith(ONLY_PREFIX)]
    diffs: list[tuple[str, list[float], list[float]]] = [
        (f"{ALL_OTHERS} − {a}", held[ALL_OTHERS], held[a]) for a in ones
    ]
    if len(ones) > 1:
        mean_one = [float(np.mean([held[a][k] for a in ones])) for k in range(len(held[ALL_OTHERS]))]
        diffs.append((f"{ALL_OTHERS} − mean of {ONLY_PREFIX}*", held[ALL_OTHERS], mean_one))
    diffs += [(f"{a} − {WARM_START}", held[a], held[WARM_START]) for a in design.arms]
    if HOLDOUT_ARM in design.arms:
        diffs.append((f"{HOLDOUT_ARM} − {ALL_OTHERS}", held[HOLDOUT_ARM], held[ALL_OTHERS]))
    trained = {}
    for arm, cats in design.arms.items():
        own = [float(np.mean([per_seed[arm][c][k] for c in cats])) for k in range(len(held[arm]))]
        start = [float(np.mean([per_seed[WARM_START][c][k] for c in cats])) for k in range(len(held[arm]))]
        trained[arm] = {"accuracy": mean_ci(own).as_dict(), "gain": paired_difference(own, start).as_dict()}
    return {
        "holdout": design.holdout,
        "categories": design.categories,
        "arms": design.arms,
        "per_seed": per_seed,
        "heldout": {arm: mean_ci(v).as_dict() for arm, v in held.items()},
        "differences": {label: paired_difference(a, b).as_dict() for label, a, b in diffs},
        "trained": trained,
    }


def _compare(d: dict[str, float]) -> str:
    if d["n"] < 2:
        return "(one seed: no interval)"
    return "beats" if d["low"] > 0 else ("is beaten by" if d["high"] < 0 else "is not distinguishable from")


def transfer_verdict(t: dict[str, Any]) -> str:
    """One line per comparison, read off the paired CIs: several vs each single category, several vs the
    warm start, and whether RL on the held-out category itself moved it (is there anything to transfer)."""
    h, diffs = t["holdout"], t["differences"]
    lines = []
    for label, d in diffs.items():
        arm, _, ref = label.partition(" − ")
        if arm != ALL_OTHERS and not label.startswith(f"{HOLDOUT_ARM} − {WARM_START}"):
            continue
        detail = f"{_pct(d['mean'], True)} points"
        if d["n"] >= 2:
            detail += (
                f" (95% CI {_pct(d['low'], True)} to {_pct(d['high'], True)}, paired over {d['n']} seeds; "
                f"smallest effect detectable with 80% power: {_pct(d['mde'])} points)"
            )
        lines.append(f"- on held-out `{h}`, `{arm}` {_compare(d)} `{ref}`: {detail}.")
    return "\n".join(lines)


def transfer_section(plan: ExperimentPlan, design: TransferDesign, summary: dict[str, Any]) -> tuple[list[str], str]:
    """The report's transfer section (tables and plot) and its verdict; adds ``summary["transfer"]``."""
    t = transfer_summary(summary, design)
    summary["transfer"] = t
    n = len(plan.seeds)
    h = design.holdout
    cats = [h, *(c for c in design.categories if c != h)]
    lines = [
        f"## Transfer to the held-out category `{h}`",
        "",
        f"Held out: `{h}` ({', '.join(design.categories[h])}). Every arm starts RL from its seed's SFT warm start "
        "(SFT on all tasks) with the same RL budget; only the categories RL samples differ. Accuracy: greedy, "
        f"mean over a category's tasks, in %; {n} seed(s); 95% Student-t intervals.",
        "",
        "| arm | RL trains on | held-out accuracy [95% CI] | SD over seeds |",
        "|---|---|---:|---:|",
    ]
    for arm, ci in t["heldout"].items():
        on = "— (no RL)" if arm == WARM_START else ", ".join(design.arms[arm])
        lines.append(f"| {arm} | {on} | {_ci(ci)} | {_pct(ci['sd'])} |")
    lines += [
        "",
        "Paired differences on the held-out category (per seed, same warm start), points [95% CI], and the "
        "smallest difference the setup detects with 80% power (MDE):",
        "",
        "| comparison | difference [95% CI] | MDE |",
        "|---|---:|---:|",
    ]
    for label, d in t["differences"].items():
        lines.append(f"| {label} | {_ci(d, signed=True)} | {_pct(d['mde'])} |")
    lines += [
        "",
        "Every category, mean ± SD over seeds (the held-out one first):",
        "",
        "| arm | " + " | ".join(f"**{c}** (held out)" if c == h else c for c in cats) + " |",
        "|---|" + "---:|" * len(cats),
    ]
    for arm, v in t["per_seed"].items():
        lines.append(
            f"| {arm} | " + " | ".join(f"{_pct(mean_ci(v[c]).mean)} ± {_pct(mean_ci(v[c]).sd)}" for c in cats) + " |"
        )
    lines += [
        "",
        "On its own training categories (did RL learn what it trained on?): accuracy and gain over the warm start:",
        "",
        "| arm | accuracy [95% CI] | gain [95% CI] | MDE |",
        "|---|---:|---:|---:|",
    ]
    for arm, row in t["trained"].items():
        lines.append(
            f"| {arm} | {_ci(row['accuracy'])} | {_ci(row['gain'], signed=True)} | {_pct(row['gain']['mde'])} |"
        )
    lines += ["", f"![transfer.png]({plot_transfer(plan, t)})", ""]
    return lines, transfer_verdict(t)


def plot_transfer(plan: ExperimentPlan, t: dict[str, Any]) -> str:
    """``transfer.png``: the held-out category's accuracy per arm and the paired differences, with 95% CIs."""
    from polyrl.report import comparison

    return comparison.save(comparison.transfer(t), plan.out / "transfer.png")


def run_transfer(
    plan: ExperimentPlan, design: TransferDesign, log=print, command: str | None = None
) -> dict[str, Any]:
    """Train every (arm, seed) not yet finished (finished runs are skipped), then write report.md (the
    transfer section first, then the runner's per-task tables, statistics and plots) and results.json."""
    from polyrl.experiments.curriculum import run_experiment

    record_design(plan.out, design)
    return run_experiment(
        plan,
        log=log,
        command=command,
        title=f"Multi-task transfer to the held-out category {design.holdout}",
        baseline=ALL_OTHERS,
        verdict_split="easy",
        extra=lambda summary: transfer_section(plan, design, summary),
    )
