"""The report's catalogue of per-step panels, and the choice of which to draw for a given run.

A panel is drawn when at least one of its series was logged; a diagnostic whose every series is 0 at every step
(a clip fraction with one optimisation epoch, an IS weight with synchronous rollouts) and the KL panel when the KL
term is off (``rl.kl_coef: 0``) are left out and listed under the figure instead of being drawn empty.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from polyrl.report import series
from polyrl.report.series import Omitted


@dataclass(frozen=True)
class Curve:
    """One line of an overlay panel: the overall (all-task) series ``key``, drawn in ``color``."""

    key: str
    label: str
    color: str


@dataclass(frozen=True)
class Panel:
    """A per-step plot: one line per task (``per_task``: ``<key>/<task>`` plus the overall ``<key>`` in black), or
    overlaid overall series (``curves``; ``band``: shade between the first and last curve, e.g. ratio min..max)."""

    title: str
    key: str = ""
    curves: tuple[Curve, ...] = ()
    band: bool = False
    omit_if_zero: bool = False
    raw: bool = True  # noisy: smoothed line with the raw values faint; False for schedules (learning rate)
    zero_fill: str = ""
    """For counts logged only when nonzero: a key logged every step; a curve's missing steps among its steps are 0."""

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(c.key for c in self.curves) if self.curves else (self.key,)


PER_TASK = (
    Panel("reward", key="reward"),
    Panel("accuracy (sampled)", key="accuracy"),
    Panel("verifier score", key="score"),
    Panel("format rate", key="format_rate"),
    Panel("response length (tokens)", key="response_length"),
    Panel("truncation rate (hit max tokens)", key="truncation_rate", omit_if_zero=True),
    Panel("entropy (nats / token)", key="entropy"),
    Panel("KL to reference", key="kl", omit_if_zero=True),
    Panel("clip fraction", key="clip_fraction", omit_if_zero=True),
)

DIAGNOSTICS = (
    Panel(
        "clip fraction by side",
        curves=(
            Curve("clip_fraction", "both", "#222222"),
            Curve("clip_fraction_low", "low (ratio < 1−ε)", "#4c72b0"),
            Curve("clip_fraction_high", "high (ratio > 1+ε)", "#c44e52"),
        ),
        omit_if_zero=True,
    ),
    Panel("approx. KL(old ‖ new), k3", curves=(Curve("approx_kl", "approx. KL", "#8172b3"),), omit_if_zero=True),
    Panel(
        "importance ratio π / π_old",
        curves=(
            Curve("ratio_min", "min", "#4c72b0"),
            Curve("ratio_mean", "mean", "#222222"),
            Curve("ratio_max", "max", "#c44e52"),
        ),
        band=True,
    ),
    Panel("truncated IS weight (mean)", curves=(Curve("tis_weight_mean", "mean weight", "#55a868"),)),
    Panel(
        "IS weights truncated (fraction)",
        curves=(Curve("tis_truncated_fraction", "truncated", "#dd8452"),),
        omit_if_zero=True,
    ),
    Panel("zero-variance groups (fraction)", curves=(Curve("zero_variance_frac", "zero variance", "#937860"),)),
    Panel("gradient norm", curves=(Curve("grad_norm", "grad norm", "#4c72b0"),)),
    Panel("loss", curves=(Curve("loss", "loss", "#222222"),)),
    Panel("learning rate", curves=(Curve("lr", "lr", "#222222"),), raw=False),
    Panel("generation (tokens / s)", curves=(Curve("tokens_per_s", "tokens/s", "#64b5cd"),)),
    Panel("step time (s)", curves=(Curve("step_time", "step time", "#8c8c8c"),)),
)

PALETTE = (
    "#4c72b0",
    "#dd8452",
    "#55a868",
    "#c44e52",
    "#8172b3",
    "#937860",
    "#da8bc3",
    "#8c8c8c",
    "#ccb974",
    "#64b5cd",
)


