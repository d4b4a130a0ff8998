"""Statistics of comparisons paired by problem as well as by seed (``experiments/stats.py``), the binomial
standard errors the reports print beside accuracies, and sizing a design's seeds, with hand-computed numbers."""

import math

import pytest

from polyrl.experiments.stats import (
    binomial_se,
    crossed_difference,
    mean_binomial_se,
    seed_mde,
    seeds_for_mde,
)


def test_binomial_se_is_the_evaluations_own_noise():
    assert binomial_se(0.5, 100) == pytest.approx(0.05)  # sqrt(0.25 / 100)
    assert binomial_se(0.2, 200) == pytest.approx(math.sqrt(0.16 / 200))
    assert binomial_se(1.0, 30) == 0.0 and math.isnan(binomial_se(0.5, 0))


def test_the_se_of_a_mean_over_tasks_and_seeds_pools_their_variances():
    # tasks at 0.5 and 0.2 on 100 problems each, two seeds: sqrt((0.25 + 0.16) / 100) / 2 / sqrt(2)
    assert mean_binomial_se([0.5, 0.2], 100, seeds=2) == pytest.approx(math.sqrt(0.0041) / 2 / math.sqrt(2))
    assert math.isnan(mean_binomial_se([], 100))


def test_crossed_difference_by_hand():
    # d = [[1, 0, 1], [0, 0, 1]]: seed means 2/3, 1/3; problem means 0.5, 0, 1; mean 0.5.
    # MS_seed = 3 * (1/36 + 1/36) = 1/6; MS_problem = 2 * (0 + 1/4 + 1/4) / 2 = 1/2;
    # residuals ±1/3, ±1/6, ±1/6 -> SS 1/3 over 2 df: MS_res = 1/6.
    # Var(mean) = (1/6 + 1/2 - 1/6) / 6 = 1/12; Satterthwaite df = (1/12)^2 / ((1/36)^2 + (1/12)^2/2 + (1/36)^2/2) = 1.5
    c = crossed_difference([[1, 0, 1], [0, 0, 1]])
    assert c.mean == pytest.approx(0.5) and c.se == pytest.approx(math.sqrt(1 / 12))
    assert c.df == pytest.approx(1.5)
    assert (c.low, c.high) == pytest.approx((0.5 - 12.706 * c.se, 0.5 + 12.706 * c.se))  # df rounded down to 1
    assert c.mde == pytest.approx((12.706 + 1.376) * c.se)
    assert c.per_seed == pytest.approx([2 / 3, 1 / 3])
    assert c.per_seed_se == pytest.approx([1 / 3, 1 / 3])  # SD sqrt(1/3) over sqrt(3) problems
    assert (c.var_seed, c.var_problem, c.var_residual) == pytest.approx((0.0, 1 / 6, 1 / 6))


def test_one_seed_is_the_analysis_paired_by_problem_alone():
    c = crossed_difference([[1, 0, 1, 0]])  # SD sqrt(1/3), SE sqrt(1/3)/2, 3 df
    assert c.mean == 0.5 and c.se == pytest.approx(math.sqrt(1 / 3) / 2) and c.df == 3
    assert math.isnan(c.var_seed)


def test_a_ragged_or_empty_matrix_is_refused():
    for bad in ([], [[1.0]], [[1, 0], [1]]):
        with pytest.raises(ValueError, match="same 2\\+ problems"):
            crossed_difference(bad)


def test_identical_arms_have_no_spread():
    c = crossed_difference([[0, 0, 0], [0, 0, 0]])
    assert c.mean == 0 and c.se == 0 and c.low == 0 and c.high == 0


def test_seed_mde_and_the_seeds_a_target_needs():
    # SD 3.5 points: 7 seeds give (2.447 + 0.906) * 3.5 / sqrt(7) = 4.436; 6 give (2.571 + 0.920) * 3.5 / sqrt(6) = 4.988
    assert seed_mde(0.035, 7) == pytest.approx(3.353 * 0.035 / math.sqrt(7))
    assert seed_mde(0.035, 6) == pytest.approx(3.491 * 0.035 / math.sqrt(6))
    assert seeds_for_mde(0.035, 0.05) == 6
    assert seeds_for_mde(0.035, 0.0498) == 7
    assert seeds_for_mde(0.5, 0.01) is None and math.isnan(seed_mde(0.01, 1))
