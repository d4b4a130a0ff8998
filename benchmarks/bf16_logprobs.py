"""How far polyrl's bf16 log-probs are from float32, beside Hugging Face's own forward under ``torch.autocast``.

polyrl runs a real model's forwards under bf16 autocast (``model.autocast``): its generation (a cached decode of its
own) and its training forward (a packed forward of its own) both compute bf16 matmuls over float32 weights. TRL on a
CPU runs the model's Hugging Face forward under the same autocast. This benchmark asks whether polyrl's own forwards
lose more precision than that: it samples ``--group-size`` completions of ``--problems`` problems per task of the
config with polyrl's generation backend (bf16, temperature as configured, no nucleus), then scores every completion
token four ways:

- polyrl's behaviour log-probs (what generation recorded while sampling; bf16 decode on the KV cache),
- polyrl's training forward (``polyrl.forward.sequence_logprobs``, bf16 autocast, the run's ``share_prompts``),
- the Hugging Face forward of the same model under ``torch.autocast(bfloat16)`` (TRL's numbers on a CPU),
- the Hugging Face forward in float32 (the reference),

and prints, per task, the mean absolute and mean signed difference to float32 (nats per token) and the largest one,
and polyrl's behaviour − training difference, which the update corrects with truncated importance sampling
(``ray.tis_cap``). Equal columns mean polyrl's bf16 numbers are as close to float32 as TRL's. Then the gradient of
one policy-gradient loss on those completions (advantages ±1 by a fixed draw, token-mean): through polyrl's bf16
training forward and through the Hugging Face forward under autocast, each against the float32 gradient (cosine,
relative error, norm ratio) — what an update moves the weights along.

    python benchmarks/bf16_logprobs.py --model smollm2-135m-instruct          # configs/smollm2.yaml's tasks
    python benchmarks/bf16_logprobs.py                                      # the embedded tiny model

Figures and the machine they came from: docs/benchmarks.md ("bf16 log-probs against float32").
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from machine import machine, markdown_table  # benchmarks/machine.py (scripts run from benchmarks/)

from polyrl.cli.train import default_config_path
from polyrl.forward import TokenBatch, collate, sequence_logprobs
from polyrl.train.config import load_config
from polyrl.train.trainer import Trainer

REAL_MODEL_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "smollm2.yaml"
COLUMNS = ("behaviour", "training", "hf_autocast")
"""The three bf16 scorings held against float32, in the table's order."""
HF_CHUNK_ROWS = 8
"""Rows per Hugging Face forward: full-vocabulary logits of 8 rows stay under ~0.2 GB for a 49k vocabulary."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny", help="tiny (default config) or a model path/Hub id/preset.")
    parser.add_argument("--problems", type=int, default=6, help="Problems per task (default 6).")
    parser.add_argument("--group-size", type=int, default=4, help="Completions per problem (default 4).")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="Longest completion (default 32).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the problems and the sampling (default 0).")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1).")
    parser.add_argument("--no-gradients", action="store_true", help="Skip the gradient comparison.")
    parser.add_argument("--markdown", action="store_true", help="Print a markdown table.")
    parser.add_argument("--json", help="Also write the figures to this file.")
    args = parser.parse_args(argv)
    for name in ("problems", "group_size", "max_new_tokens", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    return args


def build(args, run_dir: Path) -> Trainer:
    """The run's parts (policy under bf16 autocast, backend, prompts, tasks) from the config; nothing trains."""
    overrides = [
        f"run_dir={run_dir}",
        f"seed={args.seed}",
        "tensorboard=false",
        "progress=false",
        f"threads={args.threads}",
        "model.autocast=bf16",
    ]
    if args.model == "tiny":
        return Trainer(load_config(default_config_path(), overrides))
    return Trainer(load_config(REAL_MODEL_CONFIG, [*overrides, f"model.path={args.model}"]))


