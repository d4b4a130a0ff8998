"""From which model width bf16 autocast makes an RL step faster on this CPU (the rule behind ``model.autocast:
auto``, ``polyrl.forward.precision.AUTO_BF16_MIN_WIDTH``).

    .venv/bin/python benchmarks/bf16_crossover.py [--widths 128,256,384,512,768] [--layers 4] [--prompts 2]
                                                  [--group-size 8] [--max-new-tokens 32] [--repeats 3] [--markdown]

For each width, the embedded tiny Llama built at that hidden size (MLP 3× wider, ``--layers`` blocks, heads of
64), one RL step's phases (``benchmarks/roofline.py``: prefill, decode, old log-probs, forward+backward,
optimizer) in fp32 and under bf16 autocast, on the same problems, fastest of ``--repeats``; the speedup is
the fp32 step time over the bf16 one. The tiny model's vocabulary is ~100 characters, so the ``lm_head`` is
negligible here: a real model's large vocabulary only adds matmul work that bf16 speeds up.
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from machine import cpu_model, markdown_table
from roofline import load_trainer, phases, rl_batch

from polyrl.forward.precision import bf16_cpu_flags, set_autocast


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--widths", default="128,256,384,512,768")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--micro-batch-tokens", type=int, default=256, help="Budget for the padding figures.")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{cpu_model()}, {args.threads} thread(s); bf16 flags: {', '.join(sorted(bf16_cpu_flags())) or 'none'}")
    header = ["width", "params (M)", "fp32 step (ms)", "bf16 step (ms)", "speedup", "decode", "fwd+bwd"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for width in [int(w) for w in args.widths.split(",")]:
            shape = [
                f"model.tiny.hidden_size={width}",
                f"model.tiny.intermediate_size={3 * width}",
                f"model.tiny.num_layers={args.layers}",
                f"model.tiny.num_heads={max(1, width // 64)}",
                "model.autocast=none",
            ]
            trainer = load_trainer("tiny", args, f"{tmp}/{width}", shape)
            flat = rl_batch(trainer, args.prompts, args.group_size)
            times = {}
            for mode in ("none", "bf16"):
                set_autocast(trainer.parts.policy.model, mode)
                times[mode] = {name: t for name, (t, _, _) in phases(trainer, flat, args).items()}
            trainer.parts.run_dir.close()
            step = {mode: sum(t.values()) for mode, t in times.items()}
            params = sum(p.numel() for p in trainer.parts.policy.model.parameters()) / 1e6
            rows.append(
                [
                    str(width),
                    f"{params:.1f}",
                    f"{step['none'] * 1e3:,.0f}",
                    f"{step['bf16'] * 1e3:,.0f}",
                    f"{step['none'] / step['bf16']:.2f}×",
                    f"{times['none']['decode'] / times['bf16']['decode']:.2f}×",
                    f"{times['none']['fwd+bwd'] / times['bf16']['fwd+bwd']:.2f}×",
                ]
            )
            print("  ".join(rows[-1]), flush=True)
    if args.markdown:
        print(markdown_table(header, rows))


if __name__ == "__main__":
    main()
