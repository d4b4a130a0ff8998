"""Joint multi-task RL against single-task specialists at an equal RL budget (the mission's central claim:
one policy trained on many tasks beats training task by task), and optionally leave-one-category-out on the
same warm starts. Reuses the arms runner (``experiments/curriculum.py``): one SFT warm start per seed on every
task of the config (so every task's answer format is learned before RL), then per arm an RL run from it:

- ``joint``            ``rl.steps`` steps, uniform over the trained tasks (``--train``);
- ``only_<task>``      ``rl.steps / K`` steps on that task alone, one arm per trained task: the K specialists
                       together spend the joint run's budget (steps × prompts × group size);
- ``loco_others``      with a held-out category: ``rl.steps / 2`` steps on the trained tasks of every other category;
- ``loco_<category>``  ``rl.steps / 2`` steps on the held-out category's trained tasks alone (in-category reference);
- ``warm start``       no RL: the SFT run's own evaluation.

The config's tasks outside ``--train`` are trained by no arm and scored in every run: the transfer tasks. The
specialists' score on a trained task is that task's own specialist's; on a transfer task it is the mean of the
K specialists' scores (what training task by task leaves there). Every comparison is paired by seed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from polyrl.errors import UserError
from polyrl.experiments.by_problem import by_problem_section
from polyrl.experiments.curriculum import ExperimentPlan, plan_experiment, read_design_file, read_experiment_config
from polyrl.experiments.heldout_set import heldout_records, pin_heldout
from polyrl.experiments.specialists_design import (
    JOINT,
    LOCO_OTHERS,
    LOCO_PREFIX,
    SPECIALISTS,
    WARM_START,
    SpecialistsDesign,
    arm_name,
    design_specialists,
)
from polyrl.experiments.stats import binomial_se, mean_binomial_se, mean_ci, paired_difference
from polyrl.experiments.stats import ci_text as _ci
from polyrl.experiments.stats import pct as _pct
from polyrl.run_dir import atomic_write_text


def plan_specialists(
    config_path: str | Path, train: list[str], seeds: int, out: str | Path, holdout: str | None = None
) -> tuple[ExperimentPlan, SpecialistsDesign]:
    """Check the config (no strategies: or sampler: — the arms set them), build the design and the runner's plan."""
    from polyrl.tasks import get_task
    from polyrl.train.config import load_config

    raw, defined = read_experiment_config(config_path)
    if defined:
        raise UserError("a specialists config defines no strategies: (the arms come from --train); remove the section")
    if raw.get("sampler") not in (None, {}, {"name": "uniform"}):
        raise UserError("specialists sets each arm's sampler (the tasks it trains); remove sampler: from the config")
    base = load_config(None, base=raw)
    names = [t.name for t in base.tasks]
    categories = {t: get_task(t).category for t in dict.fromkeys(names)}
    design = design_specialists(names, train, base.rl.steps, categories, holdout)
    strategies = {
        arm: {"sampler": {"name": "weighted", "options": {"weights": dict.fromkeys(ts, 1.0)}}, "rl": {"steps": steps}}
        for arm, (ts, steps) in design.arms.items()
    }
    plan = plan_experiment(config_path, seeds, list(strategies), out, hard_difficulty=None, strategies=strategies)
    if plan.hard:
        raise UserError("specialists evaluates each task at its training difficulty; remove eval_difficulty")
    _check_out(plan.out, design)
    return plan, design


def design_heldout(plan: ExperimentPlan) -> list[dict[str, Any]]:
    """The held-out problems every run of ``plan`` is scored on (:mod:`polyrl.experiments.heldout_set`)."""
    from polyrl.envs.env_registry import EnvConfig
    from polyrl.tasks import resolve_task

    env = EnvConfig(**plan.base["env"])
    tasks = {s["name"]: (resolve_task(s["name"], env=env), s["difficulty"]) for s in plan.base["tasks"]}
    return heldout_records(tasks, plan.base["eval"]["problems_per_task"])


