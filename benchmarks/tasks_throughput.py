"""Task throughput on one core: problems generated per second (at medium) and reference responses verified
per second, for every built-in task, side by side with the closest reasoning-gym dataset where one exists.

    .venv/bin/python benchmarks/tasks_throughput.py [--budget 0.5] [--tasks a,b] [--markdown] [--no-rg]

Each figure is measured for ``--budget`` seconds of wall time (at least one call). reasoning-gym is measured
natively (``dataset[i]`` and its own ``score_answer`` on its own answer) at its default config.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from machine import cpu_model  # benchmarks/machine.py (scripts run from benchmarks/)
from rich.console import Console
from rich.table import Table

from polyrl.tasks import get_task, list_tasks

GOAL_GENERATE = 1_000
GOAL_VERIFY = 10_000

#: polyrl task -> the reasoning-gym dataset that poses the same kind of problem.
RG_EQUIVALENT = {
    "addition": "basic_arithmetic",
    "multiplication": "products",
    "sort_digits": "number_sorting",
    "reverse_letters": "spell_backward",
    "reverse_words": "word_sequence_reversal",
    "sudoku": "sudoku",
    "countdown": "countdown",
    "game24": "puzzle24",
    "n_queens": "n_queens",
    "tower_of_hanoi": "tower_of_hanoi",
    "base_conversion": "base_conversion",
    "gcd_lcm": "gcd",
    "knights_knaves": "knights_knaves",
    "maze_path": "maze",
    "shortest_path": "shortest_path",
    "count_islands": "largest_island",
    "graph_coloring": "graph_color",
    "topological_sort": "course_schedule",
    "linear_equation": "simple_equations",
    "caesar": "caesar_cipher",
    "cryptarithm": "cryptarithm",
    "letter_count": "letter_counting",
    "next_term": "number_sequence",
}


def rate(call, budget: float) -> float:
    """Calls per second of ``call(i)`` for i = 0, 1, … over ``budget`` seconds."""
    count, start = 0, time.perf_counter()
    while True:
        call(count)
        count += 1
        elapsed = time.perf_counter() - start
        if elapsed >= budget:
            return count / elapsed


def polyrl_rates(name: str, budget: float) -> tuple[float, float]:
    task = get_task(name)
    generate = rate(lambda i: task.generate(i, "medium"), budget)
    problems = [task.generate(10_000 + i, "medium") for i in range(64)]
    pairs = [(p, task.reference_response(p)) for p in problems if task.reference_response(p) is not None]
    verify = rate(lambda i: task.verify(*pairs[i % len(pairs)]), budget) if pairs else float("nan")
    return generate, verify


def rg_rates(dataset: str, budget: float) -> tuple[float, float]:
    import reasoning_gym

    data = reasoning_gym.create_dataset(dataset, seed=1, size=10**9)
    generate = rate(lambda i: data[i], budget)
    items = [data[10_000 + i] for i in range(64)]
    verify = rate(lambda i: data.score_answer(items[i % 64]["answer"], items[i % 64]), budget)
    return generate, verify


def _fmt(x: float | None) -> str:
    return "-" if x is None else ("n/a" if x != x else f"{x:,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=0.5, help="Seconds per measurement.")
    parser.add_argument("--tasks", default="", help="Comma-separated task names (default: all built-ins).")
    parser.add_argument("--markdown", action="store_true", help="Print a markdown table instead.")
    parser.add_argument("--no-rg", action="store_true", help="Skip the reasoning-gym comparison.")
    args = parser.parse_args()

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as promised in the title
    names = [t for t in args.tasks.split(",") if t] or [c.name for c in list_tasks()]
    rg_names: set[str] = set()
    if not args.no_rg:
        try:
            from reasoning_gym.factory import DATASETS

            rg_names = set(DATASETS)
        except ImportError:
            pass

    header = ["task", "generate/s", "verify/s", "rg dataset", "rg generate/s", "rg verify/s", "misses goal"]
    rows = []
    for name in names:
        gen, ver = polyrl_rates(name, args.budget)
        rg = RG_EQUIVALENT.get(name)
        rg_gen = rg_ver = None
        if rg in rg_names:
            rg_gen, rg_ver = rg_rates(rg, args.budget)
        else:
            rg = None
        misses = [w for w, ok in (("generate", gen >= GOAL_GENERATE), ("verify", ver >= GOAL_VERIFY)) if not ok]
        rows.append([name, _fmt(gen), _fmt(ver), rg or "-", _fmt(rg_gen), _fmt(rg_ver), ", ".join(misses) or "-"])

    machine = f"{cpu_model()}, Python {platform.python_version()}, 1 core"
    if args.markdown:
        print(f"Machine: {machine}; budget {args.budget} s per figure; difficulty medium.\n")
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join(["---"] + ["---:"] * 2 + ["---"] + ["---:"] * 2 + ["---"]) + "|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return
    table = Table(*header, title=f"task throughput ({machine}, medium)")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


if __name__ == "__main__":
    main()
