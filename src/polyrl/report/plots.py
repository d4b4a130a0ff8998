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

from polyrl.report import series
from polyrl.report.panels import PALETTE, Panel

STYLE = {
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "axes.edgecolor": "#c8ccd2",
    "axes.grid": True,
    "axes.axisbelow": True,
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
    "axes.prop_cycle": matplotlib.cycler(color=list(PALETTE)),
}


def smooth(values: list[float], alpha: float) -> list[float]:
    """Exponential moving average (bias-corrected like TensorBoard's, so the first points are not pulled to 0)."""
    out, avg = [], 0.0
    for i, v in enumerate(values, 1):
        avg = alpha * avg + (1 - alpha) * v
        out.append(avg / (1 - alpha**i))
    return out


def ema_alpha(points: int) -> float:
    """EMA decay for a curve of ``points`` steps: span ≈ points / 15 (``alpha = 1 - 2 / (span + 1)``), so a long run
    is smoothed as much as a short one looks; none under 30 points."""
    span = max(1, points // 15)
    return 1 - 2 / (span + 1)


def task_colors(tasks: list[str]) -> dict[str, str]:
    """One colour per task, the same in every panel and figure (by position in the run's task list); tab20 for more
    than 10 tasks (beyond 20, colours repeat)."""
    palette = PALETTE if len(tasks) <= len(PALETTE) else [matplotlib.colors.to_hex(c) for c in plt.cm.tab20.colors]
    return {t: palette[i % len(palette)] for i, t in enumerate(tasks)}


def _noisy(ax, steps: list[int], ys: list[float], color: str, lw: float, label: str | None, raw: bool = True):
    """A noisy per-step curve: the smoothed line, with the raw values faint behind it."""
    if raw and len(ys) >= 30:
        ax.plot(steps, ys, lw=0.7, alpha=0.22, color=color)
        ys = smooth(ys, ema_alpha(len(ys)))
    (line,) = ax.plot(steps, ys, lw=lw, color=color, label=label, marker="o" if len(ys) == 1 else None, ms=3)
    return line


def _figure(panels: int, cols: int = 3, panel_width: float = 4.0, height: float = 3.0) -> tuple[Figure, Any]:
    """A constrained-layout grid for ``panels`` panels (unused cells hidden): room is made for outside legends."""
    cols = min(cols, panels)
    rows = (panels + cols - 1) // cols
    width = max(6.0, panel_width * cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width, height * rows), squeeze=False, layout="constrained")
    for ax in list(axes.flat)[panels:]:
        ax.set_visible(False)
    return fig, axes


def _integer_steps(axes) -> None:
    for ax in axes.flat:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def legend_below(fig: Figure, handles: list, labels: list[str]):
    """A figure legend under the panels, with as many columns (≤ 8) as fit the figure's width: never clipped."""
    if not handles:
        return None
    renderer = fig.canvas.get_renderer()
    for ncol in range(min(len(labels), 8), 0, -1):
        legend = fig.legend(handles, labels, loc="outside lower center", ncol=ncol, frameon=False, fontsize=9)
        box = legend.get_window_extent(renderer)
        if ncol == 1 or box.width <= 0.96 * fig.bbox.width:
            # the layout takes the legend's height from the panels: give it back, so many tasks do not squash them
            fig.set_figheight(fig.get_figheight() + box.height / fig.dpi)
            return legend
        legend.remove()
    return None


def per_task_curves(rl: list[dict[str, Any]], tasks: list[str], panels: list[Panel]) -> Figure | None:
    """One panel per metric: a smoothed line per task (``<key>/<task>``), the all-task value ``<key>`` in black."""
    if not rl or not panels:
        return None
    colors = task_colors(tasks)
    handles: dict[str, Any] = {}
    with plt.rc_context(STYLE):
        fig, axes = _figure(len(panels), height=3.0)
        for ax, panel in zip(axes.flat, panels):
            for task in tasks:
                steps, ys = series.series(rl, f"{panel.key}/{task}")
                if steps:
                    handles.setdefault(task, _noisy(ax, steps, ys, colors[task], 1.5, task, panel.raw))
            steps, ys = series.series(rl, panel.key)
            if steps:
                handles.setdefault("all tasks", _noisy(ax, steps, ys, "#222222", 2.2, "all tasks", panel.raw))
            ax.set_title(panel.title)
            ax.set_xlabel("RL step")
        _integer_steps(axes)
        order = [t for t in tasks if t in handles] + (["all tasks"] if "all tasks" in handles else [])
        legend_below(fig, [handles[k] for k in order], order)
    return fig