DESIGN_FILE = "specialists.json"


def _design_record(design: SpecialistsDesign) -> dict[str, Any]:
    return {"trained": design.trained, "transfer": design.transfer, "steps": design.steps, "holdout": design.holdout}


def _check_out(out: Path, design: SpecialistsDesign) -> None:
    """An output directory holds the runs of one design: finished runs of another would be skipped as if they
    were this one's (the arms' names do not say their budgets)."""
    held = read_design_file(out / DESIGN_FILE)
    if held is None:
        return
    if held != _design_record(design):
        raise UserError(
            f"{out} holds runs of another design (trained {held.get('trained')}, steps {held.get('steps')}, "
            f"held-out category {held.get('holdout')}); use another --out"
        )


def _mean(per_task: dict[str, list[float]], tasks: list[str]) -> list[float]:
    """Per seed: the mean accuracy over ``tasks`` (each task has the same number of held-out problems)."""
    return [float(np.mean([per_task[t][k] for t in tasks])) for k in range(len(per_task[tasks[0]]))]


def specialists_summary(summary: dict[str, Any], design: SpecialistsDesign) -> dict[str, Any]:
    """From the runner's summary: per task the per-seed accuracy of the warm start, the joint run and the
    specialists (composite); the means over trained and over transfer tasks with 95% CIs; the paired differences
    joint − specialists, joint − warm start and specialists − warm start (each with its CI and MDE), per task and
    on the means; and, with a held-out category, leave-one-category-out's differences on it."""
    rows = summary["strategies"]
    per_task = {WARM_START: summary["after_sft_per_seed"]["easy"], JOINT: rows[JOINT]["per_seed"]["easy"]}
    only = {t: rows[arm_name(t)]["per_seed"]["easy"] for t in design.trained}
    composite = {t: only[t][t] for t in design.trained}
    for t in design.transfer:
        composite[t] = _mean({s: only[s][t] for s in design.trained}, design.trained)
    per_task[SPECIALISTS] = composite
    groups = {"trained": design.trained, "transfer": design.transfer}
    means = {
        arm: {g: _mean(acc, ts) for g, ts in groups.items() if ts} for arm, acc in per_task.items()
    }  # arm -> group -> per-seed
    pairs = [(JOINT, SPECIALISTS), (JOINT, WARM_START), (SPECIALISTS, WARM_START)]
    differences = {
        f"{a} − {b}": {
            **{g: paired_difference(means[a][g], means[b][g]).as_dict() for g in means[a]},
            **{
                t: paired_difference(per_task[a][t], per_task[b][t]).as_dict()
                for t in [*design.trained, *design.transfer]
            },
        }
        for a, b in pairs
    }
    out: dict[str, Any] = {
        "design": _design_record(design),
        "arms": {arm: {"tasks": ts, "steps": s} for arm, (ts, s) in design.arms.items()},
        "per_seed": per_task,
        "per_task": {arm: {t: mean_ci(v).as_dict() for t, v in acc.items()} for arm, acc in per_task.items()},
        "means": {arm: {g: mean_ci(v).as_dict() for g, v in m.items()} for arm, m in means.items()},
        "means_per_seed": means,
        "differences": differences,
    }
    if design.holdout is not None:
        loco = {
            WARM_START: _mean(per_task[WARM_START], design.held),
            LOCO_OTHERS: _mean(rows[LOCO_OTHERS]["per_seed"]["easy"], design.held),
            LOCO_PREFIX + design.holdout: _mean(rows[LOCO_PREFIX + design.holdout]["per_seed"]["easy"], design.held),
        }
        alone = LOCO_PREFIX + design.holdout
        out["loco"] = {
            "holdout": design.holdout,
            "tasks": design.held,
            "heldout": {arm: mean_ci(v).as_dict() for arm, v in loco.items()},
            "differences": {
                f"{a} − {b}": paired_difference(loco[a], loco[b]).as_dict()
                for a, b in [(LOCO_OTHERS, WARM_START), (alone, WARM_START), (LOCO_OTHERS, alone)]
            },
        }
    return out