def term_panels(rl: list[dict[str, Any]], tasks: list[str]) -> tuple[Panel, ...]:
    """Reward terms (weighted value per term) and reward-term failures (count per step), one line per term."""
    out = []
    for prefix, title, zero in (("reward_terms", "reward terms", False), ("reward_failures", "reward failures", True)):
        names = series.terms(rl, prefix, tasks)
        curves = tuple(Curve(f"{prefix}/{n}", n, PALETTE[i % len(PALETTE)]) for i, n in enumerate(names))
        if curves:
            out.append(Panel(title, curves=curves, omit_if_zero=zero))
    return tuple(out)


SELFPLAY = (
    Panel(
        "proposer: valid proposals (share)",
        curves=(
            Curve("role/proposer/valid", "valid", "#4c72b0"),
            Curve("role/proposer/distinct", "distinct among valid", "#8172b3"),
        ),
    ),
    Panel(
        "proposer reward (learnability)",
        curves=(
            Curve("role/proposer/reward", "all proposals", "#222222"),
            Curve("role/proposer/learnability", "valid proposals", "#dd8452"),
            Curve("role/proposer/learnable", "valid with 0 < p < 1", "#55a868"),
        ),
    ),
    Panel(
        "solver on proposed problems",
        curves=(
            Curve("role/solver/accuracy", "success rate", "#55a868"),
            Curve("role/solver/reward", "reward", "#222222"),
        ),
    ),
    Panel("distinct valid proposals so far", curves=(Curve("selfplay/pool_size", "pool", "#937860"),), raw=False),
)
"""The self-play section: the proposer's validity and reward, the solver's success on proposed problems, the pool."""


def selfplay_panels(rl: list[dict[str, Any]]) -> tuple[Panel, ...]:
    """:data:`SELFPLAY`, then the proposals' difficulty statistics (``role/proposer/<stat>`` from the proposer task)
    and the invalid proposals per step by reason (``selfplay/invalid/<reason>``), when logged."""
    known = {c.key for p in SELFPLAY for c in p.curves}
    stats = sorted(
        {k for r in rl for k in r if k.startswith("role/proposer/") and k not in known and series.logged(rl, k)}
    )
    reasons = series.terms(rl, "selfplay/invalid", [])
    extra = []
    if stats:
        curves = tuple(Curve(k, k.rsplit("/", 1)[1], PALETTE[i % len(PALETTE)]) for i, k in enumerate(stats))
        extra.append(Panel("proposal difficulty (mean over valid)", curves=curves))
    if reasons:
        curves = tuple(Curve(f"selfplay/invalid/{n}", n, PALETTE[i % len(PALETTE)]) for i, n in enumerate(reasons))
        extra.append(Panel("invalid proposals by reason (count)", curves=curves, zero_fill="selfplay/proposals"))
    return SELFPLAY + tuple(extra)


def _keys(panel: Panel, tasks: list[str]) -> list[str]:
    if panel.curves:
        return list(panel.keys)
    return [panel.key] + [f"{panel.key}/{t}" for t in tasks]


def select(
    catalogue: tuple[Panel, ...], rl: list[dict[str, Any]], tasks: list[str], config: dict[str, Any]
) -> tuple[list[Panel], list[Omitted]]:
    """(panels to draw, panels left out with the reason). Never-logged panels are neither: they are not this run's."""
    shown, omitted = [], []
    for panel in catalogue:
        keys = _keys(panel, tasks)
        if not any(series.logged(rl, k) for k in keys):
            continue
        if panel.key == "kl" and (why := series.kl_is_off(config)):
            omitted.append(Omitted(panel.title, why))
        elif panel.omit_if_zero and all(series.always_zero(rl, k) or not series.logged(rl, k) for k in keys):
            omitted.append(Omitted(panel.title, "0 at every step"))
        else:
            shown.append(panel)
    return shown, omitted