def sample(trainer: Trainer, args) -> list[tuple[str, object]]:
    """``(task, generation)`` for ``--group-size`` completions of ``--problems`` train-split problems per task."""
    parts, cfg = trainer.parts, trainer.config
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    rows = []
    for name in parts.mix.tasks:
        problems = [
            parts.mix.tasks[name].generate(int(rng.integers(2**62)), parts.mix.difficulty(name), split="train")
            for _ in range(args.problems)
        ]
        ids = [parts.prompts.ids(p) for p in problems for _ in range(args.group_size)]
        gens = parts.backend.generate(
            ids, max_new_tokens=args.max_new_tokens, temperature=cfg.rl.temperature, top_p=1.0
        )
        rows += [(name, g) for g in gens]
    return rows


def completions_batch(trainer: Trainer, rows) -> TokenBatch:
    """The sampled completions with their prompts, one token batch on the policy's device."""
    pad = trainer.parts.policy.tokenizer.pad_token_id
    return collate([(g.prompt_ids, g.completion_ids) for _, g in rows], pad).to(trainer.parts.policy.device)


def hf_chunk_logprobs(model, batch: TokenBatch, temperature: float, autocast: bool):
    """``(first row, log-probs [rows, L-1])`` of the batch's next tokens from the model's own Hugging Face forward,
    :data:`HF_CHUNK_ROWS` rows at a time, under bf16 autocast or in the weights' float32; with autograd as the
    caller has it (a caller that backpropagates each chunk holds one chunk's logits at a time)."""
    for start in range(0, len(batch.input_ids), HF_CHUNK_ROWS):
        ids = batch.input_ids[start : start + HF_CHUNK_ROWS]
        mask = batch.attention_mask[start : start + HF_CHUNK_ROWS]
        with torch.autocast(batch.device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=ids, attention_mask=mask).logits
        logp = torch.log_softmax(logits[:, :-1].float() / temperature, -1)
        yield start, logp.gather(-1, ids[:, 1:, None]).squeeze(-1)


def scored(trainer: Trainer, rows, batch: TokenBatch) -> dict[str, torch.Tensor]:
    """Every completion token's log-prob under each scoring, ``[N, L-1]`` each, and the completion-token mask (on
    the host)."""
    model, temperature = trainer.parts.policy.model, trainer.config.rl.temperature
    behaviour = torch.zeros(batch.loss_mask.shape)
    for i, (_, g) in enumerate(rows):
        start = len(g.prompt_ids) - 1
        behaviour[i, start : start + len(g.completion_ids)] = torch.tensor(g.logprobs)
    with torch.no_grad():
        training = sequence_logprobs(model, batch, temperature, share_prompts=trainer.config.rl.share_prompts)
        training = training[0] if isinstance(training, tuple) else training
        hf = {
            name: torch.cat([logp for _, logp in hf_chunk_logprobs(model, batch, temperature, autocast)])
            for name, autocast in (("fp32", False), ("hf_autocast", True))
        }
    return {
        "behaviour": behaviour,
        "training": training.float().cpu(),
        "hf_autocast": hf["hf_autocast"].cpu(),
        "fp32": hf["fp32"].cpu(),
        "mask": batch.loss_mask.bool().cpu(),
    }


def differences(scores: dict[str, torch.Tensor], rows, tasks: list[str]) -> dict[str, dict]:
    """Per task (and ``all``): tokens, and for each bf16 scoring its mean |Δ|, mean Δ and max |Δ| to float32, and
    polyrl's behaviour − training."""
    out = {}
    for task in [*tasks, "all"]:
        keep = torch.tensor([task in ("all", name) for name, _ in rows])
        mask = scores["mask"][keep]
        out[task] = {"tokens": int(mask.sum()), **{c: _diff(scores, c, "fp32", keep, mask) for c in COLUMNS}}
        out[task]["behaviour_vs_training"] = _diff(scores, "behaviour", "training", keep, mask)
    return out


def _diff(scores: dict[str, torch.Tensor], a: str, b: str, keep: torch.Tensor, mask: torch.Tensor) -> dict:
    d = (scores[a][keep] - scores[b][keep])[mask]
    return {"mean_abs": float(d.abs().mean()), "mean": float(d.mean()), "max_abs": float(d.abs().max())}


