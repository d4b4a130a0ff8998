"""Seed statistics for comparisons: confidence intervals of each arm's mean, of each arm's difference to a
baseline paired by seed, and the smallest difference a comparison could have detected.

With ``n`` seeds, values ``x_1..x_n`` (one held-out score per seed) and the sample standard deviation
``s`` (``ddof=1``), the standard error of the mean is ``SE = s / sqrt(n)`` and the two-sided 95% confidence
interval is ``mean ± t_{0.975, n-1} · SE`` (Student's t). For an arm against the baseline, both trained from
the same warm start per seed, the differences ``d_i = arm_i - baseline_i`` are the sample (paired t-test).

The minimum detectable effect (MDE) at significance ``α = 0.05`` (two-sided) and power 80% is
``MDE = (t_{0.975, n-1} + t_{0.80, n-1}) · SE_d`` (e.g. Chow, Shao & Wang, *Sample Size Calculations in
Clinical Research*, §3.1; with many seeds it tends to the familiar ``(1.96 + 0.84) · SE ≈ 2.8 · SE``). With
3 seeds it is ``(4.303 + 1.061) · SE_d = 5.36 · SE_d``: few seeds make the bar high.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
"""Student t quantile 0.975 for 1..10 degrees of freedom (standard tables)."""
T_80 = (1.376, 1.061, 0.978, 0.941, 0.920, 0.906, 0.896, 0.889, 0.883, 0.879)
"""Student t quantile 0.80 for 1..10 degrees of freedom."""
Z_975, Z_80 = 1.960, 0.8416


def t_quantile(q: float, df: int) -> float:
    """Student t quantile ``q`` (0.975 or 0.80) for ``df`` degrees of freedom; beyond 10 a first-order
    correction of the normal quantile, ``z + (z^3 + z) / (4 df)`` (Abramowitz & Stegun 26.7.5)."""
    if q not in (0.975, 0.80):
        raise ValueError(f"t_quantile supports q=0.975 and q=0.80, got {q}")
    if df < 1:
        return math.nan
    table, z = (T_975, Z_975) if q == 0.975 else (T_80, Z_80)
    return table[df - 1] if df <= len(table) else z + (z**3 + z) / (4 * df)


def sample_sd(xs: list[float]) -> float:
    if len(xs) < 2:
        return math.nan
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


@dataclass
class Interval:
    """A mean over seeds with its sample SD, standard error and 95% confidence interval."""

    mean: float
    sd: float
    se: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def mean_ci(xs: list[float]) -> Interval:
    """The mean of ``xs`` with its 95% t confidence interval (NaN bounds for fewer than 2 values)."""
    n = len(xs)
    mean = sum(xs) / n
    sd = sample_sd(xs)
    se = sd / math.sqrt(n)
    half = t_quantile(0.975, n - 1) * se
    return Interval(mean, sd, se, mean - half, mean + half, n)


@dataclass
class PairedDifference:
    """An arm's difference to the baseline, paired by seed, and what the comparison could detect."""

    diff: Interval
    mde: float
    """Minimum detectable effect (α = 0.05 two-sided, power 80%)."""

    def as_dict(self) -> dict[str, float]:
        return {**self.diff.as_dict(), "mde": self.mde}


def paired_difference(arm: list[float], baseline: list[float]) -> PairedDifference:
    """``arm - baseline`` per seed: mean, 95% CI and MDE ``(t_{0.975,n-1} + t_{0.80,n-1}) · SE_d``."""
    if len(arm) != len(baseline):
        raise ValueError(f"paired samples differ in length: {len(arm)} vs {len(baseline)}")
    diff = mean_ci([a - b for a, b in zip(arm, baseline)])
    n = len(arm)
    return PairedDifference(diff, (t_quantile(0.975, n - 1) + t_quantile(0.80, n - 1)) * diff.se)


def pct(x: float, signed: bool = False) -> str:
    """A share as points with one decimal (``+`` shown with ``signed``); a dash for NaN."""
    return "—" if x != x else (f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}")


def ci_text(d: dict[str, float], signed: bool = False) -> str:
    """``mean [low, high]`` in points from an interval's ``as_dict()``; the mean alone with one seed."""
    if d["n"] < 2:
        return pct(d["mean"], signed)
    return f"{pct(d['mean'], signed)} [{pct(d['low'], signed)}, {pct(d['high'], signed)}]"


def binomial_se(p: float, n: int) -> float:
    """The binomial standard error ``sqrt(p (1 - p) / n)`` of an accuracy ``p`` measured on ``n`` problems: the
    evaluation's own noise, whatever training did (NaN for no problems)."""
    return math.sqrt(max(p * (1 - p), 0.0) / n) if n > 0 else math.nan


def mean_binomial_se(accuracies: list[float], problems: int, seeds: int = 1) -> float:
    """The binomial standard error of a mean over tasks (``accuracies``, each on ``problems`` problems) and over
    ``seeds`` evaluations of those problems: ``sqrt(sum_t p_t (1 - p_t) / problems) / T / sqrt(seeds)``."""
    if not accuracies or problems < 1 or seeds < 1:
        return math.nan
    var = sum(max(p * (1 - p), 0.0) for p in accuracies) / problems
    return math.sqrt(var) / len(accuracies) / math.sqrt(seeds)


