"""How a real model reads polyrl's prompts: for every built-in task at one difficulty, the share of greedy
answers in the asked format (``<answer>…</answer>``) and the accuracy, with natural-language prompts through the
model's chat template, and the reply it gives most often (a copied example shows up there).

    python scripts/prompt_table.py --model smollm2-135m-instruct --n 10 [--difficulty easy] [--tasks a,b]
                                   [--max-new-tokens 64] [--out runs/prompt_table]
                                   [--sft-steps 40 --sft-batch 16 --sft-lr 2e-5 [--sft-tasks all]]

With ``--sft-steps N`` the model is also fine-tuned for N steps on the same tasks' reference solutions (the
Trainer's SFT stage, natural prompts, uniform over the tasks, bf16 autocast), and the table shows both: zero-shot
format and accuracy, the same after SFT, and the most frequent reply after SFT. ``--sft-tasks`` fine-tunes on other
tasks than the table shows (``all``: every built-in task), e.g. to re-measure a few rewritten prompts after the same
SFT as the whole table's. ``--resume`` keeps the samples already in ``--out`` and an SFT model already trained there.

It runs ``polyrl eval`` (the library: the same prompts, generation and verifiers) and prints a Markdown table;
the samples stay in ``--out`` (samples.jsonl: every prompt's response; with SFT, in ``zero_shot/`` and
``after_sft/``, the SFT run in ``sft_run/``).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from polyrl.device import HOST


def task_counts(samples: list[dict], name: str) -> tuple[int, int, int, str]:
    """``(in format, correct, samples, most frequent reply)`` of one task; the reply is its first 24 characters (the
    extracted answer when in format) with its count."""
    mine = [s for s in samples if s["task"] == name]
    answers = Counter(
        (str(s["answer"]) if s["format_ok"] else " ".join(s["response"].split()))[:24].replace("|", "\\|")
        for s in mine
    )
    top = f"`{answers.most_common(1)[0][0]}` ({answers.most_common(1)[0][1]}/{len(mine)})" if answers else "—"
    return sum(s["format_ok"] for s in mine), sum(s["correct"] for s in mine), len(mine), top


def table(runs: list[list[dict]], order: list[str]) -> str:
    """One row per task: format compliance and accuracy of each run (zero-shot, after SFT), then the most frequent
    reply of the last run; a last row with the shares over all tasks."""
    names = ["zero-shot ", "after-SFT "] if len(runs) == 2 else [""]
    columns = " | ".join(f"{n}format | {n}accuracy" for n in names)
    reply = "most frequent reply" + (" after SFT" if len(runs) == 2 else "")
    rows = [f"| task | {columns} | {reply} |", "| --- | " + "---: | ---: | " * len(runs) + "--- |"]
    totals = [[0, 0, 0] for _ in runs]
    for name in order:
        cells = []
        for total, samples in zip(totals, runs):
            formatted, correct, n, top = task_counts(samples, name)
            cells += [f"{formatted}/{n}", f"{correct}/{n}"]
            total[:] = [total[0] + formatted, total[1] + correct, total[2] + n]
        rows.append(f"| {name} | {' | '.join(cells)} | {top} |")
    shares = [f"{100 * t[k] / max(t[2], 1):.1f}%" for t in totals for k in (0, 1)]
    rows.append(f"| **all {len(order)} tasks** | {' | '.join(shares)} | |")
    return "\n".join(rows)


def reasons_table(runs: list[list[dict]], order: list[str]) -> str:
    """One row per task: how the verifier read each run's answers (``correct``, ``wrong``, ``malformed`` — an answer
    in the tags but not of the asked shape —, ``no_answer``, …), most frequent first."""
    names = ["zero-shot", "after SFT"] if len(runs) == 2 else ["verdicts"]
    rows = [f"| task | {' | '.join(names)} |", "| --- |" + " --- |" * len(runs)]
    for name in order:
        cells = []
        for samples in runs:
            reasons = Counter(s["reason"] for s in samples if s["task"] == name)
            cells.append(", ".join(f"{reason} {k}" for reason, k in reasons.most_common()))
        rows.append(f"| {name} | {' | '.join(cells)} |")
    return "\n".join(rows)


def short_sft(args, names: list[str], run_dir: Path) -> str:
    """Fine-tune ``args.model`` on the tasks' reference solutions; returns the SFT model's directory (an SFT model
    already there is kept with ``--resume``)."""
    from polyrl.train.config import load_config
    from polyrl.train.trainer import Trainer

    if args.resume and (run_dir / "sft_model" / "config.json").is_file():
        print(f"keeping the SFT model in {run_dir / 'sft_model'} (--resume)")
        return str(run_dir / "sft_model")
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


def evaluate(model: str, suite, out: Path, resume: bool) -> list[dict]:
    """Greedy samples of ``model`` on ``suite`` with natural prompts (kept in ``out/samples.jsonl``)."""
    from polyrl.eval.runner import run_suite
    from polyrl.eval.sources import LocalModelSource
    from polyrl.policy.loading import ModelConfig, load_policy

    policy = load_policy(ModelConfig(path=model), seed=suite.seed, device=HOST)
    source = LocalModelSource(policy, "prompt", suite.system, seed=suite.seed, style="natural")
    resume = resume and (out / "run.json").is_file()
    run_suite(suite, source, out, "prompt", model, resume=resume, log=print, style="natural")
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct", help="Preset, .gguf file or HF directory.")
    parser.add_argument("--n", type=int, default=10, help="Problems per task (eval split, seeds 0..n-1).")
    parser.add_argument("--difficulty", default="easy", help="Difficulty preset or knob.")
    parser.add_argument("--tasks", default="", help="Comma-separated tasks (default: every built-in task).")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="Longest answer in tokens.")
    parser.add_argument("--out", default="runs/prompt_table", help="Output directory (samples, results).")
    parser.add_argument("--sft-steps", type=int, default=0, help="Also after a short SFT on the tasks (0: no SFT).")
    parser.add_argument("--sft-batch", type=int, default=16)
    parser.add_argument("--sft-lr", type=float, default=2e-5)
    parser.add_argument("--sft-tasks", default="", help="Tasks of the SFT (default: --tasks; all: every built-in).")
    parser.add_argument("--resume", action="store_true", help="Keep the samples and SFT model already in --out.")
    args = parser.parse_args()
    import torch
    from transformers.utils import logging as hf_logging

    from polyrl.eval.suite import suite_from_options
    from polyrl.tasks import TEXT_ONLY, list_tasks

    torch.set_num_threads(1)
    hf_logging.disable_progress_bar()
    every = [t.name for t in list_tasks() if t.modalities == TEXT_ONLY]  # a text model cannot see the visual ones
    names = [t.strip() for t in args.tasks.split(",") if t.strip()] or every
    sft_names = every if args.sft_tasks == "all" else [t.strip() for t in args.sft_tasks.split(",") if t.strip()]
    suite = suite_from_options(",".join(names), args.difficulty, args.n, 1, max_new_tokens=args.max_new_tokens)
    out = Path(args.out)
    shown = "zero-shot"
    if not args.sft_steps:
        runs = [evaluate(args.model, suite, out, args.resume)]
    else:
        zero = evaluate(args.model, suite, out / "zero_shot", args.resume)
        tuned_model = short_sft(args, sft_names or names, out / "sft_run")
        runs = [zero, evaluate(tuned_model, suite, out / "after_sft", args.resume)]
        what = f"{len(sft_names or names)} tasks" if sft_names else "the same tasks"
        shown = (
            f"zero-shot and after {args.sft_steps} SFT steps of {args.sft_batch} rows on {what} (lr {args.sft_lr:g})"
        )
    print(
        f"\n{args.model}, {shown}, greedy, natural prompts through the chat template, {args.difficulty}, "
        f"{args.n} eval problems per task, ≤{args.max_new_tokens} new tokens:\n"
    )
    print(table(runs, names))
    print("\nVerdicts (how the task's verifier read each answer):\n")
    print(reasons_table(runs, names))


if __name__ == "__main__":
    main()
