"""The cost of ``deterministic: true``: one forward and backward pass of the embedded default model (16 sequences of
96 tokens, a log-prob loss picked by advanced indexing, as the policy update does) with torch's deterministic
algorithms on and off, interleaved, at 1 and 2 threads.

    .venv/bin/python benchmarks/deterministic_cost.py [--repeats 8]

Prints, per thread count, the median pass time each way, their ratio, and whether the gradients are identical.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from polyrl.device import HOST
from polyrl.policy.loading import ModelConfig, load_policy


def gradient(model, ids: torch.Tensor) -> torch.Tensor:
    model.zero_grad()
    logp = torch.log_softmax(model(ids).logits[:, :-1].float(), -1)
    n, length = ids.shape[0], ids.shape[1] - 1
    rows, cols = torch.arange(n).repeat_interleave(length), torch.arange(length).repeat(n)
    (-logp[rows, cols, ids[:, 1:].reshape(-1)].mean()).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args()
    model = load_policy(ModelConfig(), seed=0, device=HOST).model
    ids = torch.randint(5, 100, (16, 96), generator=torch.Generator().manual_seed(0))
    for threads in (1, 2):
        torch.set_num_threads(threads)
        times, grads = {True: [], False: []}, {}
        for _ in range(args.repeats):
            for on in (True, False):
                torch.use_deterministic_algorithms(on, warn_only=True)
                t0 = time.perf_counter()
                grads.setdefault(on, gradient(model, ids))
                times[on].append(time.perf_counter() - t0)
        on, off = statistics.median(times[True]), statistics.median(times[False])
        same = torch.equal(grads[True], grads[False])
        print(
            f"threads={threads}: {1000 * on:.0f} ms deterministic, {1000 * off:.0f} ms not, ratio {on / off:.2f}; "
            f"same gradients: {same}"
        )


if __name__ == "__main__":
    main()
