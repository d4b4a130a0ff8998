"""Held-out accuracy during RL, for polyrl and TRL alike (benchmarks/vs_trl.py ``--eval-every N``): both trainers
are evaluated every N RL steps on the same held-out problems with the same evaluator (polyrl's
``evaluate_policy``, greedy), and each evaluation is stamped with the *training* wall time spent so far — the run's
wall time minus the evaluations' and the update probe's own time — so that the two trainers can be compared by
time to accuracy: the training time until held-out accuracy first reaches the SFT start + ``margin`` points.

polyrl is evaluated through its own periodic evaluation (``eval.every``), TRL through a ``TrainerCallback`` at
the same steps; the final evaluation (after the last step) is the benchmark's own, as without ``--eval-every``.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from transformers import TrainerCallback


@dataclass
class Curve:
    """One trainer's held-out evaluations during RL: ``(step, training seconds so far, mean accuracy)`` rows and the
    per-task results of each."""

    points: list[tuple[int, float, float]] = field(default_factory=list)
    results: list[dict] = field(default_factory=list)
    excluded: float = 0.0
    """Seconds spent evaluating (not training), taken off every later stamp."""
    excluded_cpu: float = 0.0
    """The evaluations' CPU seconds (this process), taken off the run's CPU time."""
    start: float = field(default_factory=time.perf_counter)

    def training_seconds(self, probe_seconds: float = 0.0) -> float:
        return time.perf_counter() - self.start - self.excluded - probe_seconds

    def evaluated(self, step: int, evaluate, probe_seconds: float = 0.0) -> dict:
        """Stamp the training time at ``step``, run ``evaluate()`` (its time excluded from training) and record it."""
        stamp = self.training_seconds(probe_seconds)
        t0, c0 = time.perf_counter(), time.process_time()
        results = evaluate()
        self.excluded += time.perf_counter() - t0
        self.excluded_cpu += time.process_time() - c0
        self.points.append((step, stamp, results["mean"]["accuracy"]))
        self.results.append(results)
        return results

    def add_final(self, step: int, seconds: float, results: dict) -> None:
        """The benchmark's own evaluation after the last step, at the run's timed training seconds."""
        self.points.append((step, seconds, results["mean"]["accuracy"]))
        self.results.append(results)

    def as_dict(self) -> dict:
        return {"points": self.points, "results": self.results}


def watch_polyrl(trainer, curve: Curve, probe) -> None:
    """Route polyrl's periodic evaluations (``eval.every``) through ``curve``: each stamped with the training time
    so far (``probe``: the update probe, whose own time is taken off too)."""
    evaluate = trainer.rl.evaluate

    def stamped(name: str, *a, **k):
        step = int(name.rsplit("_", 1)[1]) if name.startswith("rl_step_") else trainer.state.step
        return curve.evaluated(step, lambda: evaluate(name, *a, **k), probe.wall)

    trainer.rl.evaluate = stamped


class EvaluateEvery(TrainerCallback):
    """A TRL/transformers callback: every ``every`` optimizer steps (before the last), ``evaluate(model)`` into
    ``curve``, stamped with the training time so far (``probe``'s own time taken off)."""

    def __init__(self, every: int, last: int, curve: Curve, evaluate, probe):
        self.every, self.last, self.curve, self.evaluate, self.probe = every, last, curve, evaluate, probe

    def on_step_end(self, args, state, control, model=None, **kwargs):
        step = state.global_step
        if self.every and step % self.every == 0 and step < self.last:
            self.curve.evaluated(step, lambda: self.evaluate(model), self.probe.wall)
        return control


def time_to_accuracy(points: list[tuple[int, float, float]], threshold: float) -> tuple[int, float] | None:
    """``(step, training seconds)`` of the first evaluation at or above ``threshold``; None if none reached it."""
    return next(((step, secs) for step, secs, acc in points if acc >= threshold), None)


def plot(results: list[dict], margin: float, path: Path) -> None:
    """``path``: held-out mean accuracy against RL steps and against training wall time, polyrl and TRL, one thin
    line per seed and the mean over seeds; the SFT start + ``margin`` threshold dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors = {"polyrl": "tab:blue", "trl": "tab:orange"}
    labels = {"polyrl": "polyrl", "trl": "TRL GRPOTrainer"}
    for who in ("polyrl", "trl"):
        curves = [[(0, 0.0, r["sft"]["mean"]["accuracy"]), *r[who]["curve"]["points"]] for r in results]
        for pts in curves:
            steps, secs, acc = zip(*pts)
            axes[0].plot(steps, [100 * a for a in acc], color=colors[who], alpha=0.25, lw=0.8)
            axes[1].plot([s / 60 for s in secs], [100 * a for a in acc], color=colors[who], alpha=0.25, lw=0.8)
        if len({len(c) for c in curves}) == 1:
            mean = np.mean([[p[2] for p in c] for c in curves], axis=0)
            secs = np.mean([[p[1] for p in c] for c in curves], axis=0)
            steps = [p[0] for p in curves[0]]
            axes[0].plot(steps, 100 * mean, color=colors[who], lw=2, label=f"{labels[who]} (mean of seeds)")
            axes[1].plot(secs / 60, 100 * mean, color=colors[who], lw=2, label=f"{labels[who]} (mean of seeds)")
    start = 100 * np.mean([r["sft"]["mean"]["accuracy"] for r in results])
    for ax in axes:
        ax.axhline(start + margin, color="grey", ls="--", lw=0.8, label=f"SFT start + {margin:g} points")
        ax.set_ylabel("held-out accuracy, mean of tasks (%)")
        ax.grid(alpha=0.3)
    axes[0].set_xlabel("RL step")
    axes[1].set_xlabel("training wall time (min; evaluations excluded)")
    axes[0].legend(fontsize=8)
    axes[0].set_title("the same steps", fontsize=10)
    axes[1].set_title("the same wall time", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _ci(xs: list[float], fmt: str = "{:.1f}", signed: bool = False) -> str:
    """``mean [low, high]`` (95% Student t over seeds) of ``xs``; the mean alone with one value."""
    from polyrl.experiments.stats import mean_ci

    f = (lambda x: ("+" if signed and x >= 0 else "") + fmt.format(x)) if fmt else str
    ci = mean_ci(xs)
    return f(ci.mean) if ci.n < 2 else f"{f(ci.mean)} [{f(ci.low)}, {f(ci.high)}]"


def learning_report(results: list[dict], every: int, margin: float) -> tuple[list[tuple], str]:
    """The tables of a run with evaluations every ``every`` steps — held-out accuracy at each evaluated step for
    both trainers with the paired difference, time to the SFT start + ``margin`` points per seed, and the final
    figures with 95% intervals over seeds and binomial standard errors — and one verdict sentence."""
    from polyrl.experiments.stats import binomial_se

    pct = lambda r: 100 * r["mean"]["accuracy"]
    curves = {who: [r[who]["curve"]["points"] for r in results] for who in ("polyrl", "trl")}
    steps = [p[0] for p in curves["polyrl"][0]]
    rows = []
    for i, step in enumerate(steps):
        ours = [100 * c[i][2] for c in curves["polyrl"]]
        theirs = [100 * c[i][2] for c in curves["trl"]]
        rows.append([str(step), _ci(ours), _ci(theirs), _ci([a - b for a, b in zip(ours, theirs)], signed=True)])
    during = (
        f"Held-out accuracy during RL (mean of tasks, %, every {every} steps; mean [95% CI] over seeds)",
        ["RL step", "polyrl", "TRL GRPOTrainer", "polyrl − TRL (paired by seed)"],
        rows,
    )
    tta_rows, ratios, reached = [], [], {"polyrl": 0, "trl": 0}
    for r in results:
        threshold = pct(r["sft"]) + margin
        cells = []
        times = {}
        for who in ("polyrl", "trl"):
            hit = time_to_accuracy([(s, t, 100 * a) for s, t, a in r[who]["curve"]["points"]], threshold)
            times[who] = hit
            reached[who] += hit is not None
            cells.append(f"step {hit[0]}, {hit[1] / 60:.1f} min" if hit else "not reached")
        ratio = times["trl"][1] / times["polyrl"][1] if times["trl"] and times["polyrl"] else None
        if ratio is not None:
            ratios.append(ratio)
        tta_rows.append([str(r["seed"]), f"{pct(r['sft']):.1f}%", f"{threshold:.1f}%", *cells,
                         f"{ratio:.2f}×" if ratio else "–"])  # fmt: skip
    tta = (
        f"Time to accuracy: training wall time (evaluations excluded) until held-out accuracy first reaches the SFT "
        f"start + {margin:g} points",
        ["seed", "SFT start", "threshold", "polyrl", "TRL GRPOTrainer", "TRL / polyrl"],
        tta_rows,
    )
    n = sum(1 for k in results[0]["sft"] if k != "mean")
    final = {who: [pct(r[who]["accuracy"]) for r in results] for who in ("polyrl", "trl")}
    start = [pct(r["sft"]) for r in results]
    problems = results[0].get("eval_problems") or 0
    se = {
        who: ", ".join(f"{binomial_se(x / 100, problems * n) * 100:.1f}" for x in xs) if problems else "–"
        for who, xs in final.items()
    }
    final_rows = [
        [label, _ci(final[who]), _ci([a - b for a, b in zip(final[who], start)], signed=True), se[who]]
        for label, who in (("polyrl", "polyrl"), ("TRL GRPOTrainer", "trl"))
    ]
    final_rows.append(
        ["polyrl − TRL", _ci([a - b for a, b in zip(final["polyrl"], final["trl"])], signed=True), "", ""]
    )
    wall = [r["trl"]["wall"] / r["polyrl"]["wall"] for r in results]
    cpu = [r["trl"]["cpu"] / r["polyrl"]["cpu"] for r in results]
    after = (
        f"After the same {steps[-1]} steps (95% intervals over {len(results)} seed(s))",
        ["", "held-out mean (%)", "gain over the SFT start (points)", "binomial SE per seed (points)"],
        final_rows,
    )
    speed = (
        "RL throughput, polyrl / TRL (95% interval over seeds; evaluations excluded)",
        ["", "wall time", "CPU time"],
        [["TRL seconds / polyrl seconds", f"{_ci(wall, '{:.2f}')}×", f"{_ci(cpu, '{:.2f}')}×"]],
    )
    verdict = (
        f"after {steps[-1]} RL steps held-out gain over the SFT start: polyrl "
        f"{_ci([a - b for a, b in zip(final['polyrl'], start)], signed=True)} points, TRL "
        f"{_ci([a - b for a, b in zip(final['trl'], start)], signed=True)}; SFT start + {margin:g} points reached by "
        f"polyrl in {reached['polyrl']}/{len(results)} seeds, TRL in {reached['trl']}/{len(results)}"
        + (f"; time to it, TRL / polyrl: {_ci(ratios, '{:.2f}')}× over {len(ratios)} seed(s)" if ratios else "")
    )
    return [during, tta, after, speed], verdict


_SEEDS = re.compile(r"seeds [0-9, ]+; ")


def without_seeds(setup: str) -> str:
    """A run's setup line with its seeds left out: what seeds run apart must share to be reported together."""
    return _SEEDS.sub("", setup)


def merged_runs(paths: list[str]) -> tuple[list[dict], list[str], str]:
    """The per-seed results of earlier ``vs_trl.py --json`` files, in seed order, with each file's machine line and
    their common setup (seeds left out) — for a comparison staged across sessions. Raises ``SystemExit`` with one
    line for a file that is missing or not such a file, for setups that differ, and for a seed found twice."""
    results, machines, setups = [], [], {}
    for path in paths:
        try:
            run = json.loads(Path(path).read_text())
            setups[path] = without_seeds(run["setup"])
            results += run["results"]
            machines.append(run["machine"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SystemExit(f"--merge: {path} is not a vs_trl.py --json file ({type(e).__name__}: {e})") from None
    first = paths[0]
    for path, setup in setups.items():
        if setup != setups[first]:
            raise SystemExit(f"--merge: {path} ran another setup than {first}: {setup!r} vs {setups[first]!r}")
    seeds = [r["seed"] for r in results]
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:
        raise SystemExit(f"--merge: seed(s) {', '.join(map(str, twice))} found in more than one file")
    return sorted(results, key=lambda r: r["seed"]), machines, setups[first]
