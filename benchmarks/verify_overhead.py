"""What verification costs: hostile 200 KB responses on every task, and isolated vs in-process verify calls.

(a) For every built-in task (and ``--rg`` datasets), the slowest of several 200 KB adversarial response
shapes: unclosed answer tags, thousands of answer tags, a maximal answer of junk, deep parentheses.
(b) Per-verify time of the same calls run in this process and in the isolated worker pool, batched
(one pool round trip per batch), for a few batch sizes.

    PYTHONPATH=src python benchmarks/verify_overhead.py            # ~1 minute on 2 CPU cores
    PYTHONPATH=src python benchmarks/verify_overhead.py --rg puzzle24 countdown

Prints Markdown tables for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import time

from machine import cpu_model, markdown_table

from polyrl.tasks import get_task, list_tasks
from polyrl.tasks.answers import MAX_ANSWER_CHARS, MAX_RESPONSE_CHARS
from polyrl.tasks.isolation import verifier_pool

SIZE = MAX_RESPONSE_CHARS  # the longest response that is still searched for an answer


def _pad(text: str) -> str:
    return ("x" * (SIZE - len(text))) + text


def adversarial_responses() -> dict[str, str]:
    """200 KB responses, each aimed at a different part of extraction and parsing."""
    inner = MAX_ANSWER_CHARS - 1
    return {
        "unclosed tags": ("<answer>" * (SIZE // 8))[:SIZE],
        "many answers": ("<answer>1</answer>" * (SIZE // 18))[:SIZE],
        "junk answer": _pad("<answer>" + ("1 a=" * (inner // 4)) + "</answer>"),
        "digit answer": _pad("<answer>" + ("9" * inner) + "</answer>"),
        "deep parens": _pad("<answer>" + "(" * (inner // 2) + "1" + ")" * (inner // 2) + "</answer>"),
        "many rows": _pad("<answer>" + ("1 2/" * (inner // 4)) + "</answer>"),
    }


def _time(fn, repeats: int, *args) -> float:
    """The fastest of ``repeats`` runs of ``fn(*args)``, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - start)
    return best


def adversarial_table(names: list[str], repeats: int) -> str:
    responses = adversarial_responses()
    rows = []
    for name in names:
        task = get_task(name)
        problem = task.generate(0, "hard")
        times = {shape: _time(task.verify, repeats, problem, r) for shape, r in responses.items()}
        worst = max(times, key=times.get)
        rows.append([name, worst, f"{times[worst] * 1e3:.2f}", f"{sum(times.values()) / len(times) * 1e3:.2f}"])
    rows.sort(key=lambda r: -float(r[2]))
    return markdown_table(["task", "slowest shape", "slowest (ms)", "mean over shapes (ms)"], rows)


def _verify_in_process(calls) -> list:
    return [task.verify_in_process(problem, response) for task, problem, response in calls]


def overhead_table(names: list[str], batch_sizes: list[int], repeats: int) -> str:
    pool = verifier_pool()
    rows = []
    for batch in batch_sizes:
        calls = []
        for i in range(batch):
            task = get_task(names[i % len(names)])
            problem = task.generate(i, "easy")
            calls.append((task, problem, task.reference_response(problem) or "<answer>0</answer>"))
        pool.verify(calls[:2])  # workers started and tasks loaded before timing
        here = _time(_verify_in_process, repeats, calls) / batch
        isolated = _time(pool.verify, repeats, calls) / batch
        rows.append([str(batch), f"{here * 1e6:.0f}", f"{isolated * 1e6:.0f}", f"{(isolated - here) * 1e6:.0f}"])
    return markdown_table(["batch", "in-process (µs/verify)", "isolated (µs/verify)", "overhead (µs/verify)"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rg", nargs="*", default=[], help="reasoning-gym datasets to include (names without rg/)")
    parser.add_argument("--batches", nargs="*", type=int, default=[1, 16, 256], help="batch sizes for (b)")
    parser.add_argument("--repeats", type=int, default=3, help="timings per figure (the fastest is kept)")
    args = parser.parse_args()
    builtin = [cls.name for cls in list_tasks()]
    rg = [f"rg/{n}" for n in args.rg]
    print(f"CPU: {cpu_model()}; workers: {verifier_pool().limits.workers}\n")
    print("(a) 200 KB adversarial responses, time per verify\n")
    print(adversarial_table(builtin + rg, args.repeats))
    print("\n(b) per-verify time, in-process vs isolated (built-in tasks, round-robin)\n")
    print(overhead_table(builtin, args.batches, args.repeats))
    if rg:
        print(f"\n(b) per-verify time, in-process vs isolated ({', '.join(rg)})\n")
        print(overhead_table(rg, args.batches, args.repeats))


if __name__ == "__main__":
    main()
