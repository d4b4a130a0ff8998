"""Check the vLLM generation backend on a CUDA machine: agreement with transformers, weight sync, RL steps.

    python benchmarks/vllm_check.py [--model tiny|PATH] [--steps 5] [--out vllm_check.json]

1. Greedy completions of the same prompts from ``TransformersBackend`` and ``VLLMBackend`` (same weights):
   share of identical completions (kernels differ, so a few near-ties may flip).
2. Weight sync: perturb the trainer's weights, ``sync_weights``, greedy again: vLLM must now agree with
   transformers on the *new* weights (and differ from its own earlier output).
3. Throughput: completions/s of both backends on one RL-sized batch (prompts × G).
4. ``polyrl train`` RL for ``--steps`` steps with ``generation.engine=vllm`` on ``device=cuda``: runs, logs
   metrics, and the final model loads.

Prints one JSON object per check and exits non-zero if a check fails. Needs ``pip install 'polyrl[vllm]'``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

import torch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="'tiny' or a local Hugging Face model directory")
    parser.add_argument("--steps", type=int, default=5, help="RL steps of the end-to-end check")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--out", default=None, help="also write the results to this JSON file")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("vllm_check: no CUDA device here; run it on a GPU machine", file=sys.stderr)
        return 2

    from polyrl.cli.train import default_config_path
    from polyrl.policy import PromptBuilder, TransformersBackend, load_policy
    from polyrl.policy.backends import GenerationConfig
    from polyrl.policy.loading import ModelConfig
    from polyrl.policy.vllm_backend import VLLMBackend, engine_options
    from polyrl.tasks import get_task
    from polyrl.train.config import load_config

    results, ok = [], True
    policy = load_policy(ModelConfig(path=args.model), seed=0, device="cuda")
    prompts = PromptBuilder(policy.tokenizer, load_config(default_config_path(), []).prompt)
    names = ["countdown", "subset_sum", "graph_coloring", "maze_path", "topological_sort", "sat"]
    problems = [get_task(names[i % len(names)]).generate(i, "easy") for i in range(args.prompts)]
    ids = [prompts.ids(p) for p in problems]
    hf = TransformersBackend(policy.model, policy.tokenizer, device=policy.device)
    t0 = time.perf_counter()
    engine = VLLMBackend(policy.model, policy.tokenizer, **engine_options(GenerationConfig()), seed=0)
    results.append({"check": "vllm_start", "seconds": round(time.perf_counter() - t0, 1)})

    def agreement() -> float:
        a = hf.generate(ids, max_new_tokens=24, greedy=True)
        b = engine.generate(ids, max_new_tokens=24, greedy=True)
        return sum(x.completion_ids == y.completion_ids for x, y in zip(a, b)) / len(ids)

    before = agreement()
    results.append({"check": "greedy_agreement", "same": before, "ok": before >= 0.9})
    old = [g.completion_ids for g in engine.generate(ids, max_new_tokens=24, greedy=True)]
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(torch.randn_like(p) * 0.02 * p.abs().mean())
    engine.sync_weights(policy.model, 1)
    after = agreement()
    changed = sum(
        o != g.completion_ids for o, g in zip(old, engine.generate(ids, max_new_tokens=24, greedy=True))
    ) / len(ids)
    results.append(
        {
            "check": "weight_sync",
            "same_after_sync": after,
            "changed_vs_before": changed,
            "ok": after >= 0.9 and changed > 0,
        }
    )

    flat = [x for x in ids for _ in range(args.group_size)]
    speed = {}
    for name, backend in (("transformers", hf), ("vllm", engine)):
        backend.generate(flat[:8], max_new_tokens=24)  # warm-up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        backend.generate(flat, max_new_tokens=24)
        torch.cuda.synchronize()
        speed[name] = round(len(flat) / (time.perf_counter() - t0), 1)
    results.append(
        {"check": "throughput_completions_per_s", **speed, "ratio": round(speed["vllm"] / speed["transformers"], 2)}
    )
    engine.close()

    from polyrl.train.trainer import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(
            default_config_path(),
            [
                f"run_dir={tmp}/run",
                "device=cuda",
                "generation.engine=vllm",
                f"model.path={args.model}",
                "sft.steps=20",
                f"rl.steps={args.steps}",
                "eval.problems_per_task=10",
                "progress=false",
                "tensorboard=false",
            ],
        )
        t0 = time.perf_counter()
        out = Trainer(cfg).run()
        with open(f"{tmp}/run/metrics.jsonl") as f:
            records = [json.loads(line) for line in f]
        rl = [r for r in records if r.get("stage") == "rl"]
        results.append(
            {
                "check": "train_with_vllm",
                "seconds": round(time.perf_counter() - t0, 1),
                "rl_steps": len(rl),
                "after_rl_mean": out["after_rl"]["mean"]["accuracy"],
                "ok": len(rl) == args.steps,
            }
        )
    for r in results:
        print(json.dumps(r))
        ok = ok and r.get("ok", True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
