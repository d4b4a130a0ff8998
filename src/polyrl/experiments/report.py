"""The comparison runner's report: ``report.md`` (held-out tables, forgetting, diagnostics, statistics, budget,
verdict) and the plots of learning curves, sampler weights and difficulty knobs, from the summary
``experiments/summary.py`` reads back from the run directories; ``results.json`` holds the summary."""

from __future__ import annotations

import json
from typing import Any

from polyrl.experiments.stats import binomial_se, mean_binomial_se
from polyrl.experiments.summary import (
    BUDGET,
    DIAGNOSTICS,
    LAST_STEPS,
    load_run,
    split_names,
    summarize,
)
from polyrl.run_dir import atomic_write_text


def _fmt(ms: tuple[float, float]) -> str:
    return f"{100 * ms[0]:.1f} ± {100 * ms[1]:.1f}"


def plot(plan, summary: dict[str, Any]) -> list[str]:
    """Draw the comparison's figures into ``plan.out`` (``report/comparison.py``); return their file names."""
    from polyrl.report import comparison

    tasks, shown_splits = summary["tasks"], split_names(plan)
    runs = {n: [load_run(plan.run_dir(n, s)) for s in plan.seeds] for n in summary["strategies"]}
    figures = [
        ("heldout.png", comparison.heldout(summary, shown_splits)),
        ("learning_curves.png", comparison.learning_curves(runs)),
        ("sampler_weights.png", comparison.per_task_metric(runs, tasks, "sampler_weight", "sampler weight")),
        ("difficulty.png", comparison.per_task_metric(runs, tasks, "difficulty", "difficulty knob")),
        ("differences.png", comparison.differences(summary, shown_splits)),
        ("gradient_share.png", comparison.gradient_share(summary)),
    ]
    return [comparison.save(fig, plan.out / name) for name, fig in figures if fig is not None]


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
    rows, baseline, problems = summary["strategies"], summary["baseline"], summary["problems_per_task"]
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
            "| arm | mean [95% CI] | binomial SE | SD over seeds | difference [95% CI] | MDE |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name, row in rows.items():
            ci = row["ci"][split]["mean"]
            se = mean_binomial_se([row[split][t][0] for t in tasks], problems, len(summary["seeds"]))
            d = row.get("vs_baseline", {}).get(split, {}).get("mean")
            diff = (_ci(d, signed=True), f"{100 * d['mde']:.1f}") if d else ("(baseline)", "—")
            lines.append(f"| {name} | {_ci(ci)} | {100 * se:.1f} | {100 * ci['sd']:.1f} | {diff[0]} | {diff[1]} |")
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


def _table_head(first: str, columns: list[str]) -> list[str]:
    return [f"| {first} | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]


def intro_section(plan, title: str, command: str | None, extra_lines: list[str]) -> list[str]:
    """The title, the command that wrote the report, the setup (seeds, warm start, splits), the caller's extra
    section and, with ``eval.attempts > 1``, what the multi-attempt splits mean."""
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
    return lines


def _with_se(row: dict[str, tuple[float, float]], tasks: list[str], problems: int, seeds: int) -> list[str]:
    """Each task's ``mean ± std`` cell with its binomial standard error (``problems`` per task, ``seeds``
    evaluations), then the mean over tasks with the SE of that mean."""
    se = {t: binomial_se(row[t][0], problems * seeds) for t in tasks}
    se["mean"] = mean_binomial_se([row[t][0] for t in tasks], problems, seeds)
    return [f"{_fmt(row[t])} ({100 * se[t]:.1f})" for t in [*tasks, "mean"]]


def heldout_section(plan, summary: dict[str, Any]) -> list[str]:
    """The after-SFT table (one row per split), then one table per split with a row per arm; every accuracy with
    its binomial standard error."""
    tasks = summary["tasks"]
    n, seeds = plan.base["eval"]["problems_per_task"], len(plan.seeds)
    sft_seeds = 1 if plan.share_sft else seeds
    note = (
        f"Greedy accuracy in %, mean ± std over seeds (binomial standard error of the accuracy: {n} problems per "
        "task, every seed's answers)."
    )
    lines = ["## After SFT (where RL starts)", "", note, "", *_table_head("split", [*tasks, "**mean**"])]
    for split, row in summary["after_sft"].items():
        lines.append(f"| {split} | " + " | ".join(_with_se(row, tasks, n, sft_seeds)) + " |")
    lines.append("")
    for key in split_names(plan):
        lines += [f"## Held-out, {key} split", "", *_table_head("strategy", [*tasks, "**mean**"])]
        for name, row in summary["strategies"].items():
            lines.append(f"| {name} | " + " | ".join(_with_se(row[key], tasks, n, seeds)) + " |")
        lines.append("")
    return lines


def forgetting_section(summary: dict[str, Any]) -> list[str]:
    """Each arm's drop per task from its best eval during training to the final one."""
    tasks = summary["tasks"]
    lines = [
        "## Forgetting",
        "",
        "Drop (points, easy split) from each task's best eval during training to the final one.",
        "",
        *_table_head("strategy", tasks),
    ]
    for name, row in summary["strategies"].items():
        lines.append(f"| {name} | " + " | ".join(_fmt(row["forgetting"][t]) for t in tasks) + " |")
    return lines


def diagnostics_section(summary: dict[str, Any]) -> list[str]:
    """The RL diagnostics any arm logged, averaged over the last steps; nothing when none was logged."""
    rows = summary["strategies"]
    keys = [
        k for k in (*DIAGNOSTICS, "warmup_explained_variance") if any(k in r["diagnostics"] for r in rows.values())
    ]
    if not keys:
        return []
    lines = [
        "",
        "## Training diagnostics",
        "",
        f"RL metrics averaged over each run's last {LAST_STEPS} steps (mean ± std over seeds); "
        "`accuracy`: the rollouts' verified accuracy, whatever the reward; "
        "`warmup_explained_variance`: the critic's at the end of its warm-up.",
        "",
        *_table_head("strategy", keys),
    ]
    for name, row in rows.items():
        d = row["diagnostics"]
        lines.append(
            f"| {name} | " + " | ".join(f"{d[k][0]:.3f} ± {d[k][1]:.3f}" if k in d else "—" for k in keys) + " |"
        )
    return lines


def verdict_section(
    plan, summary: dict[str, Any], baseline: str, verdict_split: str, extra_verdict: str | None
) -> list[str]:
    """The caller's verdict, or the generic one on ``verdict_split`` followed by the other of easy/hard."""
    lines = ["", "## Verdict", "", extra_verdict or verdict(summary, baseline, verdict_split)]
    if extra_verdict is None:  # the other of easy/hard, by the same rule
        for split in [s for s in ("easy", "hard") if s != verdict_split and s in split_names(plan)]:
            lines += ["", verdict(summary, baseline, split)]
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
    tasks = summary["tasks"]
    lines = [
        *intro_section(plan, title, command, extra_lines),
        *heldout_section(plan, summary),
        *forgetting_section(summary),
        *diagnostics_section(summary),
        *statistics_section(summary, tasks),
        *gradient_share_section(summary, tasks),
        *budget_section(summary),
        *verdict_section(plan, summary, baseline, verdict_split, extra_verdict),
        "",
        *[f"![{f}]({f})" for f in figures],
    ]
    atomic_write_text(plan.out / "report.md", "\n".join(lines) + "\n")
    atomic_write_text(plan.out / "results.json", json.dumps(summary, indent=2))
    return summary
