"""Seed statistics of comparisons (CIs, paired differences, MDE), the budget estimate and the gradient-share
proxy, with hand-computed numbers."""

import json
import math

import pytest
import torch

from polyrl.experiments.budget import Budget, format_budget
from polyrl.experiments.report import verdict
from polyrl.experiments.stats import mean_ci, paired_difference, t_quantile
from polyrl.experiments.summary import gradient_share
from polyrl.train.metrics import advantage_mass


def test_mean_ci_is_the_student_t_interval():
    ci = mean_ci([1.0, 2.0, 3.0])  # mean 2, SD 1, SE 1/sqrt(3) = 0.57735, t(0.975, 2) = 4.303
    assert (ci.mean, ci.sd, ci.n) == (2.0, 1.0, 3)
    assert ci.se == pytest.approx(0.57735, abs=1e-5)
    assert (ci.low, ci.high) == pytest.approx((2 - 2.48434, 2 + 2.48434), abs=1e-4)


def test_one_value_has_no_interval():
    ci = mean_ci([0.4])
    assert ci.mean == 0.4 and math.isnan(ci.low) and math.isnan(ci.high)


def test_paired_difference_uses_the_per_seed_differences_and_reports_the_mde():
    # d = (2, 3, 1): mean 2, SD 1, SE 0.57735; MDE = (4.303 + 1.061) * 0.57735 = 3.0969
    got = paired_difference([3.0, 5.0, 4.0], [1.0, 2.0, 3.0])
    assert got.diff.mean == 2.0 and got.diff.sd == 1.0
    assert got.mde == pytest.approx(3.0969, abs=1e-4)
    assert got.diff.low == pytest.approx(-0.48434, abs=1e-4)


def test_pairing_removes_the_shared_seed_effect():
    # each seed shifts both arms alike: unpaired SDs are 1, the paired difference is exactly 0.5 every seed
    got = paired_difference([1.5, 2.5, 3.5], [1.0, 2.0, 3.0])
    assert got.diff.mean == pytest.approx(0.5) and got.diff.sd == pytest.approx(0.0) and got.mde == pytest.approx(0.0)


def test_paired_samples_must_have_the_same_seeds():
    with pytest.raises(ValueError, match="length"):
        paired_difference([1.0, 2.0], [1.0])


def test_t_quantiles_from_the_table_and_beyond():
    assert t_quantile(0.975, 2) == 4.303 and t_quantile(0.80, 2) == 1.061
    # 1.96 + (1.96^3 + 1.96) / 160 = 2.0193 (exact t(0.975, 40) = 2.021)
    assert t_quantile(0.975, 40) == pytest.approx(2.0193, abs=1e-4)
    assert math.isnan(t_quantile(0.975, 0))


def test_advantage_mass_sums_abs_advantage_over_each_tasks_response_tokens():
    advantages = torch.tensor([1.0, -2.0, 0.5])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    got = advantage_mass(advantages, mask, torch.tensor([0, 1, 0]), ["a", "b"])
    assert got == {"adv_abs_sum/a": 1.0 * 2 + 0.5 * 3, "adv_abs_sum/b": 2.0}


def test_advantage_mass_of_token_level_advantages():
    advantages = torch.tensor([[1.0, -1.0, 3.0]])
    got = advantage_mass(advantages, torch.tensor([[1, 1, 0]]), torch.tensor([0]), ["a"])
    assert got == {"adv_abs_sum/a": 2.0}


def test_gradient_share_over_a_runs_steps():
    rl = [{"adv_abs_sum/a": 3.0, "adv_abs_sum/b": 1.0}, {"adv_abs_sum/a": 1.0, "adv_abs_sum/b": 5.0}]
    assert gradient_share(rl, ["a", "b"]) == {"a": 0.4, "b": 0.6}
    assert gradient_share([{"reward": 1.0}], ["a"]) is None


def test_gradient_share_counts_a_retry_arms_mass_under_its_task():
    rl = [{"adv_abs_sum/env/retry:a": 3.0, "adv_abs_sum/env/retry:b": 1.0}, {"adv_abs_sum/env/retry:a": 1.0}]
    assert gradient_share(rl, ["a", "b"]) == {"a": 0.8, "b": 0.2}