def overlay_curves(rl: list[dict[str, Any]], panels: list[Panel]) -> Figure | None:
    """One panel per diagnostic, its overall series overlaid (a legend in the panel when there are several)."""
    if not rl or not panels:
        return None
    with plt.rc_context(STYLE):
        fig, axes = _figure(len(panels), height=2.7)
        for ax, panel in zip(axes.flat, panels):
            drawn = [
                (c, *(series.counts(rl, c.key, panel.zero_fill) if panel.zero_fill else series.series(rl, c.key)))
                for c in panel.curves
            ]
            drawn = [d for d in drawn if d[1]]
            if panel.band and len(drawn) >= 2 and drawn[0][1] == drawn[-1][1]:
                ax.fill_between(drawn[0][1], drawn[0][2], drawn[-1][2], color="#4c72b0", alpha=0.08, lw=0)
            for curve, steps, ys in drawn:
                _noisy(ax, steps, ys, curve.color, 1.6, curve.label, panel.raw)
            if len(panel.curves) > 1:
                ax.legend(loc="best", fontsize=7, frameon=True, facecolor="white", framealpha=0.85, edgecolor="none")
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 5), useOffset=False)
            ax.set_title(panel.title)
            ax.set_xlabel("RL step")
        _integer_steps(axes)
    return fig


def sft_loss(sft: list[dict[str, Any]]) -> Figure | None:
    steps, ys = series.series([r for r in sft if "rft_round" not in r], "loss")
    if not steps:
        return None
    with plt.rc_context(STYLE):
        fig, axes = _figure(1, panel_width=6, height=3)
        ax = axes[0, 0]
        _noisy(ax, steps, ys, "#4c72b0", 1.8, None)
        ax.set_title("SFT loss (cross-entropy)")
        ax.set_xlabel("SFT step")
    return fig


def curriculum(rl: list[dict[str, Any]], tasks: list[str]) -> Figure | None:
    """Sampler weights (stacked) and difficulty knobs over RL steps, for whichever of the two was logged."""
    weights = [(t, *series.series(rl, f"sampler_weight/{t}")) for t in tasks]
    weights = [w for w in weights if w[1]]
    steps = weights[0][1] if weights else []
    weights = [w for w in weights if w[1] == steps]  # a stack needs every task at the same steps
    knobs = [(t, *series.series(rl, f"difficulty/{t}")) for t in tasks]
    knobs = [k for k in knobs if k[1]]
    panels = [p for p in (("weights", weights), ("difficulty", knobs)) if p[1]]
    if not panels:
        return None
    colors = task_colors(tasks)
    handles: dict[str, Any] = {}
    with plt.rc_context(STYLE):
        fig, axes = _figure(len(panels), cols=2, panel_width=6, height=3.4)
        for ax, (kind, drawn) in zip(axes.flat, panels):
            if kind == "weights":
                stacks = ax.stackplot(steps, *[w[2] for w in drawn], colors=[colors[w[0]] for w in drawn], alpha=0.85)
                for (task, *_), patch in zip(drawn, stacks):
                    handles.setdefault(task, patch)
                ax.set_ylim(0, 1)
                ax.set_title("task sampler weights")
            else:
                for task, task_steps, ys in drawn:
                    line = ax.plot(task_steps, ys, lw=1.8, color=colors[task], drawstyle="steps-post")[0]
                    handles.setdefault(task, line)
                ax.set_ylim(-0.03, 1.03)
                ax.set_title("difficulty knob (0 easy … 1 hard)")
            ax.set_xlabel("RL step")
        _integer_steps(axes)
        order = [t for t in tasks if t in handles]
        legend_below(fig, [handles[t] for t in order], order)
    return fig


