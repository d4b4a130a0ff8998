"""The report's figures, drawn with matplotlib (Agg) from a run's metrics records and held-out results.

Every function returns a Figure, or None when the run has nothing to draw for it (no RL yet, no curriculum).
"""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

TRAINING_METRICS = (
    ("reward", "reward"),
    ("accuracy", "accuracy (sampled)"),
    ("response_length", "response length (tokens)"),
    ("entropy", "entropy (nats / token)"),
    ("kl", "KL to reference"),
)
STYLE = {
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "axes.edgecolor": "#c8ccd2",
    "axes.grid": True,
    "grid.color": "#eceef1",
    "grid.linewidth": 0.8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "font.family": "DejaVu Sans",
    "axes.prop_cycle": matplotlib.cycler(
        color=[
            "#4c72b0",
            "#dd8452",
            "#55a868",
            "#c44e52",
            "#8172b3",
            "#937860",
            "#da8bc3",
            "#8c8c8c",
            "#ccb974",
            "#64b5cd",
        ]
    ),
}


def smooth(values: list[float], alpha: float) -> list[float]:
    """Exponential moving average (bias-corrected like TensorBoard's, so the first points are not pulled to 0)."""
    out, avg = [], 0.0
    for i, v in enumerate(values, 1):
        avg = alpha * avg + (1 - alpha) * v
        out.append(avg / (1 - alpha**i))
    return out


def _series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    pts = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
    return [p[0] for p in pts], [float(p[1]) for p in pts]


def _figure(rows: int, cols: int, width: float = 12.0, height: float = 3.1) -> tuple[Figure, Any]:
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(rows, cols, figsize=(width, height * rows), squeeze=False)
    return fig, axes


def _integer_steps(axes) -> None:
    for ax in axes.flat:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _legend_below(fig: Figure, axes, ncol: int) -> None:
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(ncol, 8), frameon=False, fontsize=9)


def training_curves(rl: list[dict[str, Any]], tasks: list[str]) -> Figure | None:
    """One panel per training metric; a smoothed line per task, the all-task mean in black."""
    metrics = [(k, label) for k, label in TRAINING_METRICS if any(k in r for r in rl)]
    if not rl or not metrics:
        return None
    cols = 3
    rows = (len(metrics) + cols - 1) // cols
    with plt.rc_context(STYLE):
        fig, axes = _figure(rows, cols, height=3.2)
        alpha = 0.6 if len(rl) > 20 else 0.0
        for ax, (key, label) in zip(axes.flat, metrics):
            for task in tasks:
                steps, ys = _series(rl, f"{key}/{task}")
                if steps:
                    (line,) = ax.plot(steps, smooth(ys, alpha), lw=1.6, label=task)
                    ax.plot(steps, ys, lw=0.8, alpha=0.25, color=line.get_color())
            steps, ys = _series(rl, key)
            if steps:
                ax.plot(steps, smooth(ys, alpha), lw=2.2, color="#222", label="all tasks")
            ax.set_title(label)
            ax.set_xlabel("RL step")
        for ax in list(axes.flat)[len(metrics) :]:
            ax.set_visible(False)
        _integer_steps(axes)
        _legend_below(fig, axes, len(tasks) + 1)
        fig.tight_layout(rect=(0, 0.07 if rows == 1 else 0.04, 1, 1))
    return fig


def sft_loss(sft: list[dict[str, Any]]) -> Figure | None:
    steps, ys = _series([r for r in sft if "rft_round" not in r], "loss")
    if not steps:
        return None
    with plt.rc_context(STYLE):
        fig, axes = _figure(1, 1, width=6, height=3)
        ax = axes[0, 0]
        ax.plot(steps, ys, lw=0.8, alpha=0.3, color="#4c72b0")
        ax.plot(steps, smooth(ys, 0.8), lw=1.8, color="#4c72b0")
        ax.set_title("SFT loss (cross-entropy)")
        ax.set_xlabel("SFT step")
        fig.tight_layout()
    return fig


