"""Value losses against hand-computed targets: HL-Gauss (Gaussian CDF differences over bins), two-hot, MSE."""

import math

import pytest
import torch

from polyrl.critic import bin_centers, expected_value, hl_gauss_targets, two_hot_targets, value_loss


def _phi(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def test_hl_gauss_target_is_normalized_cdf_differences():
    # support [0, 4] with 4 bins: edges 0,1,2,3,4; sigma = 0.75 * 1; y = 1.5
    y, sigma = 1.5, 0.75
    edges = [0.0, 1.0, 2.0, 3.0, 4.0]
    cdf = [_phi((e - y) / sigma) for e in edges]
    expected = [(cdf[i + 1] - cdf[i]) / (cdf[-1] - cdf[0]) for i in range(4)]
    # by hand: Φ(-2)=0.02275, Φ(-2/3)=0.25249, Φ(2/3)=0.74751, Φ(2)=0.97725, Φ(10/3)=0.99957; sum 0.97682
    assert expected == pytest.approx([0.23519, 0.50677, 0.23519, 0.02285], abs=1e-4)
    got = hl_gauss_targets(torch.tensor([y]), 0.0, 4.0, 4, sigma_ratio=0.75)[0]
    assert got.tolist() == pytest.approx(expected, abs=1e-6)
    assert float(got.sum()) == pytest.approx(1.0)


def test_hl_gauss_target_is_symmetric_at_the_support_centre():
    got = hl_gauss_targets(torch.tensor([0.0]), -1.0, 1.0, 4, 0.75)[0]
    assert got.tolist() == pytest.approx(got.flip(0).tolist(), abs=1e-7)


def test_two_hot_splits_mass_between_neighbouring_centres():
    # centres of [0, 4] / 4 bins: 0.5, 1.5, 2.5, 3.5; y = 1.8 is 30 % of the way from 1.5 to 2.5
    got = two_hot_targets(torch.tensor([1.8]), 0.0, 4.0, 4)[0]
    assert got.tolist() == pytest.approx([0.0, 0.7, 0.3, 0.0], abs=1e-6)
    assert float(got @ bin_centers(0.0, 4.0, 4)) == pytest.approx(1.8)


def test_two_hot_clips_returns_outside_the_centres():
    got = two_hot_targets(torch.tensor([-5.0, 9.0, 3.5]), 0.0, 4.0, 4)
    assert got.tolist() == [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0]]


def test_expected_value_of_uniform_logits_is_support_midpoint():
    assert float(expected_value(torch.zeros(5), -1.0, 1.5)) == pytest.approx(0.25)


def test_mse_value_loss_averages_over_masked_tokens():
    values = torch.tensor([[0.0, 1.0, 9.0]])
    returns = torch.tensor([[1.0, 1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    assert float(value_loss(values, returns, mask, "mse", -1.0, 1.5, 0.75)) == pytest.approx(0.5)


def test_categorical_value_loss_is_cross_entropy_to_the_target():
    logits = torch.tensor([[[0.0, math.log(3.0)]]])  # probs 0.25, 0.75
    returns = torch.tensor([[1.5]])  # support [0, 2], 2 bins: centres 0.5, 1.5 -> two-hot [0, 1]
    mask = torch.ones(1, 1)
    assert float(value_loss(logits, returns, mask, "two_hot", 0.0, 2.0, 0.75)) == pytest.approx(
        -math.log(0.75), abs=1e-6
    )


def test_hl_gauss_loss_is_minimized_by_its_target():
    returns = torch.tensor([[0.3]])
    target = hl_gauss_targets(returns, -1.0, 1.0, 8, 0.75)
    at_target = value_loss(
        target.log().unsqueeze(0)[0].unsqueeze(0), returns, torch.ones(1, 1), "hl_gauss", -1.0, 1.0, 0.75
    )
    elsewhere = value_loss(torch.zeros(1, 1, 8), returns, torch.ones(1, 1), "hl_gauss", -1.0, 1.0, 0.75)
    assert float(at_target) < float(elsewhere)
