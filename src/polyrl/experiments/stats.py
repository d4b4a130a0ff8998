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


def _sd(xs: list[float]) -> float:
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
    sd = _sd(xs)
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
