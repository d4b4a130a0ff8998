"""polyrl's packed forward against transformers' own on a real model and device: the same log-probs, gradients and
greedy tokens (float32), and how long each takes. Exits 1 when they differ beyond the tolerances.

    python benchmarks/packed_check.py [--model smollm2-135m-instruct] [--device cpu|cuda] [--prompts 4]
                                      [--group-size 4] [--max-new-tokens 32] [--out FILE.json]

On the given device, in float32: greedy completions of ``--prompts`` problems of the default job's tasks
(natural prompts through the model's chat template) with ``--group-size`` copies each, from both forwards —
they must be the same tokens; then ``sequence_logprobs`` of those rows with gradients, both ways — log-probs
within 1e-4 and every parameter's gradient within 1e-3 of its largest entry. Times are wall seconds, after one
warm-up of each. ``benchmarks/gpu_check.sh`` runs it on CUDA with ``model.forward: packed``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch
from machine import device_option  # benchmarks/machine.py (scripts run from benchmarks/)

from polyrl.cli.train import default_config_path
from polyrl.forward import collate, sequence_logprobs
from polyrl.forward.decoder import Decoder, set_forward
from polyrl.policy import PromptBuilder, TransformersBackend
from polyrl.policy.loading import load_policy
from polyrl.tasks import resolve_task
from polyrl.train.config import load_config

LOGPROB_TOLERANCE, GRADIENT_TOLERANCE = 1e-4, 1e-3


def timed(fn, device: torch.device):
    fn()  # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present, else the CPU), cpu, cuda, cuda:N.")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", help="Also write the result as JSON here.")
    args = parser.parse_args()
    device = device_option(args.device, "packed_check")
    torch.set_num_threads(args.threads)
    cfg = load_config(
        default_config_path(),
        [f"model.path={args.model}", "model.autocast=none", "prompt.style=natural", f"device={device}"],
    )
    policy = load_policy(cfg.model, device=device)
    model, tok = policy.model, policy.tokenizer
    set_forward(model, "packed")
    if Decoder.of(model) is None:
        raise SystemExit(f"{args.model}: the packed forward does not apply to this model")
    tasks = {
        spec.name: resolve_task(spec.name, env=cfg.env, harness=spec.harness, dataset=spec.dataset)
        for spec in cfg.tasks
    }
    prompts = PromptBuilder(tok, cfg.prompt)
    rng = np.random.default_rng(0)
    names = list(tasks)
    problems = [tasks[names[i % len(names)]].generate(int(rng.integers(2**31)), "easy") for i in range(args.prompts)]
    flat = [prompts.ids(p) for p in problems for _ in range(args.group_size)]
    backend = TransformersBackend(model, tok, device=device)
    result = {"model": args.model, "device": str(device), "rows": len(flat)}
    gens = {}
    for mode in ("packed", "transformers"):
        set_forward(model, mode)
        gens[mode], result[f"generate_s_{mode}"] = timed(
            lambda: backend.generate(flat, max_new_tokens=args.max_new_tokens, greedy=True), device
        )
    result["greedy_rows_equal"] = sum(
        a.completion_ids == b.completion_ids for a, b in zip(gens["packed"], gens["transformers"])
    )
    batch = collate([(g.prompt_ids, g.completion_ids) for g in gens["transformers"]], tok.pad_token_id).to(device)
    mask = batch.loss_mask
    scores = {}
    for mode in ("packed", "transformers"):
        set_forward(model, mode)

        def update():
            model.zero_grad(set_to_none=True)
            logp, _ = sequence_logprobs(model, batch, 1.0)
            (logp * mask).sum().backward()
            return logp.detach() * mask, {n: p.grad.clone() for n, p in model.named_parameters()}

        scores[mode], result[f"update_s_{mode}"] = timed(update, device)
    (lp_packed, g_packed), (lp_hf, g_hf) = scores["packed"], scores["transformers"]
    result["logprob_max_diff"] = float((lp_packed - lp_hf).abs().max())
    result["gradient_max_rel_diff"] = max(
        float((g_packed[n] - g).abs().max() / g.abs().max().clamp(min=1e-12)) for n, g in g_hf.items()
    )
    ok = (
        result["greedy_rows_equal"] == len(flat)
        and result["logprob_max_diff"] <= LOGPROB_TOLERANCE
        and result["gradient_max_rel_diff"] <= GRADIENT_TOLERANCE
    )
    result["ok"] = ok
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
