"""The figures of a comparison of arms over seeds (``experiments/report.py``), drawn with the run report's style,
colours, series reader and smoothing (``report/plots.py``, ``report/series.py``).

``runs`` maps each arm to its runs, one per seed, each ``{"rl": [RL records], "evals": {name: eval}}``; ``summary`` is
``experiments.report.summarize``'s. Every function returns a Figure, or None when there is nothing to draw.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from polyrl.report import plots, series


def _panels(count: int, width: float, height: float, sharey: bool = True) -> tuple[Figure, Any]:
    fig, axes = plt.subplots(1, count, figsize=(width * count, height), sharey=sharey, squeeze=False)
    return fig, axes[0]


def heldout(summary: dict[str, Any], splits: list[str]) -> Figure:
    """Grouped bars per task and split: each arm's held-out accuracy, with the 95% CI over seeds (the std with one)."""
    tasks, names = [*summary["tasks"], "mean"], list(summary["strategies"])
    x, width = np.arange(len(tasks)), 0.8 / len(names)
    with_ci = len(summary["seeds"]) >= 2
    with plt.rc_context(plots.STYLE):
        fig, axes = _panels(len(splits), 5.5, 3.8)
        for ax, split in zip(axes, splits):
            for i, n in enumerate(names):
                row = summary["strategies"][n]
                ms = [row[split][t][0] for t in tasks]
                err = [row["ci"][split][t]["high"] - row[split][t][0] if with_ci else row[split][t][1] for t in tasks]
                ax.bar(x + i * width, ms, width, yerr=err, capsize=2, label=n)
            ax.set_xticks(x + width * (len(names) - 1) / 2, tasks, rotation=30, ha="right")
            spread = "mean and 95% CI over seeds" if with_ci else "one seed"
            ax.set_title(f"held-out accuracy, {split} split ({spread})", fontsize=9)
        axes[0].set_ylabel("greedy accuracy")
        axes[0].legend(fontsize=8)
    return fig


def _mean_heldout(run: dict[str, Any]) -> list[tuple[int, float]]:
    """(step, mean-of-tasks easy-split accuracy) after SFT (step 0), at each periodic eval and after RL."""
    last = run["rl"][-1]["step"] if run["rl"] else 0
    evals = run["evals"]
    periodic = sorted((int(k.rsplit("_", 1)[1]), v["mean"]["accuracy"]) for k, v in evals.items() if "rl_step_" in k)
    return [(0, evals["after_sft"]["mean"]["accuracy"]), *periodic, (int(last), evals["after_rl"]["mean"]["accuracy"])]


def learning_curves(runs: dict[str, list[dict[str, Any]]]) -> Figure:
    """Per arm, the rollouts' accuracy (mean over seeds, smoothed like the run report's curves) and the held-out
    accuracy at every evaluation (mean over seeds and tasks)."""
    with plt.rc_context(plots.STYLE):
        fig, axes = _panels(2, 5.5, 3.8, sharey=False)
        for i, (n, arm) in enumerate(runs.items()):
            color = plots.PALETTE[i % len(plots.PALETTE)]
            curves = [series.series(r["rl"], "accuracy") for r in arm]
            steps = curves[0][0]
            if steps:  # a run whose every group was dropped (no signal) logs no rollout accuracy
                ys = np.mean([c[1] for c in curves if len(c[1]) == len(steps)], 0)
                plots._noisy(axes[0], steps, list(ys), color, 1.6, n)
            evals = [_mean_heldout(r) for r in arm]
            mean = np.mean([[p[1] for p in e] for e in evals], 0)
            axes[1].plot([p[0] for p in evals[0]], mean, marker="o", color=color, label=n)
        axes[0].set_title("training accuracy (rollouts, smoothed)")
        axes[1].set_title("held-out accuracy during RL (easy split, mean of tasks)")
        for ax in axes:
            ax.set_xlabel("RL step")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
    return fig


