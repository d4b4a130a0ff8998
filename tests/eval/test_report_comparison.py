"""The comparison report's figures (``report/comparison.py``) come from the run report's helpers: its series reader
and its one smoothing function, and ``experiments/report.py`` writes them under the file names it always had."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from polyrl.experiments.report import write_report
from polyrl.report import comparison, plots

TASKS = ["arith", "rg/countdown"]


def _run(dir_, rng, steps: int = 40):
    (dir_ / "eval").mkdir(parents=True)
    for name in ("after_sft", "rl_step_20", "after_rl"):
        evaluation = {t: {"accuracy": float(rng.random())} for t in [*TASKS, "mean"]}
        (dir_ / "eval" / f"{name}.json").write_text(json.dumps(evaluation))
    records = [
        {
            "stage": "rl",
            "step": s,
            "accuracy": float(rng.random()),
            **{f"sampler_weight/{t}": 0.5 for t in TASKS},
            **{f"adv_abs_sum/{t}": float(rng.random()) for t in TASKS},
        }
        for s in range(1, steps + 1)
    ]
    (dir_ / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def _plan(tmp_path, seeds: list[int], arms=("uniform", "adaptive")):
    rng = np.random.default_rng(0)
    for s in seeds:
        _run(tmp_path / f"sft{s}", rng)
        for arm in arms:
            _run(tmp_path / f"{arm}{s}", rng)
    (tmp_path / "out").mkdir()
    return SimpleNamespace(
        seeds=seeds,
        strategies=[SimpleNamespace(name=a) for a in arms],
        run_dir=lambda n, s: tmp_path / f"{n}{s}",
        sft_dir=lambda s: tmp_path / f"sft{s}",
        out=tmp_path / "out",
        base={"tasks": [{"name": t} for t in TASKS], "eval": {"attempts": 1, "problems_per_task": 20}},
        hard={},
        share_sft=False,
    )


def test_the_report_keeps_its_figure_names_and_links_each_one(tmp_path):
    plan = _plan(tmp_path, seeds=[0, 1])
    write_report(plan, baseline="uniform")
    names = ["heldout.png", "learning_curves.png", "sampler_weights.png", "differences.png", "gradient_share.png"]
    report = (plan.out / "report.md").read_text()
    assert report.splitlines()[-len(names) :] == [f"![{n}]({n})" for n in names]
    assert all((plan.out / n).stat().st_size > 0 for n in names)
    assert not (plan.out / "difficulty.png").exists()  # no arm logged a difficulty knob


def test_one_seed_draws_no_differences_to_the_baseline(tmp_path):
    plan = _plan(tmp_path, seeds=[0])
    write_report(plan, baseline="uniform")
    assert not (plan.out / "differences.png").exists()
    assert (plan.out / "heldout.png").exists()


def test_training_accuracy_is_the_mean_over_seeds_smoothed_by_the_run_reports_ema(tmp_path):
    plan = _plan(tmp_path, seeds=[0, 1], arms=("uniform",))
    from polyrl.experiments.summary import load_run

    runs = {"uniform": [load_run(plan.run_dir("uniform", s)) for s in plan.seeds]}
    fig = comparison.learning_curves(runs)
    raw, smoothed = fig.axes[0].get_lines()[:2]
    mean = np.mean([[r["accuracy"] for r in run["rl"]] for run in runs["uniform"]], 0)
    assert list(raw.get_ydata()) == pytest.approx(list(mean))
    assert list(smoothed.get_ydata()) == pytest.approx(plots.smooth(list(mean), plots.ema_alpha(len(mean))))
    assert list(smoothed.get_xdata()) == list(range(1, 41))


def test_every_held_out_accuracy_carries_its_binomial_standard_error(tmp_path):
    plan = _plan(tmp_path, seeds=[0, 1], arms=("uniform",))
    summary = write_report(plan, baseline="uniform")
    report = (plan.out / "report.md").read_text()
    table = report.split("## Held-out, easy split")[1].split("\n\n")[1].splitlines()
    row = next(line for line in table if line.startswith("| uniform |"))
    mean, std = summary["strategies"]["uniform"]["easy"][TASKS[0]]
    se = 100 * np.sqrt(mean * (1 - mean) / 40)  # 20 problems x 2 seeds
    assert f"| {100 * mean:.1f} ± {100 * std:.1f} ({se:.1f}) |" in row
    assert "binomial SE" in report and "20 problems per task" in report
