"""How a real model reads polyrl's prompts: for every built-in task at one difficulty, the share of greedy
answers in the asked format (``<answer>…</answer>``) and the accuracy, with natural-language prompts through the
model's chat template, and the reply it gives most often (a copied example shows up there).

    python scripts/prompt_table.py --model smollm2-135m-instruct --n 10 [--difficulty easy] [--tasks a,b]
                                   [--max-new-tokens 64] [--out evals/prompt_table]
                                   [--sft-steps 40 --sft-batch 16 --sft-lr 2e-5]

With ``--sft-steps N`` the model is first fine-tuned for N steps on the same tasks' reference solutions (the
Trainer's SFT stage, natural prompts, uniform over the tasks, bf16 autocast), and the table is of that model.

It runs ``polyrl eval`` (the library: the same prompts, generation and verifiers) and prints a Markdown table;
the samples stay in ``--out`` (samples.jsonl: every prompt's response).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path


def table(samples: list[dict], order: list[str], n: int) -> str:
    """One row per task: format compliance, accuracy, and the most frequent reply (its first 24 characters; the
    extracted answer when in format) with its count."""
    rows = ["| task | format | accuracy | most frequent reply |", "| --- | ---: | ---: | --- |"]
    totals = [0, 0, 0]
    for name in order:
        mine = [s for s in samples if s["task"] == name]
        formatted = sum(s["format_ok"] for s in mine)
        correct = sum(s["correct"] for s in mine)
        answers = Counter(
            (str(s["answer"]) if s["format_ok"] else " ".join(s["response"].split()))[:24].replace("|", "\\|")
            for s in mine
        )
        top = f"`{answers.most_common(1)[0][0]}` ({answers.most_common(1)[0][1]}/{len(mine)})" if answers else "—"
        rows.append(f"| {name} | {formatted}/{len(mine)} | {correct}/{len(mine)} | {top} |")
        totals = [totals[0] + formatted, totals[1] + correct, totals[2] + len(mine)]
    share = [100 * t / max(totals[2], 1) for t in totals[:2]]
    rows.append(f"| **all {len(order)} tasks** | {share[0]:.1f}% | {share[1]:.1f}% | |")
    return "\n".join(rows)


def short_sft(args, names: list[str], run_dir: Path) -> str:
    """Fine-tune ``args.model`` on the tasks' reference solutions; returns the SFT model's directory."""
    from polyrl.train.config import load_config
    from polyrl.train.trainer import Trainer

    difficulty = args.difficulty
    try:
        difficulty = float(difficulty)
    except ValueError:
        pass
    cfg = load_config(
        None,
        base={
            "model": {"path": args.model, "autocast": "bf16"},
            "prompt": {"field": "prompt", "style": "natural"},
            "tasks": [{"name": n, "difficulty": difficulty} for n in names],
            "sft": {"steps": args.sft_steps, "batch_size": args.sft_batch, "lr": args.sft_lr, "warmup_steps": 3},
            "rl": {"enabled": False},
            "eval": {"problems_per_task": 1},
            "threads": 1,
            "progress": False,
            "tensorboard": False,
            "run_dir": str(run_dir),
        },
    )
    Trainer(cfg).run()
    return str(run_dir / "sft_model")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct", help="Preset, .gguf file or HF directory.")
    parser.add_argument("--n", type=int, default=10, help="Problems per task (eval split, seeds 0..n-1).")
    parser.add_argument("--difficulty", default="easy", help="Difficulty preset or knob.")
    parser.add_argument("--tasks", default="", help="Comma-separated tasks (default: every built-in task).")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="Longest answer in tokens.")
    parser.add_argument("--out", default="evals/prompt_table", help="Output directory (samples, results).")
    parser.add_argument("--sft-steps", type=int, default=0, help="First a short SFT on the tasks (0: zero-shot).")
    parser.add_argument("--sft-batch", type=int, default=16)
    parser.add_argument("--sft-lr", type=float, default=2e-5)
    args = parser.parse_args()
    import torch
    from transformers.utils import logging as hf_logging

    from polyrl.eval.runner import run_suite
    from polyrl.eval.sources import LocalModelSource
    from polyrl.eval.suite import suite_from_options
    from polyrl.policy.loading import ModelConfig, load_policy
    from polyrl.tasks import list_tasks

    torch.set_num_threads(1)
    hf_logging.disable_progress_bar()
    names = [t.strip() for t in args.tasks.split(",") if t.strip()] or [t.name for t in list_tasks()]
    suite = suite_from_options(",".join(names), args.difficulty, args.n, 1, max_new_tokens=args.max_new_tokens)
    model, shown = args.model, "zero-shot"
    if args.sft_steps:
        model = short_sft(args, names, Path(args.out) / "sft_run")
        shown = f"after {args.sft_steps} SFT steps of {args.sft_batch} rows (lr {args.sft_lr:g})"
    policy = load_policy(ModelConfig(path=model), seed=suite.seed)
    source = LocalModelSource(policy, "prompt", suite.system, seed=suite.seed, style="natural")
    out = Path(args.out)
    run_suite(suite, source, out, "prompt", args.model, log=print, style="natural")
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    print(
        f"\n{args.model}, {shown}, greedy, natural prompts through the chat template, {args.difficulty}, "
        f"{args.n} eval problems per task, ≤{args.max_new_tokens} new tokens:\n"
    )
    print(table(samples, names, args.n))


if __name__ == "__main__":
    main()
