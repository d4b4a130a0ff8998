"""The curriculum comparison end to end at CI size, its input checks, and the mixture search's pieces."""

import json

import numpy as np
import pytest
from experiment_configs import ci_config, config_file

from polyrl.cli import run as cli
from polyrl.curriculum.mixture_regression import choose_mixture, fit_ridge
from polyrl.errors import UserError
from polyrl.experiments.curriculum import parse_strategies
from polyrl.experiments.mixture_search import search_mixture
from polyrl.experiments.summary import forgetting

TINY = ci_config(
    [
        {"name": "sort_digits", "difficulty": 0.0, "eval_difficulty": 0.2},
        {"name": "boolean_evaluation", "difficulty": 0.0},
    ],
    sft_steps=20,
    rl={"steps": 5, "max_new_tokens": 16},
    eval={"problems_per_task": 8, "every": 2},
    difficulty_control={"window": 8},
)


@pytest.fixture
def tiny_config(tmp_path):
    return config_file(tmp_path / "exp.yaml", TINY)


def _compare(config, samplers: str, out) -> int:
    """``polyrl experiment curriculum`` of one seed over ``samplers``; its exit code."""
    argv = ["experiment", "curriculum", "--config", str(config), "--seeds", "1", "--samplers", samplers]
    return cli([*argv, "--out", str(out)])


def test_ci_sized_comparison_writes_report_plots_and_runs(tiny_config, tmp_path):
    out = tmp_path / "out"
    assert _compare(tiny_config, "uniform,success_band+difficulty", out) == 0
    report = (out / "report.md").read_text()
    for heading in ("Held-out, easy split", "Held-out, hard split", "Forgetting", "Verdict"):
        assert heading in report
    for png in ("heldout.png", "learning_curves.png", "sampler_weights.png", "difficulty.png"):
        assert (out / png).stat().st_size > 0
    results = json.loads((out / "results.json").read_text())
    assert set(results["strategies"]) == {"uniform", "success_band+difficulty"}
    assert results["hard"] == {"sort_digits": 0.2, "boolean_evaluation": 0.5}  # --hard-difficulty default
    records = [
        json.loads(line) for line in (out / "runs" / "success_band+difficulty" / "seed0" / "metrics.jsonl").open()
    ]
    rl = [r for r in records if r["stage"] == "rl"]
    assert "difficulty/sort_digits" in rl[-1] and "sampler_weight/boolean_evaluation" in rl[-1]
    # both strategies start RL from the same warm start
    sft = [
        json.loads((out / "runs" / s / "seed0" / "eval" / "after_sft.json").read_text())
        for s in ("uniform", "success_band+difficulty")
    ]
    assert sft[0] == sft[1]


def test_unknown_sampler_exits_2_before_any_training(tiny_config, tmp_path, capsys):
    out = tmp_path / "out"
    assert _compare(tiny_config, "uniform,nope", out) == 2
    assert "unknown sampler or strategy 'nope'" in capsys.readouterr().err
    assert not out.exists()


def test_strategies_by_sampler_name_suffix_and_definition():
    defined = {"mine": {"sampler": {"name": "weighted", "options": {"weights": {"a": 1}}}}}
    got = {s.name: s.overrides for s in parse_strategies(["uniform", "learning_progress+difficulty", "mine"], defined)}
    assert got["uniform"] == {"sampler": {"name": "uniform"}}
    assert got["learning_progress+difficulty"] == {
        "sampler": {"name": "learning_progress"},
        "difficulty_control": {"enabled": True},
    }
    assert got["mine"] == defined["mine"]
    with pytest.raises(UserError, match="twice"):
        parse_strategies(["uniform", "uniform"], {})


def test_forgetting_is_the_drop_from_the_best_eval_during_training():
    ev = lambda a, b: {"a": {"accuracy": a}, "b": {"accuracy": b}}
    evals = {"after_sft": ev(0.5, 0.1), "rl_step_000010": ev(0.8, 0.2), "after_rl": ev(0.6, 0.4)}
    assert forgetting(evals, ["a", "b"]) == pytest.approx({"a": 0.2, "b": 0.0})