def _summary(low: float, high: float) -> dict:
    diff = {"mean": (low + high) / 2, "low": low, "high": high, "n": 3, "mde": 0.05}
    return {
        "seeds": [0, 1, 2],
        "strategies": {
            "off": {"easy": {"mean": (0.5, 0.01)}},
            "on": {"easy": {"mean": (0.5, 0.01)}, "vs_baseline": {"easy": {"mean": diff}}},
        },
    }


@pytest.mark.parametrize(
    ("low", "high", "word"),
    [(0.01, 0.05, "beats"), (-0.05, -0.01, "is beaten by"), (-0.02, 0.04, "is not distinguishable from")],
)
def test_verdict_follows_the_confidence_interval_of_the_paired_difference(low, high, word):
    text = verdict(_summary(low, high), baseline="off", split="easy")
    assert f"`on` {word} off" in text and "80% power: 5.0 points" in text


def _budget(sft_runs: int, rl_runs: int, finished: int, s_per_sft_step: float, seeds_left: int = 1) -> Budget:
    """A budget of SFT runs of 100 steps and RL runs of 10 steps at 6 s a step."""
    return Budget(sft_runs, rl_runs, finished, 100, 10, s_per_sft_step, 6.0, "x", seeds_left)


def test_budget_is_runs_times_steps_times_seconds_per_step():
    b = _budget(sft_runs=2, rl_runs=4, finished=2, s_per_sft_step=1.5)
    assert b.seconds == 2 * 100 * 1.5 + 4 * 10 * 6.0
    assert "≈ 9 min" in format_budget(b) and "2 finished run(s) skipped" in format_budget(b)


def test_budget_from_recorded_wall_times(tmp_path):
    from polyrl.experiments.budget import estimate_budget
    from polyrl.experiments.curriculum import plan_experiment

    config = tmp_path / "exp.yaml"
    config.write_text(
        "model: {path: tiny}\ntasks: [{name: sort_digits, difficulty: 0.0}]\nsft: {steps: 20}\nrl: {steps: 5}\n"
        "strategies: {a: {rl: {lr: 1.0e-4}}, b: {rl: {lr: 2.0e-4}}}\n"
    )
    plan = plan_experiment(config, 2, None, tmp_path / "out", hard_difficulty=None)
    for run, wall in ((plan.sft_dir(0), 40.0), (plan.run_dir("a", 0), 15.0)):
        (run / "eval").mkdir(parents=True)
        (run / "wall_time.json").write_text(json.dumps({"wall_s": wall}))
    (plan.sft_dir(0) / "eval" / "after_sft.json").write_text("{}")
    (plan.run_dir("a", 0) / "eval" / "after_rl.json").write_text("{}")
    b = estimate_budget(plan, probe=False)
    # left: SFT of seed 1 (20 steps at 40/20 = 2 s) and runs a/1, b/0, b/1 (5 steps at 15/5 = 3 s)
    assert (b.sft_runs, b.rl_runs, b.finished) == (1, 3, 1)
    assert (b.s_per_sft_step, b.s_per_rl_step) == (2.0, 3.0)
    assert b.seconds == 20 * 2.0 + 3 * 5 * 3.0


def test_budget_with_parallel_seeds_divides_by_the_seeds_run_at_once():
    b = _budget(sft_runs=3, rl_runs=6, finished=0, s_per_sft_step=1.2, seeds_left=3)
    assert b.seconds == 3 * 100 * 1.2 + 6 * 10 * 6.0  # 720 s = 12 min serially
    assert "≈ 12 min on this machine" in format_budget(b)
    # 3 seeds on 3 processes: a third of it; on 2 processes: two rounds of seeds, 2/3 of it
    assert "with --jobs 3: ≈ 4 min if 3 cores are free" in format_budget(b, jobs=3)
    assert "with --jobs 2: ≈ 8 min if 2 cores are free" in format_budget(b, jobs=2)
    assert "--jobs" not in format_budget(b, jobs=1)
