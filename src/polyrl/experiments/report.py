"""The curriculum comparison's report: held-out tables (mean ± std over seeds), forgetting, and plots of
learning curves, sampler weights and difficulty knobs, all read back from the run directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from polyrl.experiments.stats import mean_ci, paired_difference
from polyrl.run_dir import RunDir, atomic_write_text


def _mean_std(xs: list[float]) -> tuple[float, float]:
    return float(np.mean(xs)), float(np.std(xs))


def _fmt(ms: tuple[float, float]) -> str:
    return f"{100 * ms[0]:.1f} ± {100 * ms[1]:.1f}"


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


def _series(rl: list[dict], key: str) -> tuple[np.ndarray, np.ndarray]:
    pts = [(r["step"], r[key]) for r in rl if r.get(key) is not None]
    return (np.array([p[0] for p in pts]), np.array([p[1] for p in pts])) if pts else (np.array([]), np.array([]))


def _smooth(y: np.ndarray, k: int = 5) -> np.ndarray:
    return np.convolve(y, np.ones(k) / k, mode="valid") if len(y) >= k else y


def plot(plan, summary: dict[str, Any]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks, names = summary["tasks"], list(summary["strategies"])
    runs = {n: [load_run(plan.run_dir(n, s)) for s in plan.seeds] for n in names}
    files = []

    shown_splits = split_names(plan)
    fig, axes = plt.subplots(1, len(shown_splits), figsize=(5.5 * len(shown_splits), 3.8), sharey=True, squeeze=False)
    axes = axes[0]
    x = np.arange(len(tasks) + 1)
    width = 0.8 / len(names)
    with_ci = len(summary["seeds"]) >= 2
    for ax, split in zip(axes, shown_splits):
        for i, n in enumerate(names):
            row = summary["strategies"][n]
            ms = [row[split][t][0] for t in [*tasks, "mean"]]
            err = (
                [row["ci"][split][t]["high"] - row[split][t][0] for t in [*tasks, "mean"]]
                if with_ci
                else [row[split][t][1] for t in [*tasks, "mean"]]
            )
            ax.bar(x + i * width, ms, width, yerr=err, capsize=2, label=n)
        ax.set_xticks(x + width * (len(names) - 1) / 2, [*tasks, "mean"], rotation=30, ha="right")
        spread = "mean and 95% CI over seeds" if with_ci else "one seed"
        ax.set_title(f"held-out accuracy, {split} split ({spread})", fontsize=9)
    axes[0].set_ylabel("greedy accuracy")
    axes[0].legend(fontsize=8)
    files.append(_save(fig, plan.out / "heldout.png"))

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for n in names:
        curves = [_series(r["rl"], "accuracy") for r in runs[n]]
        steps = curves[0][0]
        if len(steps):  # a run whose every group was dropped (no signal) logs no rollout accuracy
            ys = np.array([c[1] for c in curves if len(c[1]) == len(steps)])
            axes[0].plot(steps[len(steps) - len(_smooth(ys.mean(0))) :], _smooth(ys.mean(0)), label=n)
        last = runs[n][0]["rl"][-1]["step"] if runs[n][0]["rl"] else 0
        evals = [
            [(0, r["evals"]["after_sft"]["mean"]["accuracy"])]
            + sorted(
                (int(k.rsplit("_", 1)[1]), v["mean"]["accuracy"])
                for k, v in r["evals"].items()
                if k.startswith("rl_step_")
            )
            + [(int(last), r["evals"]["after_rl"]["mean"]["accuracy"])]
            for r in runs[n]
        ]
        axes[1].plot([p[0] for p in evals[0]], np.mean([[p[1] for p in e] for e in evals], 0), marker="o", label=n)
    axes[0].set_title("training accuracy (rollouts, moving average)")
    axes[1].set_title("held-out accuracy during RL (easy split, mean of tasks)")
    for ax in axes:
        ax.set_xlabel("RL step")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    files.append(_save(fig, plan.out / "learning_curves.png"))

    for prefix, title, fname in (
        ("sampler_weight", "sampler weight", "sampler_weights.png"),
        ("difficulty", "difficulty knob", "difficulty.png"),
    ):
        shown = [n for n in names if any(f"{prefix}/{t}" in runs[n][0]["rl"][0] for t in tasks)] if names else []
        if not shown:
            continue
        fig, axes = plt.subplots(1, len(shown), figsize=(4.2 * len(shown), 3.4), sharey=True, squeeze=False)
        for ax, n in zip(axes[0], shown):
            for t in tasks:
                curves = [_series(r["rl"], f"{prefix}/{t}") for r in runs[n]]
                if len(curves[0][0]):
                    ax.plot(curves[0][0], np.mean([c[1] for c in curves], 0), label=t)
            ax.set_title(f"{n}: {title} (mean over seeds)", fontsize=9)
            ax.set_xlabel("RL step")
        axes[0][0].legend(fontsize=7)
        files.append(_save(fig, plan.out / fname))
    files += _plot_differences(plan, summary, plt)
    files += _plot_gradient_share(plan, summary, plt)
    return files


def _plot_differences(plan, summary: dict[str, Any], plt) -> list[str]:
    """Each arm's difference to the baseline per task with its 95% CI, paired by seed: one panel per split,
    with the mean-of-tasks comparison's MDE as a shaded band around zero."""
    tasks = [*summary["tasks"], "mean"]
    arms = [n for n, r in summary["strategies"].items() if "vs_baseline" in r]
    if not arms or len(summary["seeds"]) < 2:
        return []
    shown = split_names(plan)
    width_in = max(5.0, 1.2 * len(tasks))
    fig, axes = plt.subplots(1, len(shown), figsize=(width_in * len(shown), 3.6), sharey=True, squeeze=False)
    x = np.arange(len(tasks))
    width = 0.8 / len(arms)
    for ax, split in zip(axes[0], shown):
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
    axes[0][0].set_ylabel("points vs " + str(summary["baseline"]))
    axes[0][0].legend(fontsize=8)
    return [_save(fig, plan.out / "differences.png")]


