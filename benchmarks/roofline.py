"""Roofline of one RL step: where the time goes, and how far each phase is from this machine's limit.

    .venv/bin/python benchmarks/roofline.py [--model tiny,/tmp/smollm2] [--autocast none,bf16] [--prompts 2]
                                            [--group-size 8] [--max-new-tokens 32] [--repeats 3] [--markdown]

First the machine's limits, measured by the script itself with one thread: the matmul peak (a 2048² matmul,
fp32 and bf16) and the memory bandwidth (a 256 MiB copy). Then, for each model and autocast mode, the phases
of one RL step on the same problems (the default job's tasks, polyrl's own functions, ``--prompts`` ×
``--group-size`` completions of ≤ ``--max-new-tokens`` tokens), each timed ``--repeats`` times (the fastest
is kept):

- ``prefill``: the distinct prompts through the model once (``TransformersBackend.decode_state``: polyrl's packed
  forward into a static KV cache, or transformers' forward with its cache);
- ``decode``: the rest of ``TransformersBackend.generate`` (sampling token by token with the KV cache);
- ``old logp``: a no-grad ``sequence_logprobs`` of the sampled batch (old / reference log-probs);
- ``fwd+bwd``: ``sequence_logprobs`` with gradients and the backward of their sum (the update's passes);
- ``optimizer``: one step of polyrl's AdamW (``polyrl.optim.make_optimizer``) over every parameter.

FLOPs are counted from the model's shapes (useful work only: real tokens, not padding): 2 per weight of every
``nn.Linear`` in the trunk per token, 2 per ``lm_head`` weight per scored position, 4 × hidden × context per
token and layer for attention; the backward is twice the forward. Decode is also given in bytes/s: every
decode step reads the weights (in the autocast dtype) and the KV cache. The optimizer is memory-bound: AdamW
reads parameter, gradient and two moments and writes three of them (28 bytes per fp32 parameter).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import torch
from machine import cpu_model, markdown_table
from torch import nn

from polyrl.cli.train import default_config_path
from polyrl.forward.batch import collate, distinct, length_ordered, pack_rows, padding_share
from polyrl.forward.decoder import Decoder, set_forward
from polyrl.forward.logprobs import sequence_logprobs
from polyrl.forward.precision import autocast_mode, bf16_cpu_flags, forward_precision, set_autocast
from polyrl.optim import make_optimizer
from polyrl.train.config import load_config
from polyrl.train.trainer import Trainer


def best_time(fn, repeats: int) -> float:
    """The fastest of ``repeats`` calls of ``fn``, in CPU seconds of this process: with one thread that is the
    compute time, which other jobs on a shared machine disturb far less than the wall time."""
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def matmul_peak(dtype: torch.dtype, n: int = 2048, repeats: int = 5) -> float:
    """FLOP/s of an ``n × n`` matmul in ``dtype``."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    a @ b  # warm-up (oneDNN picks its kernel)
    return 2 * n**3 / best_time(lambda: a @ b, repeats)


