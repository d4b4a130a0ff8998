"""The comparison runner's summary, read back from its run directories: per arm and split the per-seed held-out
accuracy, means with 95% intervals and differences paired by seed (``experiments/stats.py``), forgetting, RL
diagnostics, each task's share of the gradient and what each arm spent. ``experiments/report.py`` writes it out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from polyrl.experiments.stats import mean_ci, paired_difference
from polyrl.run_dir import RunDir


def _mean_std(xs: list[float]) -> tuple[float, float]:
    return float(np.mean(xs)), float(np.std(xs))


def load_run(run: Path) -> dict[str, Any]:
    """One finished run: its RL metrics, its periodic and final easy-split evals, and its hard-split eval."""
    evals = {p.stem: json.loads(p.read_text()) for p in sorted((run / "eval").glob("*.json"))}
    metrics = RunDir(run).read_metrics()
    rl = [r for r in metrics if r.get("stage") == "rl"]
    warmup = [r for r in metrics if r.get("stage") == "critic_warmup"]
    return {"rl": rl, "evals": evals, "critic_warmup": warmup}


DIAGNOSTICS = ("reward", "accuracy", "entropy", "value_explained_variance", "value_loss")
"""RL metrics averaged over each run's last ``LAST_STEPS`` steps in the report (those a run logs)."""
LAST_STEPS = 10


