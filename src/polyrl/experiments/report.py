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


def heldout_section(plan, summary: dict[str, Any]) -> list[str]:
    """The after-SFT table (one row per split), then one table per split with a row per arm."""
    tasks, columns = summary["tasks"], [*summary["tasks"], "mean"]
    lines = ["## After SFT (where RL starts)", "", *_table_head("split", [*tasks, "**mean**"])]
    for split, row in summary["after_sft"].items():
        lines.append(f"| {split} | " + " | ".join(_fmt(row[t]) for t in columns) + " |")
    lines.append("")
    for key in split_names(plan):
        lines += [f"## Held-out, {key} split", "", *_table_head("strategy", [*tasks, "**mean**"])]
        for name, row in summary["strategies"].items():
            lines.append(f"| {name} | " + " | ".join(_fmt(row[key][t]) for t in columns) + " |")
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