def _reading(d: dict[str, float], a: str, b: str, where: str) -> str:
    """One verdict line for the paired difference ``d`` of ``a`` over ``b``."""
    if d["n"] < 2:
        return f"- {where}: `{a}` − `{b}` = {_pct(d['mean'], True)} points (one seed: no interval)."
    if d["low"] > 0:
        word = f"`{a}` beats `{b}`"
    elif d["high"] < 0:
        word = f"`{a}` is beaten by `{b}`"
    else:
        word = f"`{a}` and `{b}` are not distinguishable at this power"
    return (
        f"- {where}: {word}: {_pct(d['mean'], True)} points (95% CI {_pct(d['low'], True)} to "
        f"{_pct(d['high'], True)}, paired over {d['n']} seeds; smallest effect detectable with 80% power: "
        f"{_pct(d['mde'])} points)."
    )


def specialists_verdict(s: dict[str, Any]) -> str:
    d = s["differences"]
    lines = [_reading(d[f"{JOINT} − {SPECIALISTS}"]["trained"], JOINT, SPECIALISTS, "in-domain (trained tasks)")]
    if "transfer" in d[f"{JOINT} − {SPECIALISTS}"]:
        lines.append(_reading(d[f"{JOINT} − {SPECIALISTS}"]["transfer"], JOINT, SPECIALISTS, "transfer tasks"))
    lines.append(_reading(d[f"{JOINT} − {WARM_START}"]["trained"], JOINT, WARM_START, "in-domain"))
    lines.append(_reading(d[f"{SPECIALISTS} − {WARM_START}"]["trained"], SPECIALISTS, WARM_START, "in-domain"))
    if "loco" in s:
        h, ld = s["loco"]["holdout"], s["loco"]["differences"]
        for label, diff in ld.items():
            a, _, b = label.partition(" − ")
            lines.append(_reading(diff, a, b, f"held-out category `{h}`"))
    return "\n".join(lines)