def heldout_bars(
    evals: dict[str, dict[str, dict[str, float]]], metric: str = "accuracy", first: str = "after SFT"
) -> Figure | None:
    """Grouped bars per task: held-out ``metric`` of the first evaluation (``first``: after SFT, or before RL
    when SFT is off) and after RL (whichever exist)."""
    stages = [(name, label) for name, label in (("after_sft", first), ("after_rl", "after RL")) if name in evals]
    if not stages:
        return None
    tasks = list(evals[stages[0][0]])
    width = 0.8 / len(stages)
    colors = {"after_sft": "#a9b4c2", "after_rl": "#4c72b0"}
    with plt.rc_context(STYLE):
        fig, axes = _figure(1, panel_width=max(6.0, 1.1 * len(tasks) + 2), height=3.6)
        ax = axes[0, 0]
        for i, (name, label) in enumerate(stages):
            xs = [j + (i - (len(stages) - 1) / 2) * width for j in range(len(tasks))]
            ys = [100 * (series.value(evals[name].get(t, {}), metric) or 0.0) for t in tasks]
            bars = ax.bar(xs, ys, width * 0.92, label=label, color=colors[name])
            ax.bar_label(bars, fmt="%.0f", fontsize=7, padding=2, color="#444")
        ax.set_xticks(range(len(tasks)), tasks, rotation=20, ha="right")
        ax.set_ylim(0, 108)
        ax.set_ylabel(f"held-out {metric} (%)")
        ax.set_title(f"held-out {metric} per task (greedy, eval split)")
        ax.grid(axis="x", visible=False)
        ax.legend(loc="upper left", ncol=len(stages))
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
    colors = task_colors(tasks)
    steps = [p[0] for p in points]

    def accuracy(evaluation: dict[str, Any], task: str) -> float:
        x = series.value(evaluation.get(task, {}), "accuracy")
        return float("nan") if x is None else 100 * x

    with plt.rc_context(STYLE):
        fig, axes = _figure(1, panel_width=8, height=3.4)
        ax = axes[0, 0]
        for task in tasks:
            ax.plot(steps, [accuracy(p[1], task) for p in points], marker="o", ms=3, lw=1.5, color=colors[task])
        labels = list(tasks)
        if any("mean" in p[1] for p in points):
            ax.plot(steps, [accuracy(p[1], "mean") for p in points], marker="o", ms=4, lw=2.4, color="#222")
            labels.append("mean")
        ax.set_title("held-out accuracy during RL (greedy)")
        ax.set_xlabel("RL step")
        ax.set_ylabel("%")
        lines = ax.get_lines()
        ax.legend(lines, labels, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


SOURCE_COLORS = {
    "generated": "#4c72b0",
    "dataset": "#55a868",
    "synthesized": "#dd8452",
    "replay": "#c44e52",
    "proposed": "#8172b3",
}
POOL_KEYS = ("synth/pool_size", "synth/solved", "synth/retired")


def problem_sources(rl: list[dict[str, Any]]) -> Figure | None:
    """Where each step's problems came from (stacked shares of ``source/<kind>``) and, when a sampler keeps a
    record of failed problems, its size and how many left it solved or retired. None for runs whose problems
    all came from the tasks' generators."""
    kinds = sorted({k.split("/", 1)[1] for r in rl for k in r if k.startswith("source/")})
    pool = [(k, *series.series(rl, k)) for k in POOL_KEYS if series.logged(rl, k)]
    if kinds in ([], ["generated"]) and not pool:
        return None
    steps = [r["step"] for r in rl if isinstance(r.get("step"), int)]
    shares = [[float(r.get(f"source/{k}", 0.0)) for r in rl if isinstance(r.get("step"), int)] for k in kinds]
    with plt.rc_context(STYLE):
        fig, axes = _figure(2 if pool else 1, cols=2, panel_width=6, height=3.4)
        ax = axes.flat[0]
        colors = [SOURCE_COLORS.get(k, PALETTE[i % len(PALETTE)]) for i, k in enumerate(kinds)]
        ax.stackplot(steps, *shares, colors=colors, alpha=0.85, labels=kinds)
        ax.set_ylim(0, 1)
        ax.set_title("where the step's problems came from")
        ax.legend(loc="lower left", fontsize=8)
        if pool:
            ax = axes.flat[1]
            for key, pool_steps, ys in pool:
                ax.plot(pool_steps, ys, lw=1.8, label=key.split("/", 1)[1])
            ax.set_title("record of failed problems")
            ax.legend(loc="upper left", fontsize=8)
        for ax in axes.flat:
            ax.set_xlabel("RL step")
        _integer_steps(axes)
    return fig