def test_ridge_recovers_a_linear_score_and_the_choice_leans_to_the_best_task():
    rng = np.random.default_rng(0)
    x = rng.dirichlet(np.ones(3), size=12)
    coef, intercept = fit_ridge(x, x @ np.array([0.1, 0.5, 0.2]) + 0.3, alpha=1e-9)
    # on the simplex only differences of coefficients are identified: compare predictions
    assert x @ coef + intercept == pytest.approx(x @ np.array([0.1, 0.5, 0.2]) + 0.3, abs=1e-6)
    best, _ = choose_mixture(coef, intercept, rng)
    assert best.argmax() == 1 and best.sum() == pytest.approx(1.0)


def test_mixture_search_writes_a_weighted_sampler(tiny_config, tmp_path):
    result = search_mixture(tiny_config, candidates=2, proxy_steps=1, out=tmp_path / "mix", log=lambda m: None)
    assert result["sampler"]["name"] == "weighted"
    assert sum(result["weights"].values()) == pytest.approx(1.0, abs=1e-3)
    assert len(result["proxy_runs"]) == 2 and (tmp_path / "mix" / "mixture.yaml").exists()
    with pytest.raises(UserError, match="at least 2"):
        search_mixture(tiny_config, candidates=1, out=tmp_path / "mix2")


def test_gradient_surgery_comparison_runs_each_arm_from_its_seeds_warm_start(tiny_config, tmp_path):
    config = tmp_path / "surgery.yaml"
    config.write_text(
        tiny_config.read_text() + "strategies:\n  summed: {rl: {gradient_surgery: none}}\n"
        "  pcgrad: {rl: {gradient_surgery: pcgrad}}\n"
    )
    out = tmp_path / "surgery"
    assert cli(["experiment", "surgery", "--config", str(config), "--seeds", "1", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert set(results["strategies"]) == {"summed", "pcgrad"}
    assert "Multi-task gradient surgery" in (out / "report.md").read_text()
    saved = (out / "runs" / "pcgrad" / "seed0" / "config.yaml").read_text()
    assert "gradient_surgery: pcgrad" in saved


def _mean(xs):
    return sum(xs) / len(xs)


def test_parallel_seeds_per_seed_warm_starts_and_the_hard_split_statistics(tiny_config, tmp_path, capsys):
    out = tmp_path / "par"
    argv = ["experiment", "curriculum", "--config", str(tiny_config), "--seeds", "2", "--out", str(out)]
    rc = cli([*argv, "--samplers", "uniform,weakness", "--sft-per-seed", "--jobs", "2"])
    assert rc == 0
    assert "in 2 worker processes" in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    runs = out / "runs"
    load = lambda *p: json.loads(runs.joinpath(*p).read_text())
    # one warm start per seed, each copied into both strategies' run directories of its seed
    for seed in (0, 1):
        sft = load("sft", f"seed{seed}", "eval", "after_sft.json")
        for arm in ("uniform", "weakness"):
            assert load(arm, f"seed{seed}", "eval", "after_sft.json") == sft
    # the hard split's gain over the warm start and difference to uniform, paired by seed, from the eval files
    hard = {
        a: [load(a, f"seed{s}", "eval", "hard.json")["mean"]["accuracy"] for s in (0, 1)]
        for a in results["strategies"]
    }
    hard_sft = [load("sft", f"seed{s}", "eval", "hard_sft.json")["mean"]["accuracy"] for s in (0, 1)]
    row = results["strategies"]["weakness"]
    assert row["vs_warm_start"]["hard"]["mean"]["mean"] == pytest.approx(
        _mean([a - b for a, b in zip(hard["weakness"], hard_sft)])
    )
    assert row["vs_baseline"]["hard"]["mean"]["mean"] == pytest.approx(
        _mean([a - b for a, b in zip(hard["weakness"], hard["uniform"])])
    )
    report = (out / "report.md").read_text()
    assert "**hard split, mean of tasks**" in report and "Gain over the warm start** (hard split" in report
    verdict_part = report.split("## Verdict")[1]
    assert "on the hard split" in verdict_part and "on the easy split" in verdict_part
    assert (out / "differences.png").stat().st_size > 0
    # a rerun finds every run finished and only rewrites the report
    assert cli([*argv, "--samplers", "uniform,weakness", "--jobs", "2"]) == 0
    assert "worker processes" not in capsys.readouterr().out


def test_jobs_below_one_exits_2_before_any_training(tiny_config, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["experiment", "curriculum", "--config", str(tiny_config), "--jobs", "0", "--out", str(out)]
    assert cli(argv) == 2
    assert "--jobs must be at least 1, got 0" in capsys.readouterr().err
    assert not out.exists()
