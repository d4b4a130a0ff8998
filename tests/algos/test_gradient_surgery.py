"""Gradient surgery on constructed conflicts, with numbers worked out by hand."""

import itertools

import pytest
import torch

from polyrl.algos.gradient_surgery import cagrad, cagrad_objective, get_surgery, pcgrad, summed


def test_pcgrad_projects_away_the_conflicting_component():
    # g1 = (1, 0), g2 = (-1, 1): g1·g2 = -1 < 0.
    # g1 -> g1 - (-1 / 2) g2 = (0.5, 0.5); g2 -> g2 - (-1 / 1) g1 = (0, 1); sum (0.5, 1.5).
    grads = torch.tensor([[1.0, 0.0], [-1.0, 1.0]])
    assert pcgrad(grads).tolist() == pytest.approx([0.5, 1.5])
    # the plain sum (0, 1) would leave task 1 no progress at all; after surgery both improve
    combined = pcgrad(grads)
    assert (grads @ combined > 0).all()


def test_pcgrad_leaves_agreeing_gradients_alone():
    grads = torch.tensor([[1.0, 2.0, 0.0], [0.5, 0.0, 1.0], [0.0, 1.0, 1.0]])
    assert torch.equal(pcgrad(grads), summed(grads))


def test_cagrad_improves_the_worst_task_and_solves_its_inner_problem():
    grads = torch.tensor([[1.0, 0.0], [-0.9, 0.3]])  # nearly opposed: the sum (0.1, 0.3) barely helps task 1
    d = cagrad(grads, c=0.5)
    assert (grads @ d).min() > (grads @ summed(grads)).min()
    # the weights it found are optimal: no point of a fine grid on the 2-simplex does better
    k = 2
    g = grads.double() * k
    best = min(cagrad_objective(grads, torch.tensor([a, 1 - a])) for a in torch.linspace(0, 1, 2001).tolist())
    found = _weights_of(d, g, c=0.5)
    assert cagrad_objective(grads, found) <= best + 1e-6


def _weights_of(d: torch.Tensor, g: torch.Tensor, c: float) -> torch.Tensor:
    """Recover w from d = (g0 + r/|gw| gw)/(1+c^2) for K=2 (gw is on the segment between the two rows)."""
    g0 = g.mean(0)
    gw = d.double() * (1 + c**2) - g0
    # gw is parallel to w0 g[0] + (1 - w0) g[1]; solve for w0 by least squares over the scale
    best, arg = float("inf"), None
    for a in torch.linspace(0, 1, 20001).tolist():
        v = a * g[0] + (1 - a) * g[1]
        err = (v / v.norm() - gw / gw.norm()).norm().item()
        if err < best:
            best, arg = err, a
    return torch.tensor([arg, 1 - arg])


def test_cagrad_without_conflict_is_the_plain_gradient_direction_for_one_task():
    grads = torch.tensor([[2.0, -1.0]])
    assert torch.equal(cagrad(grads), grads[0])


@pytest.mark.parametrize("name", ["none", "pcgrad", "cagrad"])
def test_every_rule_is_registered_and_keeps_the_scale(name):
    grads = torch.tensor([[1.0, 0.5], [0.8, 0.7]])  # no conflict
    out = get_surgery(name)(grads, None)
    assert out.norm() == pytest.approx(summed(grads).norm(), rel=0.25)


def test_pcgrad_is_order_independent_for_two_tasks():
    grads = torch.tensor([[1.0, 0.0], [-1.0, 1.0]])
    results = {tuple(pcgrad(grads, torch.Generator().manual_seed(s)).tolist()) for s in range(5)}
    assert len(results) == 1
    assert list(itertools.chain(*results)) == pytest.approx([0.5, 1.5])