def _plot_gradient_share(plan, summary: dict[str, Any], plt) -> list[str]:
    """Each task's share of sum |advantage| × tokens over training, per arm (mean over seeds)."""
    rows = {n: r["gradient_share"] for n, r in summary["strategies"].items() if "gradient_share" in r}
    if not rows:
        return []
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    bottom = np.zeros(len(rows))
    for t in summary["tasks"]:
        share = np.array([rows[n][t][0] for n in rows])
        ax.bar(list(rows), share, bottom=bottom, label=t)
        bottom += share
    ax.set_ylabel("share of sum |advantage| × tokens")
    ax.set_title("gradient share per task over RL (mean over seeds)", fontsize=9)
    ax.legend(fontsize=7)
    return [_save(fig, plan.out / "gradient_share.png")]


def _save(fig, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path.name


def verdict(summary: dict[str, Any], baseline: str = "uniform", split: str = "hard") -> str:
    """Whether each strategy beats ``baseline`` on ``split``: with 2+ seeds, when the 95% CI of the paired
    difference excludes 0 (and what the setup could detect otherwise); with one seed, by more than the spread."""
    rows = summary["strategies"]
    if baseline not in rows or len(rows) < 2:
        return f"No `{baseline}` baseline in this comparison."
    if split not in rows[baseline]:
        return f"This comparison has no {split} split."
    base_mean, base_std = rows[baseline][split]["mean"]
    lines = []
    for name, row in rows.items():
        if name == baseline:
            continue
        if len(summary["seeds"]) >= 2 and "vs_baseline" in row:
            d = row["vs_baseline"][split]["mean"]
            beats = "beats" if d["low"] > 0 else ("is beaten by" if d["high"] < 0 else "is not distinguishable from")
            lines.append(
                f"- `{name}` {beats} {baseline} on the {split} split: {100 * d['mean']:+.1f} points "
                f"(95% CI {100 * d['low']:+.1f} to {100 * d['high']:+.1f}, paired over {d['n']} seeds; "
                f"smallest effect this setup detects with 80% power: {100 * d['mde']:.1f} points)."
            )
            continue
        m, s = row[split]["mean"]
        gap, spread = m - base_mean, max(s, base_std)
        beats = "beats" if gap > spread else ("is beaten by" if -gap > spread else "does not beat")
        lines.append(
            f"- `{name}` {beats} {baseline} on the {split} split: {100 * gap:+.1f} points "
            f"(spread: largest seed std {100 * spread:.1f})."
        )
    return "\n".join(lines)


def _ci(d: dict[str, float], signed: bool = False) -> str:
    sign = "+" if signed else ""
    return f"{100 * d['mean']:{sign}.1f} [{100 * d['low']:{sign}.1f}, {100 * d['high']:{sign}.1f}]"


def statistics_section(summary: dict[str, Any], tasks: list[str]) -> list[str]:
    """Per split: each arm's mean with its 95% CI and seed SD, its paired difference to the baseline with
    CI and the minimum detectable effect; per task, the differences with their CIs."""
    rows, baseline = summary["strategies"], summary["baseline"]
    if len(summary["seeds"]) < 2:
        return ["", "## Statistics", "", "One seed: no confidence intervals (run 2+ seeds)."]
    lines = [
        "",
        "## Statistics",
        "",
        f"Points, over {len(summary['seeds'])} seeds. CI: two-sided 95% Student-t interval, mean ± t(0.975, n-1)·SD/√n. "
        f"Difference: arm − `{baseline}` per seed (same warm start), paired. MDE: the smallest difference this "
        "setup detects with 80% power at α = 0.05, (t(0.975, n-1) + t(0.80, n-1))·SE of the paired difference "
        "(≈ 2.8·SE with many seeds; 5.36·SE with 3).",
    ]
    for split in next(iter(rows.values()))["per_seed"]:
        lines += [
            "",
            f"**{split} split, mean of tasks**",
            "",
            "| arm | mean [95% CI] | SD over seeds | difference [95% CI] | MDE |",
            "|---|---:|---:|---:|---:|",
        ]
        for name, row in rows.items():
            ci = row["ci"][split]["mean"]
            d = row.get("vs_baseline", {}).get(split, {}).get("mean")
            diff = (_ci(d, signed=True), f"{100 * d['mde']:.1f}") if d else ("(baseline)", "—")
            lines.append(f"| {name} | {_ci(ci)} | {100 * ci['sd']:.1f} | {diff[0]} | {diff[1]} |")
        compared = [n for n, r in rows.items() if "vs_baseline" in r]
        if compared:
            lines += [
                "",
                f"Per task, {split} split: difference to `{baseline}` [95% CI] (MDE)",
                "",
                "| arm | " + " | ".join(tasks) + " |",
                "|---|" + "---:|" * len(tasks),
            ]
            for name in compared:
                d = rows[name]["vs_baseline"][split]
                lines.append(
                    f"| {name} | "
                    + " | ".join(f"{_ci(d[t], signed=True)} ({100 * d[t]['mde']:.1f})" for t in tasks)
                    + " |"
                )
    gains = {n: r["vs_warm_start"] for n, r in rows.items() if "vs_warm_start" in r}
    for split in next(iter(gains.values()), {}):
        lines += [
            "",
            f"**Gain over the warm start** ({split} split, arm − after SFT per seed, paired) [95% CI] (MDE)",
            "",
            "| arm | " + " | ".join([*tasks, "mean"]) + " |",
            "|---|" + "---:|" * (len(tasks) + 1),
        ]
        for name, by_split in gains.items():
            d = by_split[split]
            lines.append(
                f"| {name} | "
                + " | ".join(f"{_ci(d[t], signed=True)} ({100 * d[t]['mde']:.1f})" for t in [*tasks, "mean"])
                + " |"
            )
    return lines


def budget_section(summary: dict[str, Any]) -> list[str]:
    """What each arm spent in RL: steps, tokens generated and wall time, summed over the run."""
    rows = {n: r["budget"] for n, r in summary["strategies"].items()}
    keys = [(k, label) for k, label in BUDGET if all(k in b for b in rows.values())]
    lines = [
        "",
        "## RL budget",
        "",
        "Summed over each run's RL steps (mean ± std over seeds). Policy tokens: tokens the policy generated; "
        "response tokens add what environments inserted between turns (feedback, tool results).",
        "",
        "| arm | RL steps | " + " | ".join(label for _, label in keys) + " |",
        "|---|---:|" + "---:|" * len(keys),
    ]
    for name, b in rows.items():
        cells = [f"{b[k][0]:,.0f} ± {b[k][1]:,.0f}" for k, _ in keys]
        lines.append(f"| {name} | {b['steps'][0]:.0f} | " + " | ".join(cells) + " |")
    return lines


def gradient_share_section(summary: dict[str, Any], tasks: list[str]) -> list[str]:
    rows = {n: r["gradient_share"] for n, r in summary["strategies"].items() if "gradient_share" in r}
    if not rows:
        return []
    lines = [
        "",
        "## Gradient share per task",
        "",
        "Each task's share (%) of sum |advantage| × response tokens over all RL steps, a proxy for the share of "
        "the policy gradient it received (mean ± std over seeds).",
        "",
        "| arm | " + " | ".join(tasks) + " |",
        "|---|" + "---:|" * len(tasks),
    ]
    for name, share in rows.items():
        lines.append(f"| {name} | " + " | ".join(_fmt(share[t]) for t in tasks) + " |")
    return lines


def write_report(
    plan,
    command: str | None = None,
    title: str = "Curriculum comparison",
    baseline: str = "uniform",
    verdict_split: str = "hard",
    extra=None,
) -> dict[str, Any]:
    """Write ``report.md`` (tables, statistics, verdict, plots) and ``results.json``; returns the summary.
    ``extra(summary)``, when given, returns ``(lines, verdict)``: a section placed before the generic tables
    (it may add its own keys to the summary, which go into results.json) and, unless None, the verdict that
    replaces the generic one."""
    summary = summarize(plan, baseline)
    figures = plot(plan, summary)
    extra_lines, extra_verdict = extra(summary) if extra is not None else ([], None)
    tasks, rows = summary["tasks"], summary["strategies"]
    head = "| strategy | " + " | ".join([*tasks, "**mean**"]) + " |\n|---|" + "---:|" * (len(tasks) + 1)
    lines = [f"# {title}", ""]
    if command:
        lines += ["```", command, "```", ""]
    start = "one SFT warm start (seed 0) shared by all seeds" if plan.share_sft else "the same SFT warm start per seed"
    hard = f"hard split: {', '.join(f'{t} at {d}' for t, d in plan.hard.items())}" if plan.hard else "no hard split"
    lines += [
        f"Seeds: {len(plan.seeds)}. Every strategy starts RL from {start}. "
        f"Easy split: each task's training difficulty; {hard}. "
        "Greedy accuracy in %, mean ± std over seeds.",
        "",
        *extra_lines,
    ]
    attempts = plan.base["eval"]["attempts"]
    if attempts > 1:
        lines += [
            f"Multi-attempt splits (`eval.attempts: {attempts}`): attempt<k> is the share of the easy split's "
            "problems answered correctly within the first k greedy attempts, each wrong answer followed by "
            "env/retry's feedback; attempt1 is the easy split's accuracy. env/retry:<task> arms are scored on "
            "<task>'s problems.",
            "",
        ]
    lines += ["## After SFT (where RL starts)", "", head.replace("strategy", "split")]
    for split, row in summary["after_sft"].items():
        lines.append(f"| {split} | " + " | ".join(_fmt(row[t]) for t in [*tasks, "mean"]) + " |")
    lines.append("")
    for key in split_names(plan):
        lines += [f"## Held-out, {key} split", "", head]
        for name, row in rows.items():
            lines.append(f"| {name} | " + " | ".join(_fmt(row[key][t]) for t in [*tasks, "mean"]) + " |")
        lines.append("")
    lines += [
        "## Forgetting",
        "",
        "Drop (points, easy split) from each task's best eval during training to the final one.",
        "",
        "| strategy | " + " | ".join(tasks) + " |",
        "|---|" + "---:|" * len(tasks),
    ]
    for name, row in rows.items():
        lines.append(f"| {name} | " + " | ".join(_fmt(row["forgetting"][t]) for t in tasks) + " |")
    keys = [
        k for k in (*DIAGNOSTICS, "warmup_explained_variance") if any(k in r["diagnostics"] for r in rows.values())
    ]
    if keys:
        lines += [
            "",
            "## Training diagnostics",
            "",
            f"RL metrics averaged over each run's last {LAST_STEPS} steps (mean ± std over seeds); "
            "`accuracy`: the rollouts' verified accuracy, whatever the reward; "
            "`warmup_explained_variance`: the critic's at the end of its warm-up.",
            "",
            "| strategy | " + " | ".join(keys) + " |",
            "|---|" + "---:|" * len(keys),
        ]
        for name, row in rows.items():
            d = row["diagnostics"]
            lines.append(
                f"| {name} | " + " | ".join(f"{d[k][0]:.3f} ± {d[k][1]:.3f}" if k in d else "—" for k in keys) + " |"
            )
    lines += statistics_section(summary, tasks)
    lines += gradient_share_section(summary, tasks)
    lines += budget_section(summary)
    lines += ["", "## Verdict", "", extra_verdict or verdict(summary, baseline, verdict_split)]
    if extra_verdict is None:  # the other of easy/hard, by the same rule
        for split in [s for s in ("easy", "hard") if s != verdict_split and s in split_names(plan)]:
            lines += ["", verdict(summary, baseline, split)]
    lines.append("")
    lines += [f"![{f}]({f})" for f in figures]
    atomic_write_text(plan.out / "report.md", "\n".join(lines) + "\n")
    atomic_write_text(plan.out / "results.json", json.dumps(summary, indent=2))
    return summary