def per_task_metric(runs: dict[str, list[dict[str, Any]]], tasks: list[str], prefix: str, title: str) -> Figure | None:
    """One panel per arm that logged ``<prefix>/<task>``: each task's value (mean over seeds), in its task colour."""
    shown = [n for n, arm in runs.items() if any(f"{prefix}/{t}" in arm[0]["rl"][0] for t in tasks)]
    if not shown:
        return None
    colors = plots.task_colors(tasks)
    with plt.rc_context(plots.STYLE):
        fig, axes = _panels(len(shown), 4.2, 3.4)
        for ax, n in zip(axes, shown):
            for t in tasks:
                curves = [series.series(r["rl"], f"{prefix}/{t}") for r in runs[n]]
                if curves[0][0]:
                    ax.plot(curves[0][0], np.mean([c[1] for c in curves], 0), color=colors[t], label=t)
            ax.set_title(f"{n}: {title} (mean over seeds)", fontsize=9)
            ax.set_xlabel("RL step")
        axes[0].legend(fontsize=7)
    return fig


def differences(summary: dict[str, Any], splits: list[str]) -> Figure | None:
    """Each arm's difference to the baseline per task with its 95% CI, paired by seed: one panel per split, with the
    mean-of-tasks comparison's MDE as a shaded band around zero. None with one seed or no baseline."""
    tasks = [*summary["tasks"], "mean"]
    arms = [n for n, r in summary["strategies"].items() if "vs_baseline" in r]
    if not arms or len(summary["seeds"]) < 2:
        return None
    x, width = np.arange(len(tasks)), 0.8 / len(arms)
    with plt.rc_context(plots.STYLE):
        fig, axes = _panels(len(splits), max(5.0, 1.2 * len(tasks)), 3.6)
        for ax, split in zip(axes, splits):
            for i, n in enumerate(arms):
                d = [summary["strategies"][n]["vs_baseline"][split][t] for t in tasks]
                mean = np.array([100 * v["mean"] for v in d])
                err = np.array([[100 * (v["mean"] - v["low"]) for v in d], [100 * (v["high"] - v["mean"]) for v in d]])
                ax.errorbar(x + i * width, mean, yerr=err, fmt="o", capsize=3, label=n)
            mde = max(100 * summary["strategies"][n]["vs_baseline"][split]["mean"]["mde"] for n in arms)
            ax.axhspan(-mde, mde, color="grey", alpha=0.12, lw=0, label="± MDE of the mean (largest arm)")
            ax.axhline(0, color="grey", lw=0.8)
            ax.set_xticks(x + width * (len(arms) - 1) / 2, tasks, rotation=30, ha="right")
            ax.set_title(f"{split} split: difference to {summary['baseline']}, paired by seed (95% CI)", fontsize=9)
        axes[0].set_ylabel("points vs " + str(summary["baseline"]))
        axes[0].legend(fontsize=8)
    return fig


def gradient_share(summary: dict[str, Any]) -> Figure | None:
    """Each task's share of sum |advantage| × tokens over training, stacked per arm (mean over seeds)."""
    rows = {n: r["gradient_share"] for n, r in summary["strategies"].items() if "gradient_share" in r}
    if not rows:
        return None
    colors = plots.task_colors(summary["tasks"])
    with plt.rc_context(plots.STYLE):
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        bottom = np.zeros(len(rows))
        for t in summary["tasks"]:
            share = np.array([rows[n][t][0] for n in rows])
            ax.bar(list(rows), share, bottom=bottom, color=colors[t], label=t)
            bottom += share
        ax.set_ylabel("share of sum |advantage| × tokens")
        ax.set_title("gradient share per task over RL (mean over seeds)", fontsize=9)
        ax.legend(fontsize=7)
    return fig


def transfer(t: dict[str, Any]) -> Figure:
    """Leave-one-category-out (``experiments/transfer.py``'s summary ``t``): the held-out category's accuracy per
    arm, and the paired differences on it, each with its 95% CI."""

    def err(rows: list[dict[str, float]]) -> np.ndarray:
        return np.array(
            [
                [100 * (r["mean"] - r["low"]) if math.isfinite(r["low"]) else 0.0 for r in rows],
                [100 * (r["high"] - r["mean"]) if math.isfinite(r["high"]) else 0.0 for r in rows],
            ]
        )

    fig, axes = _panels(2, 5.5, 4.0, sharey=False)
    arms = list(t["heldout"])
    rows = [t["heldout"][a] for a in arms]
    axes[0].bar(arms, [100 * r["mean"] for r in rows], yerr=err(rows), capsize=3, color="tab:blue")
    axes[0].set_ylabel("greedy accuracy, %")
    axes[0].set_title(f"held-out category {t['holdout']} (mean, 95% CI)", fontsize=9)
    axes[0].tick_params(axis="x", rotation=30)
    labels = list(t["differences"])
    rows = [t["differences"][k] for k in labels]
    y = np.arange(len(labels))[::-1]
    axes[1].errorbar([100 * r["mean"] for r in rows], y, xerr=err(rows), fmt="o", capsize=3)
    axes[1].axvline(0, color="grey", lw=0.8)
    axes[1].set_yticks(y, labels, fontsize=8)
    axes[1].set_xlabel("points")
    axes[1].set_title("paired differences on the held-out category (95% CI)", fontsize=9)
    return fig


