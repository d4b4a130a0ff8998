"""Claim 2 (multi-attempt RL, issue #17): the claim config plans, arms are checked to be comparable, and the
arms report gives the attempt splits with paired differences, the gain over the warm start and the RL budget
(hand-made run directories, hand-computed numbers)."""

import json
import re
from pathlib import Path

import pytest

from polyrl.errors import UserError
from polyrl.experiments.curriculum import plan_experiment
from polyrl.experiments.report import write_report
from polyrl.experiments.summary import split_names

CLAIM = Path(__file__).resolve().parents[2] / "configs" / "claims" / "multi_attempt.yaml"


def test_the_claim_config_plans_two_arms_on_the_same_budget_scored_over_two_attempts(tmp_path):
    plan = plan_experiment(CLAIM, 3, None, tmp_path / "out", hard_difficulty=None)
    assert [s.name for s in plan.strategies] == ["single", "retry"]
    assert split_names(plan) == ["easy", "attempt1", "attempt2"]
    assert len({plan.sft_dir(s) for s in plan.seeds}) == 3  # one warm start per seed
    single, retry = plan.config(plan.strategies[0], 0), plan.config(plan.strategies[1], 0)
    plain = [t.name for t in single.tasks]
    assert [t.name for t in retry.tasks] == [f"env/retry:{n}" for n in plain]
    assert [t.difficulty for t in retry.tasks] == [t.difficulty for t in single.tasks]
    for field in ("steps", "prompts_per_step", "group_size", "lr", "max_new_tokens", "dynamic_sampling"):
        assert getattr(single.rl, field) == getattr(retry.rl, field), field
    assert not single.rl.dynamic_sampling  # every step trains on exactly prompts x group completions
    assert single.eval.attempts == retry.eval.attempts == retry.env.attempts == 2
    assert single.eval.problems_per_task >= 250


BASE = """
model: {path: tiny}
threads: 1
tasks: [{name: sort_digits, difficulty: 0.0}]
sft: {steps: 2}
rl: {steps: 2}
eval: {problems_per_task: 4, pass_k: 1, attempts: ATTEMPTS}
strategies:
  single: {}
  retry: {tasks: [{name: "env/retry:sort_digits", difficulty: 0.0}]}
"""


