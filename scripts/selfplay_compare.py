"""Compare groups of self-play runs (e.g. two settings of ``selfplay.invalid_reward``) on the game's metrics.

    PYTHONPATH=src python scripts/selfplay_compare.py --group A RUN RUN RUN --group B RUN RUN RUN [--json PATH]
        [--plot PNG]

Each group is a label and its runs, one per seed, given in the same seed order in every group (the runs of one
position share their SFT model and seed, so the difference between two groups is taken per position). For every
run it reads ``metrics.jsonl`` (RL steps and the held-out evaluations) and, when present, ``pool_eval.json``
(``scripts/selfplay_pool_eval.py``); it prints a Markdown table of each group's mean with a 95% t-interval over
its runs and the per-position difference of every later group from the first, with its 95% t-interval.

Metrics: the proposer's valid share and the learnability of its valid proposals (``role/proposer/learnability``,
the learnability reward, never the invalid penalty) in the first and last 25 RL steps; the learnability over all
proposals without the penalty (valid share x learnability of valid ones); the solver's success on the step's
proposals; distinct valid proposals after RL (the pool); the share of value-0 proposals among the valid
proposals logged in ``selfplay/examples`` (8 a step) over all steps and over the last 50, and in the final pool;
the share of logged proposals that are valid with a value other than 0, and the solver's success on those;
steps with no update; held-out accuracies after SFT and after RL; greedy accuracy on the run's own pool.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from polyrl.tasks.builtin._parse import evaluate_expression
from polyrl.tasks.builtin.arithmetic_proposals import MAX_NESTING, MAX_PROPOSAL_CHARS

T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}
"""Two-sided 95% t quantiles by degrees of freedom."""


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else float("nan")


def _value(expression: str) -> int | None:
    try:
        value, _ = evaluate_expression(expression, MAX_PROPOSAL_CHARS, MAX_NESTING)
    except Exception:
        return None
    return int(value)


def run_metrics(run: Path) -> dict[str, float]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in records if r.get("stage") == "rl"]
    evals = {r.get("name"): r for r in records if r.get("stage") == "eval"}
    first, last = rl[:25], rl[-25:]

    def window(rs, key):
        return _mean(r.get(key) for r in rs)

    def learn_all(rs):
        return _mean(r["role/proposer/valid"] * r.get("role/proposer/learnability", 0.0) for r in rs)

    def zero_share(rs):
        values = [
            _value(e["proposal"].split("=")[0]) for r in rs for e in r.get("selfplay/examples", []) if e["valid"]
        ]
        return _mean(float(v == 0) for v in values if v is not None)

    def nonzero(rs):
        """Of the logged proposals: the share valid with a value other than 0, and the solver's success on those."""
        logged = [e for r in rs for e in r.get("selfplay/examples", [])]
        hard = [e for e in logged if e["valid"] and _value(e["proposal"].split("=")[0]) not in (0, None)]
        return _mean(float(e in hard) for e in logged), _mean(e["solver_success"] for e in hard)

    out = {
        "valid, steps 1-25": window(first, "role/proposer/valid"),
        "valid, last 25 steps": window(last, "role/proposer/valid"),
        "valid, last 25 - first 25": window(last, "role/proposer/valid") - window(first, "role/proposer/valid"),
        "learnability of valid, 1-25": window(first, "role/proposer/learnability"),
        "learnability of valid, last 25": window(last, "role/proposer/learnability"),
        "learnability of all (no penalty), 1-25": learn_all(first),
        "learnability of all (no penalty), last 25": learn_all(last),
        "solver success on proposals, 1-25": window(first, "role/solver/accuracy"),
        "solver success on proposals, last 25": window(last, "role/solver/accuracy"),
        "distinct among valid, last 25": window(last, "role/proposer/distinct"),
        "pool after RL": rl[-1]["selfplay/pool_size"],
        "value-0 share of logged valid, all steps": zero_share(rl),
        "value-0 share of logged valid, last 50": zero_share(rl[-50:]),
        "valid with value != 0, share of logged proposals, last 50": nonzero(rl[-50:])[0],
        "solver success on logged valid value != 0, first 50": nonzero(rl[:50])[1],
        "solver success on logged valid value != 0, last 50": nonzero(rl[-50:])[1],
        "steps with no update": float(sum(not r.get("trained_sequences") for r in rl)),
    }
    ckpt = run / "checkpoints" / (run / "checkpoints" / "LATEST").read_text().strip()
    pool = json.loads((ckpt / "trainer_state.json").read_text())["selfplay"]["pool"]
    out["value-0 share of the final pool"] = _mean(float(_value(q.removesuffix("=")) == 0) for q in pool)
    for task in ("expression_evaluation", "propose_expression"):
        for name in ("after_sft", "after_rl"):
            if name in evals:
                out[f"held-out {task}, {name}"] = evals[name][f"accuracy/{task}"]
    pool_eval = run / "pool_eval.json"
    if pool_eval.exists():
        rows = {r["model"]: r for r in json.loads(pool_eval.read_text())["rows"]}
        if "sft_model" in rows and "final_model" in rows:
            out["own pool greedy, final - sft"] = rows["final_model"]["all"] - rows["sft_model"]["all"]
            out["own pool value!=0 greedy, final - sft"] = (
                rows["final_model"]["value_not_0"] - rows["sft_model"]["value_not_0"]
            )
    return out