def specialists_section(plan: ExperimentPlan, design: SpecialistsDesign, summary: dict[str, Any]):
    """The report's joint-vs-specialists section (tables, figure) and its verdict; adds ``summary["specialists"]``."""
    s = specialists_summary(summary, design)
    summary["specialists"] = s
    groups = {"trained": design.trained, "transfer": design.transfer}
    budget = plan.base["rl"]["prompts_per_step"] * plan.base["rl"]["group_size"]
    lines = [
        "## Joint multi-task RL vs single-task specialists",
        "",
        f"Trained tasks: {', '.join(f'`{t}` ({design.categories[t]})' for t in design.trained)}. Transfer tasks "
        f"(trained by no arm): {', '.join(f'`{t}`' for t in design.transfer) or 'none'}. Every arm starts RL from "
        f"its seed's SFT warm start (SFT on all tasks); {budget} completions per RL step. Accuracy: greedy, in %; "
        f"{len(plan.seeds)} seed(s); 95% Student-t intervals.",
        "",
        "| arm | RL trains on | RL steps |",
        "|---|---|---:|",
        *(f"| {arm} | {', '.join(ts)} | {steps} |" for arm, (ts, steps) in design.arms.items()),
    ]
    n, seeds = plan.base["eval"]["problems_per_task"], len(plan.seeds)
    lines += [
        "",
        f"Held-out: {n} problems per task, the same in every run; (SE) is the binomial standard error of the "
        "accuracy beside it (the evaluation's own noise: sqrt(p(1-p)/problems), over every seed's answers).",
        "",
        "| arm | trained tasks [95% CI] (SE) | transfer tasks [95% CI] (SE) |",
        "|---|---:|---:|",
    ]
    for arm, m in s["means"].items():
        se = {g: mean_binomial_se([s["per_task"][arm][t]["mean"] for t in ts], n, seeds) for g, ts in groups.items()}
        cells = [f"{_ci(m[g])} ({_pct(se[g])})" if g in m else "—" for g in groups]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    tasks = [*design.trained, *design.transfer]
    lines += [
        "",
        "Per task, mean over seeds (binomial SE):",
        "",
        "| arm | " + " | ".join(tasks) + " |",
        "|---|" + "---:|" * len(tasks),
    ]
    for arm, acc in s["per_seed"].items():
        means = {t: float(np.mean(acc[t])) for t in tasks}
        cells = (f"{_pct(means[t])} ({_pct(binomial_se(means[t], n * seeds))})" for t in tasks)
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Paired differences (points [95% CI]; MDE: the smallest difference this design detects with 80% power):",
        "",
        "| comparison | trained tasks | MDE | transfer tasks | MDE |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, d in s["differences"].items():
        tr = d.get("transfer")
        cells = f"{_ci(tr, True)} | {_pct(tr['mde'])}" if tr else "— | —"
        lines.append(f"| {label} | {_ci(d['trained'], True)} | {_pct(d['trained']['mde'])} | {cells} |")
    lines += by_problem_section(plan, design, s)
    if "loco" in s:
        lo = s["loco"]
        lines += [
            "",
            f"### Leave-one-category-out: held-out `{lo['holdout']}` ({', '.join(lo['tasks'])})",
            "",
            "| arm | held-out accuracy [95% CI] |",
            "|---|---:|",
            *(f"| {arm} | {_ci(ci)} |" for arm, ci in lo["heldout"].items()),
            "",
            "| comparison | difference [95% CI] | MDE |",
            "|---|---:|---:|",
            *(f"| {label} | {_ci(d, True)} | {_pct(d['mde'])} |" for label, d in lo["differences"].items()),
        ]
    lines += ["", f"![specialists.png]({plot_specialists(plan, design, s)})", ""]
    return lines, specialists_verdict(s)


def plot_specialists(plan: ExperimentPlan, design: SpecialistsDesign, s: dict[str, Any]) -> str:
    """``specialists.png``: per-task held-out bars with 95% CIs per arm, and each trained task's rollout accuracy
    against the completions spent on it, joint vs its specialist."""
    from polyrl.experiments.summary import load_run
    from polyrl.report import comparison

    per_step = plan.base["rl"]["prompts_per_step"] * plan.base["rl"]["group_size"]
    joint = [load_run(plan.run_dir(JOINT, k))["rl"] for k in plan.seeds]  # read once, drawn per task
    curves = {}
    for t in design.trained:
        own = [load_run(plan.run_dir(arm_name(t), k))["rl"] for k in plan.seeds]
        curves[t] = {
            JOINT: (joint, per_step / len(design.trained), f"accuracy/{t}"),
            arm_name(t): (own, per_step, "accuracy"),
        }
    fig = comparison.specialists(s, curves)
    return comparison.save(fig, plan.out / "specialists.png")


def record_design(out: Path, design: SpecialistsDesign) -> None:
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / DESIGN_FILE, json.dumps(_design_record(design)))


def run_specialists(
    plan: ExperimentPlan, design: SpecialistsDesign, log=print, command: str | None = None, jobs: int = 1
) -> dict[str, Any]:
    """Train every (arm, seed) not yet finished, then write report.md (this section first, then the runner's
    per-task tables, statistics and plots) and results.json."""
    from polyrl.experiments.curriculum import run_experiment

    record_design(plan.out, design)
    pin_heldout(plan.out, design_heldout(plan))
    return run_experiment(
        plan,
        log=log,
        command=command,
        title="Joint multi-task RL vs single-task specialists",
        baseline=JOINT,
        verdict_split="easy",
        jobs=jobs,
        extra=lambda summary: specialists_section(plan, design, summary),
    )