@dataclass
class CrossedDifference:
    """A difference of two arms scored on the same problems in the same seeds, ``d[s][p] = arm - baseline``, with
    seeds and problems both treated as samples: the two-way random-effects (seeds × problems, one observation per
    cell) analysis of Searle, Casella & McCulloch, *Variance Components* §4.5, as used for language-model evals by
    Miller (2024), "Adding Error Bars to Evals". With mean squares ``MS_seed = P · Var(seed means)``, ``MS_problem
    = S · Var(problem means)`` and the residual ``MS_res``, ``Var(mean) = (MS_seed + MS_problem - MS_res) / (S P)``
    = ``σ²_seed / S + σ²_problem / P + σ²_res / (S P)``; its degrees of freedom by Satterthwaite (1946). With one
    seed it is the paired-by-problem analysis alone (``SD(d) / sqrt(P)``, P - 1 degrees of freedom)."""

    mean: float
    se: float
    df: float
    low: float
    high: float
    mde: float
    """Minimum detectable effect at α = 0.05 (two-sided) and 80% power, with t quantiles at ``df``."""
    seeds: int
    problems: int
    per_seed: list[float]
    """Each seed's mean difference over the problems."""
    per_seed_se: list[float]
    """Each seed's difference paired by problem: ``SD_p(d[s]) / sqrt(P)`` (that seed's evaluation noise)."""
    var_seed: float
    """σ²_seed: how much training (the seed) moves the difference, beyond evaluation noise (0 when negative)."""
    var_problem: float
    """σ²_problem: how much the difference depends on which problems are drawn (0 when negative)."""
    var_residual: float
    """σ²_res: the seed-by-problem noise (a greedy answer that flips between seeds)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _t_any(q: float, df: float) -> float:
    """:func:`t_quantile` at a real-valued ``df`` (Satterthwaite's), rounded down (conservative)."""
    return t_quantile(q, max(1, math.floor(df))) if df == df and df >= 1 else math.nan


def crossed_difference(d: list[list[float]]) -> CrossedDifference:
    """:class:`CrossedDifference` of the matrix ``d`` (seeds × problems, the same problems in every seed)."""
    s_n, p_n = len(d), len(d[0]) if d else 0
    if s_n < 1 or p_n < 2 or any(len(row) != p_n for row in d):
        raise ValueError("crossed_difference needs one row per seed, each over the same 2+ problems")
    seed_means = [sum(row) / p_n for row in d]
    problem_means = [sum(row[p] for row in d) / s_n for p in range(p_n)]
    mean = sum(seed_means) / s_n
    per_seed_se = [sample_sd(row) / math.sqrt(p_n) for row in d]
    if s_n == 1:
        se, df = per_seed_se[0], float(p_n - 1)
        var_s, var_p, var_e = math.nan, math.nan, math.nan
    else:
        ms_s = p_n * sum((m - mean) ** 2 for m in seed_means) / (s_n - 1)
        ms_p = s_n * sum((m - mean) ** 2 for m in problem_means) / (p_n - 1)
        res = sum((d[i][p] - seed_means[i] - problem_means[p] + mean) ** 2 for i in range(s_n) for p in range(p_n)) / (
            (s_n - 1) * (p_n - 1)
        )
        terms = [(ms_s, s_n - 1), (ms_p, p_n - 1), (-res, (s_n - 1) * (p_n - 1))]
        var = sum(ms for ms, _ in terms) / (s_n * p_n)
        if var <= 0:  # the residual alone: a lower bound the mean squares cannot undercut
            var = res / (s_n * p_n)
            terms = [(res, (s_n - 1) * (p_n - 1))]
        se = math.sqrt(var)
        scale = s_n * p_n
        denom = sum((ms / scale) ** 2 / dof for ms, dof in terms if dof > 0)
        df = var**2 / denom if denom > 0 else math.nan
        var_s, var_p, var_e = max((ms_s - res) / p_n, 0.0), max((ms_p - res) / s_n, 0.0), res
    if se == 0:  # every difference equal: nothing varies, the interval is the point
        half = mde = 0.0
    else:
        half = _t_any(0.975, df) * se
        mde = (_t_any(0.975, df) + _t_any(0.80, df)) * se
    return CrossedDifference(
        mean, se, df, mean - half, mean + half, mde, s_n, p_n, seed_means, per_seed_se, var_s, var_p, var_e
    )


def seed_mde(sd: float, seeds: int) -> float:
    """The MDE of a difference paired by seed whose per-seed values have SD ``sd``, with ``seeds`` seeds:
    ``(t_{0.975, n-1} + t_{0.80, n-1}) · sd / sqrt(n)`` (NaN below 2 seeds)."""
    if seeds < 2:
        return math.nan
    return (t_quantile(0.975, seeds - 1) + t_quantile(0.80, seeds - 1)) * sd / math.sqrt(seeds)


def seeds_for_mde(sd: float, target: float, most: int = 200) -> int | None:
    """The fewest seeds (2 or more) whose paired-by-seed MDE (:func:`seed_mde`) is at most ``target``; None when
    even ``most`` seeds would not reach it."""
    return next((n for n in range(2, most + 1) if seed_mde(sd, n) <= target), None)
