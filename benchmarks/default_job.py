"""The README's default-job table, from a run of the default job: `polyrl train` with no config.

    .venv/bin/python benchmarks/default_job.py [--run-dir runs/readme] [--out FILE] [key=value ...]

Runs ``python -m polyrl train --run-dir DIR [overrides]`` from this checkout, then prints (and with ``--out``
writes) a Markdown section: the command, the commit it was measured at (with ``+ uncommitted changes`` when
the tree differs from it), the machine, wall time and peak RSS, and the held-out table — greedy accuracy
after SFT and after RL with the difference in points, and pass@k after each — read from the run's
``eval/after_sft.json`` and ``eval/after_rl.json``. With ``--table-only RUN_DIR`` it formats an existing run
instead of training. The README's table is pasted from this output, so it is what the command prints.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from machine import machine

REPO = Path(__file__).resolve().parents[1]


UNKNOWN_COMMIT = "unknown (not a git checkout; give --commit)"


def commit() -> str:
    """The checkout's commit, and whether the working tree has changes beside it; :data:`UNKNOWN_COMMIT` where
    there is no git or no repository (a lent GPU machine gets a copy of the tree without either: issue #42, where
    this raised FileNotFoundError; ``gpu_check.sh`` passes ``--commit``)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True)
    except OSError:
        return UNKNOWN_COMMIT
    if head.returncode != 0 or not head.stdout.strip():
        return UNKNOWN_COMMIT
    return head.stdout.strip() + (" + uncommitted changes" if dirty.stdout.strip() else "")


JOB = ("progress=false",)
"""The default job: ``polyrl train`` with no config, these overrides and the caller's."""


def train(run_dir: Path, overrides: list[str]) -> tuple[float, float]:
    """Run the default job; its wall time (s) and the trainer's peak RSS (GB)."""
    env_cmd = [sys.executable, "-m", "polyrl", "train", "--run-dir", str(run_dir), *JOB, *overrides]
    t0 = time.perf_counter()
    done = subprocess.run(env_cmd, cwd=REPO)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"polyrl train exited with {done.returncode}")
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, peak_kb / 1024**2


def _percent(x: float) -> str:
    return f"{100 * x:.1f}%"


def _points(x: float) -> str:
    return f"{100 * x:+.1f}".replace("-", "−")


def table(run_dir: Path) -> str:
    """The held-out table of ``run_dir`` in the README's layout (the mean row in bold)."""
    before = json.loads((run_dir / "eval" / "after_sft.json").read_text())
    after = json.loads((run_dir / "eval" / "after_rl.json").read_text())
    k = next((key for key in before["mean"] if key.startswith("pass@") and key != "pass@1"), None)
    header = ["task", "after SFT", "after RL", "Δ (points)"] + ([f"{k} after SFT", f"{k} after RL"] if k else [])
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for task, row in before.items():
        a, b = row["accuracy"], after[task]["accuracy"]
        cells = [_percent(a), _percent(b), _points(b - a)]
        if task == "mean":
            cells = [f"**{c}**" for c in cells]
        cells += [_percent(row[k]), _percent(after[task][k])] if k else []
        lines.append("| " + " | ".join([f"**{task}**" if task == "mean" else task] + cells) + " |")
    return "\n".join(lines)


def section(run_dir: Path, overrides: list[str], measured_at: str, wall: float | None, peak_gb: float | None) -> str:
    command = " ".join(["polyrl train --run-dir", str(run_dir), *overrides])
    when = datetime.now(UTC).strftime("%Y-%m-%d")
    gpu = next((o.split("=", 1)[1] for o in overrides if o.startswith("device=") and "cuda" in o), None)
    where = machine()
    if gpu is not None:
        import torch

        where += f", {torch.cuda.get_device_name(torch.device(gpu))}"
    measured = f"Measured {when} at commit {measured_at} on {where}"
    if wall is not None:
        measured += f": {wall / 60:.1f} min wall, peak RSS {peak_gb:.2f} GB"
    return f"```\n{command}\n```\n\n{measured}.\n\n{table(run_dir)}\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", type=Path, default=Path("runs/readme"), help="Where the job writes its run.")
    parser.add_argument("--out", type=Path, help="Also write the section to this file.")
    parser.add_argument("--table-only", action="store_true", help="Format the run in --run-dir; do not train.")
    parser.add_argument("--commit", help="The commit the run is (or was) made at (default: HEAD, where git is).")
    parser.add_argument("overrides", nargs="*", help="Config overrides for the run (key=value).")
    args = parser.parse_args()
    wall = peak = None
    measured_at = args.commit or commit()  # before training: commits made meanwhile are not what ran
    if not args.table_only:
        if args.run_dir.exists():
            sys.exit(f"{args.run_dir} exists: give another --run-dir (or --table-only to format it)")
        wall, peak = train(args.run_dir, args.overrides)
    text = section(args.run_dir, args.overrides, measured_at, wall, peak)
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