def test_an_env_retry_arm_needs_attempts_to_be_scored_on_the_plain_task(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(BASE.replace("ATTEMPTS", "1"))
    with pytest.raises(UserError, match=re.escape("with eval.attempts >= 2, env/retry:<task> is scored on <task>")):
        plan_experiment(config, 1, None, tmp_path / "out", hard_difficulty=None)
    config.write_text(BASE.replace("ATTEMPTS", "2").replace("retry: {tasks", "retry: {eval: {attempts: 3}, tasks"))
    with pytest.raises(UserError, match=re.escape("arm 'retry' sets eval.attempts=3, the base config 2")):
        plan_experiment(config, 1, None, tmp_path / "out", hard_difficulty=None)


def _eval(a1: float, a2: float) -> dict:
    row = {"accuracy": a1, "score": a1, "format_rate": 1.0, "mean_length": 5.0, "attempt1": a1, "attempt2": a2}
    return {"sort_digits": row, "mean": dict(row)}


def _run(path: Path, evals: dict, rl_records: list[dict] | None = None) -> None:
    (path / "eval").mkdir(parents=True)
    for file, (a1, a2) in evals.items():
        (path / "eval" / f"{file}.json").write_text(json.dumps(_eval(a1, a2)))
    lines = [{"stage": "rl", "step": i + 1, **r} for i, r in enumerate(rl_records or [])]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_report_pairs_attempt_splits_by_seed_and_gives_the_rl_budget(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(BASE.replace("ATTEMPTS", "2"))
    plan = plan_experiment(config, 3, None, tmp_path / "out", hard_difficulty=None)
    # per seed (attempt1, attempt2): warm start, single arm, retry arm
    sft = [(0.30, 0.32), (0.40, 0.41), (0.20, 0.20)]
    single = [(0.34, 0.35), (0.42, 0.44), (0.24, 0.25)]
    retry = [(0.33, 0.45), (0.44, 0.56), (0.23, 0.33)]
    for seed in range(3):
        _run(plan.sft_dir(seed), {"after_sft": sft[seed]})
        steps = [{"tokens": 100.0, "policy_tokens": 100.0, "step_time": 1.0, "accuracy": 0.5, "reward": 0.5}] * 2
        _run(plan.run_dir("single", seed), {"after_sft": sft[seed], "after_rl": single[seed]}, steps)
        steps = [{"tokens": 300.0, "policy_tokens": 150.0 + seed, "step_time": 2.0, "accuracy": 0.5}] * 2
        _run(plan.run_dir("retry", seed), {"after_sft": sft[seed], "after_rl": retry[seed]}, steps)
    summary = write_report(plan, "polyrl experiment arms ...", "t", baseline="single", verdict_split="attempt2")

    row = summary["strategies"]["retry"]
    # attempt2 differences retry - single: +0.10, +0.12, +0.08 -> mean 0.10, sd 0.02, se 0.02/sqrt(3)
    d = row["vs_baseline"]["attempt2"]["mean"]
    assert d["mean"] == pytest.approx(0.10) and d["sd"] == pytest.approx(0.02)
    assert d["low"] == pytest.approx(0.10 - 4.303 * 0.02 / 3**0.5)
    assert d["mde"] == pytest.approx((4.303 + 1.061) * 0.02 / 3**0.5)
    # attempt1 differences: -0.01, +0.02, -0.01 -> mean 0
    assert row["vs_baseline"]["attempt1"]["mean"]["mean"] == pytest.approx(0.0)
    assert row["vs_baseline"]["easy"] == row["vs_baseline"]["attempt1"]  # attempt1 is the easy accuracy
    # gain over each seed's warm start on attempt2: +0.13, +0.15, +0.13
    assert row["vs_warm_start"]["attempt2"]["mean"]["mean"] == pytest.approx(0.41 / 3)
    assert summary["after_sft"]["attempt2"]["mean"][0] == pytest.approx(0.31)
    # budget: summed over the 2 RL steps, mean over seeds
    # retry's policy tokens per run: 2 x 150, 2 x 151, 2 x 152 -> 300, 302, 304 (population std sqrt(8/3))
    assert row["budget"]["policy_tokens"] == pytest.approx((302.0, (8 / 3) ** 0.5))
    assert row["budget"]["tokens"][0] == 600.0 and row["budget"]["step_time"][0] == 4.0
    assert summary["strategies"]["single"]["budget"]["policy_tokens"][0] == 200.0

    report = (plan.out / "report.md").read_text()
    for heading in (
        "## Held-out, attempt1 split",
        "## Held-out, attempt2 split",
        "**attempt2 split, mean of tasks**",
        "**Gain over the warm start** (attempt2 split",
        "## RL budget",
        "Multi-attempt splits (`eval.attempts: 2`)",
    ):
        assert heading in report, heading
    assert "| retry | 2 | 302 ± 2 | 600 ± 0 | 4 ± 0 |" in report
    assert "`retry` beats single on the attempt2 split: +10.0 points" in report
    assert (plan.out / "differences.png").stat().st_size > 0


def test_budget_times_each_arm_by_its_own_records(tmp_path):
    from polyrl.experiments.budget import estimate_budget

    config = tmp_path / "c.yaml"
    config.write_text(BASE.replace("ATTEMPTS", "2").replace("sft: {steps: 2}", "sft: {steps: 10}"))
    plan = plan_experiment(config, 3, None, tmp_path / "out", hard_difficulty=None)
    # finished: SFT of seed 0 (10 steps in 20 s), single/0 and single/1 (2 steps in 2 s), retry/0 (2 steps in 8 s)
    for run, wall, file in (
        (plan.sft_dir(0), 20.0, "after_sft"),
        (plan.run_dir("single", 0), 2.0, "after_rl"),
        (plan.run_dir("single", 1), 2.0, "after_rl"),
        (plan.run_dir("retry", 0), 8.0, "after_rl"),
    ):
        (run / "eval").mkdir(parents=True)
        (run / "eval" / f"{file}.json").write_text("{}")
        (run / "wall_time.json").write_text(json.dumps({"wall_s": wall}))
    b = estimate_budget(plan, probe=False)
    # left: 2 SFT runs at 2 s/step; 1 single run at 1 s/step and 2 retry runs at 4 s/step: 3 s per RL step on
    # average over the runs left (pooling the records would say (1 + 1 + 4) / 3 = 2)
    assert (b.sft_runs, b.rl_runs, b.finished) == (2, 3, 3)
    assert b.s_per_rl_step == pytest.approx(3.0)
    assert b.seconds == pytest.approx(2 * 10 * 2.0 + 1 * 2 * 1.0 + 2 * 2 * 4.0)
