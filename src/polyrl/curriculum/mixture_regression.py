"""Mixture search: choose fixed task weights from short proxy runs.

The pieces of the search that are pure math: candidate mixtures, the ridge fit and the choice. The driver
that trains the proxy runs is :func:`polyrl.experiments.mixture_search.search_mixture`.

Train a few short proxy runs, each with a different candidate mixture (the ``weighted`` sampler), from one
shared SFT warm start; fit a ridge regression from the mixture weights to each run's held-out score; and
pick the mixture the regression predicts best. This is RegMix (Liu et al., "RegMix: Data Mixture as
Regression for Language Model Pre-training", 2024, §2): candidates drawn from a Dirichlet, a regressor
from weights to score, and the final mixture the mean of the top-k predicted points of a large simulated
pool (so one extrapolated corner of the simplex does not decide alone). Train the real run with
``sampler: {name: weighted, options: {weights: ...}}`` and the written weights.
"""

from __future__ import annotations

import numpy as np


def candidate_mixtures(n_tasks: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` mixtures over ``n_tasks``: the uniform one first, then Dirichlet(1) draws."""
    return np.vstack([np.full((1, n_tasks), 1.0 / n_tasks), rng.dirichlet(np.ones(n_tasks), size=count - 1)])


def fit_ridge(x: np.ndarray, y: np.ndarray, alpha: float = 1e-2) -> tuple[np.ndarray, float]:
    """Ridge regression ``y ≈ x·coef + intercept`` (intercept not penalised): returns (coef, intercept)."""
    xm, ym = x.mean(0), y.mean()
    xc = x - xm
    coef = np.linalg.solve(xc.T @ xc + alpha * np.eye(x.shape[1]), xc.T @ (y - ym))
    return coef, float(ym - xm @ coef)


def choose_mixture(
    coef: np.ndarray, intercept: float, rng: np.random.Generator, pool: int = 2000, top_k: int = 50
) -> tuple[np.ndarray, float]:
    """The mean of the ``top_k`` best-predicted mixtures of a Dirichlet(1) pool, and its predicted score."""
    sims = rng.dirichlet(np.ones(len(coef)), size=pool)
    best = sims[np.argsort(sims @ coef)[-top_k:]].mean(0)
    return best, float(best @ coef + intercept)
