"""Kernels per decode step, counted on the CPU: the modules' step against the fused one CUDA runs (issue #42).

    .venv/bin/python benchmarks/decode_kernels.py [--shape smollm2-135m] [--rows 256] [--prompt 128] [--new 128]

On a GPU a decode step of a small model costs what launching its kernels costs (2-4 µs each, inside a CUDA graph
too), so their number is the step's price. A dispatch mode counts the aten ops of one step — each one kernel on CUDA,
views and other metadata-only ops (``view``, ``transpose``, ``expand``, ``slice``, ``detach``…) not counted — for the
modules' step (``policy/packed_decode.py: static_decode_step`` and ``lm_head``: what CUDA ran before, and what the CPU
runs) and the fused step (``policy/fused_decode.py``: what the decode graphs capture on CUDA now), in float32 and
under bf16 autocast (the training configuration on a GPU for a model at least 384 wide). The model is the shape's
config with random weights (``benchmarks/gpu/``); ``--rows`` rows of ``--prompt``-token prompts, the cache
``--prompt + --new`` columns wide (the count does not depend on either).

A count at this level does not see what a kernel does inside: on CUDA under torch's deterministic mode each
``index_copy_`` of the modules' step ran as a sorted ``index_put_`` (about ten kernels), which the fused step's write
avoids (``write_column``); that is on top of the counts here.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import torch
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

HERE = Path(__file__).resolve().parent
_NO_KERNEL = {"aten.detach.default", "aten.alias.default", "aten.lift_fresh.default"}


class KernelCount(TorchDispatchMode):
    """The aten ops run inside it, views and metadata-only ops left out. ``torch.nn.functional.rms_norm`` counts
    once: on CUDA it is one kernel (``_fused_rms_norm``), on the CPU it decomposes into six."""

    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()
        self.inside = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.inside and not func.is_view and str(func) not in _NO_KERNEL:
            self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        self._rms_norm = F.rms_norm

        def rms_norm(*args, **kwargs):
            self.ops["aten.rms_norm (CUDA: _fused_rms_norm)"] += 1
            self.inside += 1
            try:
                return self._rms_norm(*args, **kwargs)
            finally:
                self.inside -= 1

        F.rms_norm = rms_norm
        return super().__enter__()

    def __exit__(self, *exc):
        F.rms_norm = self._rms_norm
        return super().__exit__(*exc)


def step_kernels(model, tokenizer_pad: int, rows: int, prompt: int, new: int, fused: bool) -> Counter:
    """The ops of one decode step (after the first, outside any graph) of ``rows`` rows."""
    from polyrl.forward.decoder import MODULES, Decoder
    from polyrl.forward.precision import AUTOCAST_DTYPES, autocast_mode, forward_precision
    from polyrl.policy.decode_graphs import DecodeGraphs
    from polyrl.policy.packed_decode import GraphedDecode, prefill_prompts

    dec = Decoder.of(model)
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    unique = [torch.randint(3, vocab, (prompt,), generator=gen).tolist() for _ in range(max(1, rows // 8))]
    source = [i % len(unique) for i in range(rows)]
    dtype = AUTOCAST_DTYPES.get(autocast_mode(model)) or next(model.parameters()).dtype
    device = torch.device("cpu")
    with torch.no_grad(), forward_precision(model, device):
        prompts = prefill_prompts(dec, unique, source, MODULES, device)
        state = GraphedDecode(dec, prompts, new, dtype, DecodeGraphs(capture=False, fused=fused))
        tokens = torch.full((rows,), (tokenizer_pad + 5) % vocab)
        state.step(tokens)  # the first step: what a graph would capture is the same from here on
        with KernelCount() as count:
            state.step(tokens)
    return count.ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="smollm2-135m", help="A config folder of benchmarks/gpu/.")
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument("--out", type=Path, help="Also write the counts here (JSON).")
    args = parser.parse_args()
    from transformers import AutoConfig, AutoModelForCausalLM

    from polyrl.forward.precision import set_autocast

    config = AutoConfig.from_pretrained(HERE / "gpu" / args.shape)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    result = {"shape": args.shape, "layers": config.num_hidden_layers, "rows": args.rows, "torch": torch.__version__}
    lines = ["| precision | modules' step (before) | fused step (CUDA now) |", "|---|---:|---:|"]
    for precision in ("none", "bf16"):
        set_autocast(model, precision)
        counts = {
            name: step_kernels(model, config.pad_token_id or 0, args.rows, args.prompt, args.new, fused)
            for name, fused in (("modules", False), ("fused", True))
        }
        result[precision] = {
            name: {"total": sum(c.values()), "ops": dict(c.most_common())} for name, c in counts.items()
        }
        label = "float32" if precision == "none" else "bf16 autocast"
        lines.append(f"| {label} | {sum(counts['modules'].values())} | {sum(counts['fused'].values())} |")
    print(f"Kernels per decode step, {args.shape} ({config.num_hidden_layers} layers), {args.rows} rows:\n")
    print("\n".join(lines))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