def diagnostics(runs: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Mean ± std over seeds of each diagnostic's average over the last steps; the critic's explained
    variance at the end of its warm-up when there was one."""
    out = {}
    for key in DIAGNOSTICS:
        per_run = [
            [r[key] for r in run["rl"][-LAST_STEPS:] if isinstance(r.get(key), (int, float)) and r[key] == r[key]]
            for run in runs
        ]
        if all(per_run):
            out[key] = _mean_std([float(np.mean(v)) for v in per_run])
    warm = [run["critic_warmup"][-1].get("value_explained_variance") for run in runs if run["critic_warmup"]]
    if warm and len(warm) == len(runs) and all(isinstance(w, (int, float)) for w in warm):
        out["warmup_explained_variance"] = _mean_std(warm)
    return out


def forgetting(evals: dict[str, Any], tasks: list[str]) -> dict[str, float]:
    """Each task's drop (easy split) from its best eval during training (after SFT and periodic) to the end."""
    during = [e for name, e in evals.items() if name == "after_sft" or name.startswith("rl_step_")]
    return {
        t: max([e[t]["accuracy"] for e in during] + [evals["after_rl"][t]["accuracy"]])
        - evals["after_rl"][t]["accuracy"]
        for t in tasks
    }


def splits(plan) -> list[tuple[str, str, str, str]]:
    """``(split, eval file of a finished RL run, eval file of the SFT run, metric)`` of the held-out splits
    this comparison has: *easy* (greedy accuracy at the training difficulty), *hard* when the plan has a hard
    split, and with ``eval.attempts: N > 1`` *attempt1* … *attemptN* (correct within k attempts, easy split;
    attempt1 is the easy split's accuracy)."""
    out = [("easy", "after_rl", "after_sft", "accuracy")]
    if plan.hard:
        out.append(("hard", "hard", "hard_sft", "accuracy"))
    attempts = plan.base["eval"]["attempts"]
    if attempts > 1:
        out += [(f"attempt{k}", "after_rl", "after_sft", f"attempt{k}") for k in range(1, attempts + 1)]
    return out


def split_names(plan) -> list[str]:
    return [split for split, *_ in splits(plan)]


ADV_MASS = "adv_abs_sum/"
"""Per-task RL metric: sum over the step's response tokens of |advantage| (``train/metrics.py``)."""


def gradient_share(rl: list[dict[str, Any]], tasks: list[str]) -> dict[str, float] | None:
    """Each task's share of sum |advantage| × tokens over a run's RL steps — a proxy for the share of the
    policy gradient it received; None when the run did not log it. An arm that trains on ``env/retry:<task>``
    (the multi-attempt claim) logs its mass under that name; it counts as ``<task>``'s."""
    from polyrl.envs.retry import RETRY_PREFIX

    keys = {t: (ADV_MASS + t, ADV_MASS + RETRY_PREFIX + t) for t in tasks}
    totals = {t: sum(r.get(k, 0.0) for r in rl for k in keys[t]) for t in tasks}
    if not any(k in r for r in rl for t in tasks for k in keys[t]):
        return None
    whole = sum(totals.values())
    return {t: v / whole if whole > 0 else 0.0 for t, v in totals.items()}


def summarize(plan, baseline: str | None = None) -> dict[str, Any]:
    """Per arm and split: mean ± std over seeds, the per-seed values, the 95% CI of the mean and, for
    every arm but ``baseline``, its difference to the baseline paired by seed with its CI and MDE
    (``experiments/stats.py``); forgetting, diagnostics and each task's share of the gradient."""
    tasks = [s["name"] for s in plan.base["tasks"]]
    out: dict[str, Any] = {
        "tasks": tasks,
        "seeds": plan.seeds,
        "hard": plan.hard,
        "baseline": baseline,
        "strategies": {},
        "after_sft": {},
        "problems_per_task": plan.base["eval"]["problems_per_task"],
    }
    sft_evals = [load_run(d)["evals"] for d in dict.fromkeys(plan.sft_dir(s) for s in plan.seeds)]
    out["after_sft_per_seed"] = {}
    for split, _, key, metric in splits(plan):
        if all(key in e for e in sft_evals):
            per_seed = {t: [e[key][t][metric] for e in sft_evals] for t in [*tasks, "mean"]}
            out["after_sft_per_seed"][split] = per_seed
            out["after_sft"][split] = {t: _mean_std(v) for t, v in per_seed.items()}
    for strategy in plan.strategies:
        runs = [load_run(plan.run_dir(strategy.name, s)) for s in plan.seeds]
        row: dict[str, Any] = {"per_seed": {}, "ci": {}}
        for split, key, _, metric in splits(plan):
            row["per_seed"][split] = {t: [r["evals"][key][t][metric] for r in runs] for t in [*tasks, "mean"]}
            row[split] = {t: _mean_std(v) for t, v in row["per_seed"][split].items()}
            row["ci"][split] = {t: mean_ci(v).as_dict() for t, v in row["per_seed"][split].items()}
        drops = [forgetting(r["evals"], tasks) for r in runs]
        row["forgetting"] = {t: _mean_std([d[t] for d in drops]) for t in tasks}
        row["diagnostics"] = diagnostics(runs)
        row["budget"] = rl_budget(runs)
        if len(sft_evals) == len(runs):  # one warm start per seed: RL's gain over it, paired by seed
            row["vs_warm_start"] = {
                split: {t: paired_difference(v, sft[t]).as_dict() for t, v in row["per_seed"][split].items()}
                for split, sft in out["after_sft_per_seed"].items()
            }
            if "hard" in row["per_seed"] and "hard_sft_per_seed" in out:
                row["vs_warm_start_hard"] = {
                    t: paired_difference(v, out["hard_sft_per_seed"][t]).as_dict()
                    for t, v in row["per_seed"]["hard"].items()
                }
        shares = [gradient_share(r["rl"], tasks) for r in runs]
        if all(shares):
            row["gradient_share"] = {t: _mean_std([sh[t] for sh in shares]) for t in tasks}
        out["strategies"][strategy.name] = row
    if baseline in out["strategies"]:
        base = out["strategies"][baseline]["per_seed"]
        for name, row in out["strategies"].items():
            if name != baseline:
                row["vs_baseline"] = {
                    split: {
                        t: paired_difference(v, base[split][t]).as_dict() for t, v in row["per_seed"][split].items()
                    }
                    for split in row["per_seed"]
                }
    return out


BUDGET = (
    ("policy_tokens", "policy tokens generated"),
    ("tokens", "response tokens (policy + environment)"),
    ("step_time", "RL wall time (s)"),
)
"""Per run, summed over its RL steps: what the arm spent (the report's budget table)."""


def rl_budget(runs: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Mean ± std over seeds of each :data:`BUDGET` quantity summed over the run's RL steps (those logged)."""
    out = {"steps": _mean_std([float(len(run["rl"])) for run in runs])}
    for key, _ in BUDGET:
        totals = [sum(r[key] for r in run["rl"] if isinstance(r.get(key), (int, float))) for run in runs]
        if all(any(key in r for r in run["rl"]) for run in runs):
            out[key] = _mean_std(totals)
    return out
