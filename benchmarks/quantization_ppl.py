"""What the preset's 4-bit file costs, measured offline: perplexity of the dequantized model on plain prose,
then of the same weights rounded once more in a GGUF block format.

The shipped file stores the 210 linear matrices in Q4_1 (4-bit, a scale and a minimum per block of 32) and the
tied embedding in Q8_0 (8-bit, a scale per block of 32). The original bf16 release is not on this machine, so
the loss from bf16 to that file cannot be measured directly. What can: how much one more rounding costs.
Rounding again in the file's own formats is a check (the weights already lie on that grid: no change); all in
Q8_0 is what 8-bit storage would cost; the linears in Q4_1 on blocks shifted by 16 values (a grid the weights do
not lie on) is a fresh 4-bit rounding of this model, the best available estimate of what the file's own cost.

    python benchmarks/quantization_ppl.py --model smollm2-135m-instruct --text docs/training.md --tokens 1024
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import torch

from polyrl.device import HOST


def rounded(weight: torch.Tensor, kind, shift: int = 0) -> torch.Tensor:
    """``weight`` quantized to the GGUF block format ``kind`` and back, its blocks of 32 values along each row
    starting ``shift`` values later than the file's."""
    from gguf import quants

    data = np.roll(weight.detach().float().numpy(), -shift, axis=1)
    back = quants.dequantize(quants.quantize(data, kind), kind).reshape(data.shape)
    return torch.from_numpy(np.roll(back, shift, axis=1).astype(np.float32))


def perplexity(model, ids: torch.Tensor, window: int) -> float:
    """exp(mean next-token negative log-likelihood) over consecutive windows of ``window`` tokens."""
    nll, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, ids.numel() - 1, window):
            chunk = ids[start : start + window + 1].unsqueeze(0)
            if chunk.shape[1] < 2:
                break
            logits = model(chunk[:, :-1]).logits.float()
            loss = torch.nn.functional.cross_entropy(logits[0], chunk[0, 1:], reduction="sum")
            nll, count = nll + loss.item(), count + chunk.shape[1] - 1
    return math.exp(nll / count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct", help="Preset, .gguf file or HF directory.")
    parser.add_argument("--text", default="docs/training.md", help="Plain text to score.")
    parser.add_argument("--tokens", type=int, default=1024, help="Tokens of --text to score (from its start).")
    parser.add_argument("--window", type=int, default=512, help="Tokens per forward pass.")
    args = parser.parse_args()
    from gguf import GGMLQuantizationType as Q

    from polyrl.policy.loading import ModelConfig, load_policy

    torch.set_num_threads(1)
    policy = load_policy(ModelConfig(path=args.model), device=HOST)
    model = policy.model.eval()
    ids = policy.tokenizer(Path(args.text).read_text(), return_tensors="pt").input_ids[0][: args.tokens + 1]
    matrices = {n: p for n, p in model.named_parameters() if p.dim() == 2}  # every linear and the (tied) embedding
    original = {n: p.detach().clone() for n, p in matrices.items()}
    embedding = model.get_input_embeddings().weight
    schemes = {  # name -> (format of the embedding, format of the linears, block shift)
        "rounded again as in the file (embedding Q8_0, linears Q4_1)": (Q.Q8_0, Q.Q4_1, 0),
        "all rounded to Q8_0 (8-bit)": (Q.Q8_0, Q.Q8_0, 0),
        "linears rounded to Q4_1 on blocks shifted by 16 (a fresh 4-bit rounding)": (None, Q.Q4_1, 16),
        "linears rounded to Q4_0 (4-bit, no minimum)": (None, Q.Q4_0, 0),
    }
    print(f"{args.model}: {ids.numel() - 1} tokens of {args.text}, windows of {args.window}, one torch thread")
    print("| weights | perplexity | vs dequantized |")
    print("| --- | --- | --- |")
    base = perplexity(model, ids, args.window)
    print(f"| dequantized file (what polyrl trains) | {base:.3f} | — |")
    for label, (embedding_kind, linear_kind, shift) in schemes.items():
        with torch.no_grad():
            for name, param in matrices.items():
                kind = embedding_kind if param is embedding else linear_kind
                param.copy_(original[name] if kind is None else rounded(original[name], kind, shift))
        value = perplexity(model, ids, args.window)
        print(f"| {label} | {value:.3f} | {100 * (value / base - 1):+.2f}% |")
    with torch.no_grad():
        for name, param in matrices.items():
            param.copy_(original[name])


if __name__ == "__main__":
    main()