def memory_bandwidth(mib: int = 256, repeats: int = 5) -> float:
    """Bytes/s of a ``mib`` MiB tensor copy (read + write)."""
    src = torch.ones(mib * 2**20 // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)
    return 2 * src.numel() * 4 / best_time(lambda: dst.copy_(src), repeats)


class Shape:
    """The numbers FLOP and byte counts need, read off a Hugging Face causal LM."""

    def __init__(self, model):
        decoder = model.get_decoder()
        head = model.get_output_embeddings()
        self.linear = sum(m.weight.numel() for m in decoder.modules() if isinstance(m, nn.Linear))
        self.head = head.weight.numel()
        self.params = sum(p.numel() for p in model.parameters())
        cfg = model.config
        self.layers, self.hidden = cfg.num_hidden_layers, cfg.hidden_size
        heads = cfg.num_attention_heads
        self.kv_width = getattr(cfg, "num_key_value_heads", heads) * (
            getattr(cfg, "head_dim", None) or self.hidden // heads
        )

    def forward_flops(self, tokens: int, context: int, scored: int) -> float:
        """FLOPs of a forward over ``tokens`` tokens attending to ``context`` (query, key) pairs in all, with
        ``scored`` positions through ``lm_head``."""
        return 2 * self.linear * tokens + 4 * self.hidden * self.layers * context + 2 * self.head * scored


def rl_batch(trainer: Trainer, prompts: int, group_size: int) -> list[list[int]]:
    """``prompts`` training problems of the job's tasks, each prompt repeated ``group_size`` times."""
    problems = trainer.parts.sampler.draw(
        prompts, np.random.default_rng(0), trainer.parts.mix.tasks, trainer.parts.mix.difficulty
    )
    return [trainer.parts.prompts.ids(p) for p in problems for _ in range(group_size)]


def phases(trainer: Trainer, flat: list[list[int]], args) -> dict[str, tuple[float, float, float | None]]:
    """``phase -> (seconds, FLOPs, bytes or None)`` of one RL step on the prompts ``flat``."""
    model, tok = trainer.parts.policy.model, trainer.parts.policy.tokenizer
    shape, backend = Shape(model), trainer.parts.backend
    out = {}
    unique, source = distinct(flat)
    with torch.no_grad(), forward_precision(model):  # the generation's prefill: packed or transformers' forward
        pre = best_time(lambda: backend.decode_state(flat, args.max_new_tokens), args.repeats)
    p_tokens = sum(len(u) for u in unique)
    out["prefill"] = (pre, shape.forward_flops(p_tokens, sum(len(u) ** 2 // 2 for u in unique), len(unique)), None)

    def generate():
        torch.manual_seed(0)
        return backend.generate(flat, max_new_tokens=args.max_new_tokens, temperature=1.0)

    gens = generate()
    gen_time = best_time(generate, args.repeats)
    new = [len(g.completion_ids) for g in gens]
    steps = max(new)
    context = sum(len(p) * n + n * (n + 1) // 2 for p, n in zip(flat, new))
    width = 2 if autocast_mode(model) == "bf16" else 4
    weight_bytes, kv_bytes = (shape.linear + shape.head) * width, 2 * shape.layers * shape.kv_width * context * width
    out["decode"] = (
        max(gen_time - pre, 1e-9),
        shape.forward_flops(sum(new), context, sum(new)),
        steps * weight_bytes + kv_bytes,
    )

    batch = collate([(g.prompt_ids, g.completion_ids) for g in gens], tok.pad_token_id)
    r_tokens = sum(new)
    # what the update's forward computes: packed, the real tokens; on transformers' shared-prompt forward,
    # distinct prompts padded to the longest, responses too
    packed = Decoder.of(model) is not None
    computed = p_tokens + r_tokens if packed else len(unique) * max(map(len, unique)) + len(gens) * steps
    padding = lambda n: 1 - (p_tokens + r_tokens) / n
    print(
        f"  update forward: {p_tokens + r_tokens} real tokens, {computed} computed ({padding(computed):.0%} padding)"
    )
    lengths, rows, groups = batch.attention_mask.sum(1), torch.arange(len(gens)), torch.tensor(source)
    budget = args.micro_batch_tokens
    before = padding_share(pack_rows(rows[torch.argsort(groups, stable=True)], lengths, budget), lengths)
    after = padding_share(pack_rows(length_ordered(rows, lengths, groups), lengths, budget), lengths)
    print(f"  micro-batches of {budget} tokens: {before:.0%} padding in group order, {after:.0%} in length order")
    pass_flops = shape.forward_flops(p_tokens + r_tokens, context, r_tokens)

    def old_logp():
        with torch.no_grad():
            sequence_logprobs(model, batch, 1.0)

    out["old logp"] = (best_time(old_logp, args.repeats), pass_flops, None)

    def fwd_bwd():
        model.zero_grad(set_to_none=True)
        logp, _ = sequence_logprobs(model, batch, 1.0, entropy=True)
        (logp * batch.loss_mask).sum().backward()

    out["fwd+bwd"] = (best_time(fwd_bwd, args.repeats), 3 * pass_flops, None)
    optimizer, _ = make_optimizer(list(model.parameters()), 1e-12, 0, 1, False, 0.0)  # polyrl's AdamW (fused if large)
    optimizer.step()  # the moments exist from here on
    out["optimizer"] = (best_time(optimizer.step, args.repeats), 0.0, 28 * shape.params)
    return out


def load_trainer(model_path: str, args, run_dir: str, extra: list[str] = ()) -> Trainer:
    """A Trainer of the default job on ``model_path`` at the benchmark's sizes (config overrides ``extra``)."""
    overrides = [
        *extra,
        f"run_dir={run_dir}",
        f"model.path={model_path}",
        f"threads={args.threads}",
        "tensorboard=false",
        "progress=false",
        f"rl.prompts_per_step={args.prompts}",
        f"rl.group_size={args.group_size}",
        f"rl.max_new_tokens={args.max_new_tokens}",
    ]
    return Trainer(load_config(default_config_path(), overrides))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="Comma-separated model paths ('tiny' or HF directories).")
    parser.add_argument("--autocast", default="none,bf16", help="Comma-separated autocast modes to compare.")
    parser.add_argument(
        "--forward", default="auto", help="Comma-separated model.forward settings to compare (auto,transformers)."
    )
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--micro-batch-tokens", type=int, default=256, help="Budget for the padding figures.")
    parser.add_argument("--markdown", action="store_true", help="Print Markdown tables for docs/benchmarks.md.")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    peak = {"none": matmul_peak(torch.float32), "bf16": matmul_peak(torch.bfloat16)}
    bandwidth = memory_bandwidth()
    flags = ", ".join(sorted(bf16_cpu_flags())) or "none"
    print(f"{cpu_model()}, {os.cpu_count()} cores, {args.threads} thread(s); bf16 flags: {flags}")
    print(
        f"measured: matmul fp32 {peak['none'] / 1e9:,.0f} GFLOP/s, bf16 {peak['bf16'] / 1e9:,.0f} GFLOP/s; "
        f"copy {bandwidth / 1e9:.1f} GB/s"
    )
    header = ["phase", "time (ms)", "share", "GFLOP/s", "of peak", "GB/s", "of bandwidth"]
    with tempfile.TemporaryDirectory() as tmp:
        for path in args.model.split(","):
            trainer = load_trainer(path, args, f"{tmp}/{len(os.listdir(tmp))}")
            flat = rl_batch(trainer, args.prompts, args.group_size)
            for mode, forward in [(m, f) for f in args.forward.split(",") for m in args.autocast.split(",")]:
                set_autocast(trainer.parts.policy.model, mode)
                set_forward(trainer.parts.policy.model, forward)
                result = phases(trainer, flat, args)
                total = sum(t for t, _, _ in result.values())
                rows = []
                for name, (seconds, flops, nbytes) in result.items():
                    rate = flops / seconds
                    rows.append(
                        [
                            name,
                            f"{seconds * 1e3:,.1f}",
                            f"{seconds / total:.0%}",
                            f"{rate / 1e9:,.1f}" if flops else "-",
                            f"{rate / peak[mode]:.1%}" if flops else "-",
                            f"{nbytes / seconds / 1e9:.2f}" if nbytes else "-",
                            f"{nbytes / seconds / bandwidth:.0%}" if nbytes else "-",
                        ]
                    )
                rows.append(["step", f"{total * 1e3:,.1f}", "100%", "", "", "", ""])
                shape = Shape(trainer.parts.policy.model)
                print(
                    f"\n{path}: {shape.params / 1e6:.1f} M parameters, autocast {mode}, forward {forward}, "
                    f"{len(flat)} completions"
                )
                print(markdown_table(header, rows) if args.markdown else "\n".join("  ".join(r) for r in rows))
            trainer.parts.run_dir.close()


if __name__ == "__main__":
    main()
