"""One RL step's CPU time on two versions of polyrl, side by side: runs ``rl_step_time.py`` once per tree per
round, alternating (base, head, base, head, …), so that a shared machine's load falls on both alike.

    python benchmarks/step_ab.py --base 4b1a579 [--head .] [--model smollm2-135m-instruct] [--rounds 3]
                                 [--steps 4] [--prompts 4] [--group-size 4] [--max-new-tokens 32] [key=value ...]

``--base`` and ``--head`` are git revisions (checked out into temporary worktrees) or ``.`` for this working
tree. Every run uses the same script (this checkout's ``rl_step_time.py``, which drives either Trainer), the same
model and problems; each tree runs its own defaults (e.g. ``model.autocast``), unless ``key=value`` overrides
are given. The first step of each run (one-time warm-up: oneDNN kernels, the allocator) is left out of its
mean. Prints each run's mean CPU seconds per step, each tree's mean, and base / head.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
STEP = re.compile(r'\{"step": (\d+), "cpu_s": ([0-9.]+)')


def checkout(revision: str, into: Path) -> Path:
    """The ``src`` folder of ``revision``: this working tree for ``.``, else a detached worktree in ``into``."""
    if revision == ".":
        return REPO / "src"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(into), revision], check=True,
                   capture_output=True)  # fmt: skip
    return into / "src"


def run_once(src: Path, args, extra: list[str]) -> list[float]:
    """CPU seconds of each step after the first, from one ``rl_step_time.py`` process on the tree ``src``."""
    command = [
        sys.executable,
        str(HERE / "rl_step_time.py"),
        f"--model={args.model}",
        f"--steps={args.steps}",
        f"--prompts={args.prompts}",
        f"--group-size={args.group_size}",
        f"--max-new-tokens={args.max_new_tokens}",
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(command, env=env, capture_output=True, text=True, cwd=HERE)
    steps = [float(m.group(2)) for m in STEP.finditer(out.stdout)]
    if out.returncode or len(steps) != args.steps:
        raise SystemExit(f"rl_step_time.py failed on {src}:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return steps[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="Git revision (or '.') of the baseline.")
    parser.add_argument("--head", default=".", help="Git revision (or '.', the default) of the version measured.")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4, help="RL steps per run (the first is not counted).")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("overrides", nargs="*", help="Config overrides (key=value) for both trees.")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first step is a warm-up)")
    with tempfile.TemporaryDirectory(prefix="polyrl-ab-") as tmp:
        trees = {"base": checkout(args.base, Path(tmp) / "base"), "head": checkout(args.head, Path(tmp) / "head")}
        try:
            means: dict[str, list[float]] = {"base": [], "head": []}
            for round_ in range(args.rounds):
                for name, src in trees.items():
                    steps = run_once(src, args, args.overrides)
                    means[name].append(statistics.mean(steps))
                    print(f"round {round_ + 1} {name}: {means[name][-1]:.2f} CPU s per step {steps}", flush=True)
        finally:
            for name in trees:
                if (Path(tmp) / name).exists():
                    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(Path(tmp) / name)])
    base, head = statistics.mean(means["base"]), statistics.mean(means["head"])
    print("\n| tree | revision | " + " | ".join(f"round {i + 1}" for i in range(args.rounds)) + " | mean |")
    print("|---|---|" + "---:|" * (args.rounds + 1))
    for name, revision in (("base", args.base), ("head", args.head)):
        cells = " | ".join(f"{m:.2f} s" for m in means[name])
        print(f"| {name} | {revision} | {cells} | {statistics.mean(means[name]):.2f} s |")
    ratios = [b / h for b, h in zip(means["base"], means["head"])]
    print(f"\nbase / head: {base / head:.2f}× (per round {', '.join(f'{r:.2f}×' for r in ratios)})")


if __name__ == "__main__":
    main()