def curriculum(rl: list[dict[str, Any]], tasks: list[str]) -> Figure | None:
    """Sampler weights (stacked) and difficulty knobs over RL steps, for whichever of the two was logged."""
    weights = [(t, *_series(rl, f"sampler_weight/{t}")) for t in tasks]
    weights = [w for w in weights if w[1]]
    knobs = [(t, *_series(rl, f"difficulty/{t}")) for t in tasks]
    knobs = [k for k in knobs if k[1]]
    panels = [p for p in (("weights", weights), ("difficulty", knobs)) if p[1]]
    if not panels:
        return None
    with plt.rc_context(STYLE):
        fig, axes = _figure(1, len(panels), width=6 * len(panels), height=3.4)
        for ax, (kind, series) in zip(axes.flat, panels):
            if kind == "weights":
                steps = series[0][1]
                ax.stackplot(steps, *[s[2] for s in series], labels=[s[0] for s in series], alpha=0.85)
                ax.set_ylim(0, 1)
                ax.set_title("task sampler weights")
            else:
                for task, steps, ys in series:
                    ax.plot(steps, ys, lw=1.8, label=task, drawstyle="steps-post")
                ax.set_ylim(-0.03, 1.03)
                ax.set_title("difficulty knob (0 easy … 1 hard)")
            ax.set_xlabel("RL step")
        _integer_steps(axes)
        _legend_below(fig, axes, len(tasks))
        fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def heldout_bars(evals: dict[str, dict[str, dict[str, float]]], metric: str = "accuracy") -> Figure | None:
    """Grouped bars per task: held-out ``metric`` after SFT and after RL (whichever exist)."""
    stages = [(name, label) for name, label in (("after_sft", "after SFT"), ("after_rl", "after RL")) if name in evals]
    if not stages:
        return None
    tasks = list(evals[stages[0][0]])
    width = 0.8 / len(stages)
    colors = {"after_sft": "#a9b4c2", "after_rl": "#4c72b0"}
    with plt.rc_context(STYLE):
        fig, axes = _figure(1, 1, width=max(6.0, 1.1 * len(tasks) + 2), height=3.6)
        ax = axes[0, 0]
        for i, (name, label) in enumerate(stages):
            xs = [j + (i - (len(stages) - 1) / 2) * width for j in range(len(tasks))]
            ys = [100 * evals[name].get(t, {}).get(metric, 0.0) for t in tasks]
            bars = ax.bar(xs, ys, width * 0.92, label=label, color=colors[name])
            ax.bar_label(bars, fmt="%.0f", fontsize=7, padding=2, color="#444")
        ax.set_xticks(range(len(tasks)), tasks, rotation=20, ha="right")
        ax.set_ylim(0, 108)
        ax.set_ylabel(f"held-out {metric} (%)")
        ax.set_title(f"held-out {metric} per task (greedy, eval split)")
        ax.grid(axis="x", visible=False)
        ax.legend(loc="upper left", ncol=len(stages))
        fig.tight_layout()
    return fig


def heldout_over_time(evals: dict[str, dict[str, dict[str, float]]], final_step: int) -> Figure | None:
    """Held-out accuracy per task at every evaluation: after SFT (step 0), periodic RL evals, after RL."""
    points = [(0, evals["after_sft"])] if "after_sft" in evals else []
    points += sorted((int(n.rsplit("_", 1)[1]), e) for n, e in evals.items() if n.startswith("rl_step_"))
    if "after_rl" in evals:
        points.append((final_step, evals["after_rl"]))
    if len(points) < 3:  # two points are already the bar chart
        return None
    tasks = [t for t in points[0][1] if t != "mean"]
    steps = [p[0] for p in points]
    with plt.rc_context(STYLE):
        fig, axes = _figure(1, 1, width=8, height=3.4)
        ax = axes[0, 0]
        for task in tasks:
            ax.plot(
                steps,
                [100 * p[1].get(task, {}).get("accuracy", float("nan")) for p in points],
                marker="o",
                ms=3,
                lw=1.5,
                label=task,
            )
        if all("mean" in p[1] for p in points):
            ax.plot(
                steps,
                [100 * p[1]["mean"]["accuracy"] for p in points],
                marker="o",
                ms=4,
                lw=2.4,
                color="#222",
                label="mean",
            )
        ax.set_title("held-out accuracy during RL (greedy)")
        ax.set_xlabel("RL step")
        ax.set_ylabel("%")
        ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
        fig.tight_layout()
    return fig
