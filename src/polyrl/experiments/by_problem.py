"""Joint vs specialists paired by problem as well as by seed, and the number of seeds a design needs.

Every run of a specialists design is scored on the same pinned problems (``experiments/heldout_set.py``) and keeps
each greedy answer (``eval/<name>.problems.jsonl``), so two arms of one seed can be compared problem by problem:
the difference matrix ``d[seed][problem]`` gives each seed's evaluation noise (paired by problem) and, with
seeds and problems both treated as samples, the crossed interval of :func:`~polyrl.experiments.stats.crossed_difference`.
The seed-level analysis (``experiments/specialists.py``) stays the verdict's; this one says how much of its
spread is evaluation noise and how many seeds an MDE needs (:func:`size_seeds`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

from polyrl.experiments.heldout_set import read_problem_records
from polyrl.experiments.specialists_design import (
    JOINT,
    LOCO_OTHERS,
    LOCO_PREFIX,
    SPECIALISTS,
    WARM_START,
    arm_name,
)
from polyrl.experiments.stats import ci_text as _ci
from polyrl.experiments.stats import crossed_difference, sample_sd, seed_mde, seeds_for_mde
from polyrl.experiments.stats import pct as _pct

SIZING_TARGET = 0.05
"""The MDE (5 points) the report sizes a design for (``--target-mde`` asks for another)."""

Answers = dict[tuple[str, int], float]
"""One run's greedy answers: (task, eval-split seed) -> 1.0 correct / 0.0 wrong."""


def run_answers(run, name: str) -> Answers | None:
    """``eval/<name>.problems.jsonl`` of ``run`` as :data:`Answers`; None when the run kept none."""
    records = read_problem_records(run / "eval" / f"{name}.problems.jsonl")
    return {(r["task"], int(r["seed"])): float(r["correct"]) for r in records} or None


def arm_answers(plan, design, seed: int) -> dict[str, Answers] | None:
    """Each arm's answers in ``seed`` — the warm start, the joint run, the composite specialists (a trained task
    by its own specialist, a transfer task by the mean of the specialists) and the leave-one-out arms — or None
    when a run of the seed kept no per-problem answers (it ran before they were recorded)."""
    runs = {WARM_START: (plan.sft_dir(seed), "after_sft")}
    runs.update({arm: (plan.run_dir(arm, seed), "after_rl") for arm in design.arms})
    answers = {arm: run_answers(run, name) for arm, (run, name) in runs.items()}
    if any(a is None for a in answers.values()):
        return None
    only = {t: answers[arm_name(t)] for t in design.trained}
    composite = {}
    for key in answers[JOINT]:
        task = key[0]
        composite[key] = only[task][key] if task in only else sum(o[key] for o in only.values()) / len(only)
    out = {WARM_START: answers[WARM_START], JOINT: answers[JOINT], SPECIALISTS: composite}
    if design.holdout is not None:
        out[LOCO_OTHERS] = answers[LOCO_OTHERS]
        out[LOCO_PREFIX + design.holdout] = answers[LOCO_PREFIX + design.holdout]
    return out


def _matrix(per_seed: list[dict[str, Answers]], a: str, b: str, tasks: list[str]) -> list[list[float]]:
    keys = sorted(k for k in per_seed[0][a] if k[0] in tasks)
    return [[answers[a][k] - answers[b][k] for k in keys] for answers in per_seed]


def by_problem(plan, design) -> dict[str, Any] | None:
    """The comparisons of the specialists report, paired by seed and problem: for each ``a − b`` and each group
    (trained, transfer, each task; the held-out category's tasks for leave-one-out) the
    :class:`~polyrl.experiments.stats.CrossedDifference` as a dict. None when a run kept no per-problem answers."""
    per_seed = [arm_answers(plan, design, s) for s in plan.seeds]
    if any(a is None for a in per_seed):
        return None
    groups = {"trained": design.trained, "transfer": design.transfer}
    groups.update({t: [t] for t in [*design.trained, *design.transfer]})
    out: dict[str, Any] = {}
    for a, b in [(JOINT, SPECIALISTS), (JOINT, WARM_START), (SPECIALISTS, WARM_START)]:
        out[f"{a} − {b}"] = {
            g: asdict(crossed_difference(_matrix(per_seed, a, b, ts))) for g, ts in groups.items() if ts
        }
    if design.holdout is not None:
        alone = LOCO_PREFIX + design.holdout
        for a, b in [(LOCO_OTHERS, WARM_START), (alone, WARM_START), (LOCO_OTHERS, alone)]:
            out[f"{a} − {b}"] = {"heldout": asdict(crossed_difference(_matrix(per_seed, a, b, design.held)))}
    return out


