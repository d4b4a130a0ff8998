"""Greedy solver accuracy of a self-play run's checkpoints on one fixed set of proposed problems.

The solver's success rate logged during self-play (``role/solver/accuracy``) is measured on whatever the proposer
wrote that step, so it rises both when the solver gets better and when the proposals get easier. This script
separates the two: it takes the run's pool of distinct valid proposals (from a checkpoint's trainer state) and
scores every given model greedily on all of them, and on the ones whose value is not 0.

    PYTHONPATH=src python scripts/selfplay_pool_eval.py RUN_DIR [--pool-from CHECKPOINT] MODEL_DIR...

MODEL_DIR is a saved model with its tokenizer, ``sft_model`` or ``final_model`` (relative to RUN_DIR or absolute;
a checkpoint's ``model`` folder has no tokenizer).
Prints a Markdown table; ``--json PATH`` also writes the numbers.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from polyrl.device import HOST
from polyrl.eval.sources import LocalModelSource
from polyrl.policy.loading import ModelConfig, load_policy
from polyrl.rewards import verify_trajectories
from polyrl.rollout import Sampling, rollout
from polyrl.tasks import get_task
from polyrl.tasks.builtin._parse import evaluate_expression
from polyrl.tasks.builtin.arithmetic import expression_example
from polyrl.tasks.builtin.arithmetic_proposals import MAX_NESTING, MAX_PROPOSAL_CHARS


def pool_problems(run_dir: Path, checkpoint: str | None):
    """The pool's expressions as ``expression_evaluation`` problems, each with its value."""
    ckpt = run_dir / "checkpoints" / (checkpoint or (run_dir / "checkpoints" / "LATEST").read_text().strip())
    pool = json.loads((ckpt / "trainer_state.json").read_text())["selfplay"]["pool"]
    solver = get_task("expression_evaluation")
    out = []
    for i, question in enumerate(pool):
        expression = question.removesuffix("=")
        value, numbers = evaluate_expression(expression, MAX_PROPOSAL_CHARS, MAX_NESTING)
        params = {"operators": len(numbers) - 1, "digits": max(len(str(x)) for x in numbers)}
        example = expression_example(expression, int(value))
        out.append((solver.problem_from(example, i, "eval", None, params, "proposed"), int(value)))
    return ckpt.name, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--pool-from", default=None, help="checkpoint folder name (default: LATEST)")
    ap.add_argument("--max-new-tokens", type=int, default=12)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    ckpt, problems = pool_problems(args.run_dir, args.pool_from)
    tasks = {"expression_evaluation": get_task("expression_evaluation")}
    nonzero = [i for i, (_, v) in enumerate(problems) if v != 0]
    rows = []
    for name in args.models:
        path = Path(name) if Path(name).is_absolute() else args.run_dir / name
        policy = load_policy(ModelConfig(path=str(path)), device=HOST)
        source = LocalModelSource(policy, "question", None)
        greedy = rollout(
            [p for p, _ in problems],
            tasks,
            source.backend,
            source.prompts,
            Sampling(1, args.max_new_tokens),
            greedy=True,
        )
        verify_trajectories(greedy, tasks)
        correct = [bool(t.verdict.correct) for t in sorted(greedy, key=lambda t: t.group)]
        rows.append(
            {
                "model": name,
                "all": sum(correct) / len(correct),
                "value_not_0": sum(correct[i] for i in nonzero) / max(len(nonzero), 1),
            }
        )
    print(f"pool of {ckpt}: {len(problems)} distinct proposals, {len(nonzero)} with a value other than 0\n")
    print("| model | greedy accuracy, all | value ≠ 0 |\n|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['all']:.3f} | {r['value_not_0']:.3f} |")
    if args.json:
        args.json.write_text(
            json.dumps({"pool": ckpt, "n": len(problems), "n_nonzero": len(nonzero), "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
