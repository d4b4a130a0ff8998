"""SFT time by torch CPU thread count, alone and beside one busy process (the `threads` default, docs/training.md).

    .venv/bin/python benchmarks/cpu_threads.py [--threads 1,2] [--sft-steps 100] [--repeats 2]

For each repeat, for each thread count, one short SFT-only run of the default config alone, then the same run
beside ``python -c "while True: pass"`` (started before, killed after). The figure is the SFT optimizer time
(sum of ``step_time`` of the ``sft`` records in ``metrics.jsonl``), so model loading and evaluation do not
count. Runs are interleaved so that drift in the machine's load spreads over every setting.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from machine import cpu_model, markdown_table, mean_std


def sft_seconds(threads: int, sft_steps: int, run_dir: Path) -> float:
    """One SFT-only `polyrl train` run with ``threads`` torch threads; its summed SFT step time."""
    args = [
        f"threads={threads}",
        f"sft.steps={sft_steps}",
        "rl.enabled=false",
        "eval.problems_per_task=1",
        f"run_dir={run_dir}",
    ]
    subprocess.run([sys.executable, "-m", "polyrl", "train", *args], check=True, capture_output=True)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return sum(r["step_time"] for r in records if r.get("stage") == "sft")


def beside_busy_loop(threads: int, sft_steps: int, run_dir: Path) -> float:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        return sft_seconds(threads, sft_steps, run_dir)
    finally:
        busy.kill()
        busy.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", default="1,2", help="Comma-separated thread counts.")
    parser.add_argument("--sft-steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    counts = [int(t) for t in args.threads.split(",")]
    alone: dict[int, list[float]] = {t: [] for t in counts}
    busy: dict[int, list[float]] = {t: [] for t in counts}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for t in counts:
                alone[t].append(sft_seconds(t, args.sft_steps, Path(tmp) / f"alone_{t}_{rep}"))
                busy[t].append(beside_busy_loop(t, args.sft_steps, Path(tmp) / f"busy_{t}_{rep}"))
                load = os.getloadavg()[0]  # the machine may be shared: say how busy it was
                print(
                    f"repeat {rep} threads {t}: alone {alone[t][-1]:.1f} s, beside a busy loop {busy[t][-1]:.1f} s "
                    f"(1-min load average after: {load:.1f})"
                )
    print(f"\n{cpu_model()}, {args.sft_steps} SFT steps, {args.repeats} repeats\n")
    rows = []
    for t in counts:
        ratio = [b / a for a, b in zip(alone[t], busy[t])]
        rows.append([str(t), mean_std(alone[t]) + " s", mean_std(busy[t]) + " s", mean_std(ratio, "{:.2f}") + "×"])
    print(markdown_table(["threads", "SFT alone", "SFT beside a busy loop", "slowdown"], rows))


if __name__ == "__main__":
    main()
