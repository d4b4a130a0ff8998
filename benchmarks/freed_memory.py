"""What ``keep_freed_memory`` buys: one RL update's forward+backward, and a large ``zeros``, with glibc's default
allocator and with freed memory kept in the process, each in its own process (the setting is process-wide).

    .venv/bin/python benchmarks/freed_memory.py [--model smollm2-135m-instruct] [--prompts 4] [--group-size 4]
                                                [--max-new-tokens 32] [--repeats 5] [--rounds 2]

Each process loads the model (``keep_freed_memory`` off or on), samples one RL batch (the default job's tasks,
``--prompts`` × ``--group-size`` completions), then times ``--repeats`` forward+backward passes of
``sequence_logprobs`` (CPU seconds; the first, a warm-up, is not counted) and five ``torch.zeros`` of the
model's ``[vocabulary, hidden]`` embedding shape (the tied embedding's gradient). The two settings alternate
for ``--rounds`` rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def measure(args) -> dict:
    import torch
    from roofline import load_trainer, rl_batch

    from polyrl.forward.batch import collate
    from polyrl.forward.logprobs import sequence_logprobs

    with tempfile.TemporaryDirectory() as tmp:
        extra = [f"keep_freed_memory={args.keep}"]
        trainer = load_trainer(args.model, args, f"{tmp}/run", extra)
        model, tok = trainer.parts.policy.model, trainer.parts.policy.tokenizer
        flat = rl_batch(trainer, args.prompts, args.group_size)
        torch.manual_seed(0)
        gens = trainer.parts.backend.generate(flat, max_new_tokens=args.max_new_tokens)
        batch = collate([(g.prompt_ids, g.completion_ids) for g in gens], tok.pad_token_id)
        times = []
        for _ in range(args.repeats):
            model.zero_grad(set_to_none=True)
            start = time.process_time()
            logp, _ = sequence_logprobs(model, batch, 1.0, entropy=True)
            (logp * batch.loss_mask).sum().backward()
            times.append(time.process_time() - start)
        shape = model.get_input_embeddings().weight.shape
        zeros = []
        for _ in range(5):
            start = time.perf_counter()
            block = torch.zeros(shape)
            zeros.append(time.perf_counter() - start)
            del block
        trainer.parts.run_dir.close()
    return {"update_s": times[1:], "zeros_ms": [1e3 * z for z in zeros], "shape": list(shape)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--keep", choices=["true", "false"], help=argparse.SUPPRESS)  # one measuring process
    args = parser.parse_args()
    if args.keep is not None:
        print(json.dumps(measure(args)))
        return
    if args.repeats < 2:
        parser.error("--repeats must be at least 2 (the first pass is a warm-up)")
    results: dict[str, list[dict]] = {"false": [], "true": []}
    for _ in range(args.rounds):
        for keep in ("false", "true"):
            command = [sys.executable, __file__, *sys.argv[1:], f"--keep={keep}"]
            out = subprocess.run(command, capture_output=True, text=True, cwd=HERE)
            if out.returncode:
                raise SystemExit(out.stderr[-3000:])
            results[keep].append(json.loads(out.stdout.strip().splitlines()[-1]))
            last = results[keep][-1]
            print(
                f"keep_freed_memory={keep}: update {last['update_s']} CPU s, zeros {last['zeros_ms']} ms", flush=True
            )
    shape = results["true"][0]["shape"]
    print(f"\n| keep_freed_memory | update fwd+bwd, median CPU s | zeros({shape[0]}, {shape[1]}), median ms |")
    print("|---|---:|---:|")
    for keep in ("false", "true"):
        update = statistics.median(t for r in results[keep] for t in r["update_s"])
        zeros = statistics.median(z for r in results[keep] for z in r["zeros_ms"][1:])
        print(f"| {keep} | {update:.2f} | {zeros:.1f} |")


if __name__ == "__main__":
    main()