def by_problem_section(plan, design, s: dict[str, Any]) -> list[str]:
    """The report's comparisons paired by seed and by problem (below), added to ``s`` as
    ``by_problem``; nothing when a run kept no per-problem answers."""
    bp = by_problem(plan, design)
    if bp is None:
        return []
    s["by_problem"] = bp
    lines = [
        "",
        "Paired by seed and by problem: `d[seed][problem]` over the pinned problems, seeds and problems both "
        "treated as samples (two-way random effects, Satterthwaite degrees of freedom); per seed, that seed's "
        "difference ± its evaluation noise (paired by problem, SE). Points.",
        "",
        "| comparison | tasks | difference [95% CI] | SE | df | MDE | per seed (± SE) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for label, by_group in bp.items():
        for group in ("trained", "transfer", "heldout"):
            d = by_group.get(group)
            if d is None:
                continue
            per = ", ".join(f"{_pct(m, True)} ± {_pct(e)}" for m, e in zip(d["per_seed"], d["per_seed_se"]))
            lines.append(
                f"| {label} | {group} | {_ci({**d, 'n': 2}, True)} | {_pct(d['se'])} | {d['df']:.0f} | "
                f"{_pct(d['mde'])} | {per} |"
            )
    sizing = size_seeds(plan, design, SIZING_TARGET)
    if sizing is not None:
        lines += ["", f"Seeds for this design: {sizing.line(seconds_per_seed(plan, design))}."]
    return lines


@dataclass
class Sizing:
    """How many seeds a design needs for a target MDE on ``joint − specialists`` (trained tasks, paired by seed),
    from the seeds finished so far."""

    seeds_run: int
    sd: float
    """The SD of the per-seed differences used for sizing: the larger of the observed SD and the evaluation noise
    alone (``sqrt(σ²_res / P)``, which no number of seeds removes from a seed's difference)."""
    sd_observed: float
    eval_noise: float
    target: float
    seeds_needed: int | None
    mde_now: float

    def line(self, seconds_per_seed: float | None = None) -> str:
        p = lambda x: f"{100 * x:.1f}"
        need = (
            f"{self.seeds_needed} seeds ({max(self.seeds_needed - self.seeds_run, 0)} more"
            + (
                f", ≈ {seconds_per_seed * max(self.seeds_needed - self.seeds_run, 0) / 3600:.1f} h at the recorded "
                f"{seconds_per_seed / 60:.0f} min per seed"
                if seconds_per_seed
                else ""
            )
            + ")"
            if self.seeds_needed is not None
            else "more than 200 seeds"
        )
        return (
            f"sizing from {self.seeds_run} finished seed(s): per-seed SD of joint − specialists (trained) "
            f"{p(self.sd_observed)} points, evaluation noise alone {p(self.eval_noise)}; sized on {p(self.sd)}: "
            f"MDE now {p(self.mde_now)}; MDE ≤ {p(self.target)} needs {need}"
        )


def size_seeds(plan, design, target: float) -> Sizing | None:
    """:class:`Sizing` from the seeds of ``plan`` whose every run finished (None below 2 such seeds or without
    per-problem answers)."""
    from polyrl.experiments.curriculum import run_finished

    done = [s for s in plan.seeds if all(run_finished(plan, plan.run_dir(a, s)) for a in design.arms)]
    if len(done) < 2:
        return None
    per_seed = [arm_answers(plan, design, s) for s in done]
    if any(a is None for a in per_seed):
        return None
    c = crossed_difference(_matrix(per_seed, JOINT, SPECIALISTS, design.trained))
    observed = sample_sd(c.per_seed)
    noise = math.sqrt(c.var_residual / c.problems)
    sd = max(observed, noise)
    return Sizing(len(done), sd, observed, noise, target, seeds_for_mde(sd, target), seed_mde(observed, len(done)))


def seconds_per_seed(plan, design) -> float | None:
    """The recorded wall time of one whole seed (its SFT run and every arm), averaged over finished seeds."""
    from polyrl.experiments.curriculum import WALL_TIME_FILE

    totals = []
    for s in plan.seeds:
        runs = [plan.sft_dir(s), *(plan.run_dir(a, s) for a in design.arms)]
        files = [r / WALL_TIME_FILE for r in runs]
        if all(f.exists() for f in files):
            totals.append(sum(json.loads(f.read_text())["wall_s"] for f in files))
    return sum(totals) / len(totals) if totals else None