def gradients(trainer: Trainer, batch: TokenBatch, seed: int) -> dict[str, dict]:
    """The gradient of ``-sum(A * log p) / tokens`` over the completion tokens (``A`` = ±1 per completion, drawn with
    ``seed``) through polyrl's bf16 training forward and the Hugging Face forward under autocast, each held against
    the float32 gradient: ``cosine``, ``relative_error`` (|g - g32| / |g32|) and ``norm_ratio`` (|g| / |g32|)."""
    model = trainer.parts.policy.model
    signs = (torch.rand(len(batch), generator=torch.Generator().manual_seed(seed)) < 0.5).float() * 2 - 1
    weights = signs.to(batch.device)[:, None] * batch.loss_mask / batch.loss_mask.sum()
    was_training = model.training
    model.train()
    try:
        grads = {
            name: _gradient(model, batch, weights, trainer.config, name)
            for name in ("fp32", "training", "hf_autocast")
        }
    finally:
        model.train(was_training)
        model.zero_grad(set_to_none=True)
    reference = grads.pop("fp32")
    return {name: _against(g, reference) for name, g in grads.items()}


def _gradient(model, batch: TokenBatch, weights: torch.Tensor, cfg, name: str) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    if name == "training":
        logp = sequence_logprobs(model, batch, cfg.rl.temperature, share_prompts=cfg.rl.share_prompts)
        (-((logp[0] if isinstance(logp, tuple) else logp) * weights).sum()).backward()
    else:  # one chunk's logits and their gradient at a time
        for start, logp in hf_chunk_logprobs(model, batch, cfg.rl.temperature, autocast=name == "hf_autocast"):
            (-(logp * weights[start : start + len(logp)]).sum()).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).float()


def _against(g: torch.Tensor, reference: torch.Tensor) -> dict:
    """Cosine, relative error and norm ratio of ``g`` to ``reference``, summed in float64 a slice at a time."""
    dot = err = norm = ref = 0.0
    for start in range(0, len(g), 1 << 24):
        a, b = g[start : start + (1 << 24)].double(), reference[start : start + (1 << 24)].double()
        dot, err = dot + float(a @ b), err + float((a - b).square().sum())
        norm, ref = norm + float(a.square().sum()), ref + float(b.square().sum())
    return {
        "cosine": dot / (norm * ref) ** 0.5,
        "relative_error": (err / ref) ** 0.5,
        "norm_ratio": (norm / ref) ** 0.5,
    }


def table(figures: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    header = [
        "task",
        "tokens",
        "polyrl generation − fp32",
        "polyrl training − fp32",
        "HF autocast (TRL) − fp32",
        "polyrl generation − training",
    ]

    def cell(d: dict) -> str:
        return f"{d['mean_abs']:.4f} ({d['mean']:+.4f}; max {d['max_abs']:.3f})"

    rows = [
        [task, str(f["tokens"]), *(cell(f[c]) for c in COLUMNS), cell(f["behaviour_vs_training"])]
        for task, f in figures.items()
    ]
    return header, rows


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as work:
        trainer = build(args, Path(work) / "run")
        rows = sample(trainer, args)
        batch = completions_batch(trainer, rows)
        figures = differences(scored(trainer, rows, batch), rows, list(trainer.parts.mix.tasks))
        grads = None if args.no_gradients else gradients(trainer, batch, args.seed)
        trainer.parts.run_dir.close()
    header, body = table(figures)
    print(
        f"{machine()}, torch {torch.__version__}; model {args.model}; {args.problems} problems × {args.group_size} "
        f"completions per task, seed {args.seed}. Per completion token, nats: mean |Δ| (mean Δ; max |Δ|)."
    )
    if args.markdown:
        print(markdown_table(header, body))
    else:
        for row in [header, *body]:
            print(" | ".join(row))
    if grads is not None:
        print("Gradient of one policy-gradient loss on these completions, against float32's:")
        for name, label in (("training", "polyrl training (bf16)"), ("hf_autocast", "HF autocast (TRL)")):
            g = grads[name]
            print(
                f"  {label}: cosine {g['cosine']:.4f}, relative error {g['relative_error']:.3f}, "
                f"norm ratio {g['norm_ratio']:.3f}"
            )
    result = {"machine": machine(), "torch": torch.__version__, "args": vars(args), "figures": figures}
    result["gradients"] = grads
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
