"""What opting a reward function in to isolation costs: the same function called in the trainer's process
(polyrl's reward-term path, under ``reward.term_timeout``) and as an ``IsolatedReward`` in the verifier worker
pool (one pool round trip per batch, the pool's time and memory limits), per call, for a few batch sizes.

    cd benchmarks && PYTHONPATH=../src:. python reward_isolation.py [--repeats 5]

Prints a Markdown table for docs/rewards.md.
"""

from __future__ import annotations

import argparse
import time

from machine import cpu_model, markdown_table

from polyrl.rewards.callables import call_limited, checked_value
from polyrl.tasks import get_task
from polyrl.tasks.isolation import IsolatedReward, verifier_pool


def brevity(problem, response: str) -> float:
    """A typical user reward: shorter responses score higher (module level, so the workers can import it)."""
    return max(0.0, 1.0 - len(response) / 200)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="Timed repeats per batch size (the fastest is kept).")
    args = parser.parse_args()
    task = get_task("addition")
    problems = [task.generate(seed, "easy") for seed in range(256)]
    responses = [f"The sum is <answer>{p.answer}</answer>." for p in problems]
    isolated = IsolatedReward(brevity)
    verifier_pool()  # started before timing
    isolated.scores(problems[:4], responses[:4])
    rows = []
    for batch in (1, 16, 256):
        ps, rs = problems[:batch], responses[:batch]
        local, pooled = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for p, r in zip(ps, rs):
                checked_value(call_limited(lambda p=p, r=r: brevity(p, r), 10.0)[0])
            local.append((time.perf_counter() - t0) / batch)
            t0 = time.perf_counter()
            isolated.scores(ps, rs)
            pooled.append((time.perf_counter() - t0) / batch)
        lo, po = min(local), min(pooled)
        rows.append([str(batch), f"{lo * 1e6:.1f}", f"{po * 1e6:.1f}", f"{po / lo:.0f}×"])
    print(f"Machine: {cpu_model()}")
    print(markdown_table(["batch", "in process µs/call", "isolated µs/call", "isolated / in process"], rows))


if __name__ == "__main__":
    main()