def _binned(points: list[tuple[float, float]], bins: int = 8) -> tuple[list[float], list[float]]:
    """Mean of the y values in ``bins`` equal-width bins of x (empty bins left out): a curve over pooled seeds
    whose runs log a task at different steps."""
    if not points:
        return [], []
    xs, ys = np.array([p[0] for p in points]), np.array([p[1] for p in points])
    edges = np.linspace(xs.min(), xs.max() + 1e-9, bins + 1)
    idx = np.clip(np.digitize(xs, edges) - 1, 0, bins - 1)
    keep = [b for b in range(bins) if (idx == b).any()]
    return [float(xs[idx == b].mean()) for b in keep], [float(ys[idx == b].mean()) for b in keep]


def specialists(s: dict[str, Any], curves: dict[str, dict[str, tuple[list[list[dict]], float, str]]]) -> Figure:
    """Joint vs specialists (``experiments/specialists.py``'s summary ``s``): per task, held-out accuracy of the warm
    start, the joint run and the specialists with 95% CIs; and per trained task its rollout accuracy against the
    completions spent on it, the joint run (solid) vs the task's specialist (dashed). ``curves`` maps a trained task to
    {arm: (each seed's RL records, completions on the task per step, the metric)}."""
    arms = list(s["per_seed"])
    tasks = [*s["design"]["trained"], *s["design"]["transfer"]]
    x, width = np.arange(len(tasks)), 0.8 / len(arms)
    colors = plots.task_colors(list(curves))
    with plt.rc_context(plots.STYLE):
        fig, axes = _panels(2, 6.0, 4.0, sharey=False)
        for i, arm in enumerate(arms):
            cis = [s["per_task"][arm][t] for t in tasks]
            mean = [100 * c["mean"] for c in cis]
            err = [100 * (c["high"] - c["mean"]) if c["n"] >= 2 and math.isfinite(c["high"]) else 0.0 for c in cis]
            axes[0].bar(x + i * width, mean, width, yerr=err, capsize=2, label=arm)
        trained = len(s["design"]["trained"])
        if s["design"]["transfer"]:
            axes[0].axvline(trained - 0.5 + width * (len(arms) - 1) / 2, color="grey", lw=0.8, ls=":")
        axes[0].set_xticks(x + width * (len(arms) - 1) / 2, tasks, rotation=30, ha="right")
        axes[0].set_ylim(0, 100)  # an interval over few seeds can reach past the possible range
        axes[0].set_ylabel("greedy held-out accuracy, %")
        axes[0].set_title("trained tasks | transfer tasks (mean, 95% CI over seeds)", fontsize=9)
        axes[0].legend(fontsize=8)
        for task, by_arm in curves.items():
            for style, (arm, (runs, per_step, key)) in zip(("-", "--"), by_arm.items()):
                pts = [(step * per_step, y) for rl in runs for step, y in zip(*series.series(rl, key))]
                bx, by = _binned(pts)
                axes[1].plot(bx, by, ls=style, color=colors[task], label=f"{task}: {arm}")
        axes[1].set_xlabel("completions on the task (joint: expected share)")
        axes[1].set_ylabel("rollout accuracy")
        axes[1].set_title("learning curves: joint (solid) vs specialist (dashed), seeds pooled", fontsize=9)
        axes[1].legend(fontsize=6, ncol=2)
    return fig


def save(fig: Figure, path: Path) -> str:
    """Write ``fig`` as a PNG at ``path``, close it, and return the file's name."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name