def plot(groups: dict[str, list[Path]], path: Path, smooth: int = 10) -> None:
    """Per step, each group's mean over its runs (a trailing mean over ``smooth`` steps): the proposer's valid
    share, the learnability of its valid proposals, and the value-0 share of the logged valid proposals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("proposer valid share", lambda r: r["role/proposer/valid"]),
        ("learnability of valid proposals", lambda r: r.get("role/proposer/learnability")),
        (
            "value-0 share of logged valid proposals",
            lambda r: _mean(
                float(_value(e["proposal"].split("=")[0]) == 0) for e in r.get("selfplay/examples", []) if e["valid"]
            ),
        ),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(12, 3.2))
    for label, runs in groups.items():
        rls = [
            [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"stage": "rl"' in x]
            for run in runs
        ]
        for ax, (title, get) in zip(axes, panels):
            per_step = []
            for i in range(min(map(len, rls))):
                window = [get(r) for rl in rls for r in rl[max(0, i - smooth + 1) : i + 1]]
                per_step.append(_mean(v for v in window if v is None or not math.isnan(v)))
            ax.plot(range(1, len(per_step) + 1), per_step, label=label)
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("RL step", fontsize=8)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def mean_ci(xs: list[float]) -> str:
    xs = [x for x in xs if not math.isnan(x)]
    if not xs:
        return "–"
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return f"{m:.3g}"
    half = T95[len(xs) - 1] * statistics.stdev(xs) / math.sqrt(len(xs))
    return f"{m:.3f} ± {half:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--group", nargs="+", action="append", required=True, metavar=("LABEL", "RUN"))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--plot", type=Path, default=None, help="PNG of per-step curves, each group's mean over runs")
    args = ap.parse_args()
    groups = {g[0]: [run_metrics(Path(r)) for r in g[1:]] for g in args.group}
    labels = list(groups)
    keys = [k for k in groups[labels[0]][0] if all(k in m for ms in groups.values() for m in ms)]
    head = ["metric", *(f"{label} (per run)" for label in labels), *(f"{label} mean ± 95% CI" for label in labels)]
    head += [f"{label} − {labels[0]} (paired)" for label in labels[1:]]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for k in keys:
        cells = [k]
        cells += [" / ".join(f"{m[k]:.3g}" for m in groups[label]) for label in labels]
        cells += [mean_ci([m[k] for m in groups[label]]) for label in labels]
        for label in labels[1:]:
            pairs = zip(groups[label], groups[labels[0]])
            cells.append(mean_ci([a[k] - b[k] for a, b in pairs]))
        print("| " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(groups, indent=1))
    if args.plot:
        plot({g[0]: [Path(r) for r in g[1:]] for g in args.group}, args.plot)


if __name__ == "__main__":
    main()
