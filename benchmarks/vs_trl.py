"""polyrl vs TRL's GRPOTrainer on CPU: RL throughput (completions/s) and held-out accuracy, same model, same
problems, same hyperparameters, in one run.

    .venv/bin/python benchmarks/vs_trl.py [--steps 60] [--prompts 16] [--group-size 8] [--tasks a,b]
                                          [--sft-steps 200] [--eval-problems 100] [--seeds 0,1,2] [--quick]
                                          [--markdown] [--json out.json]
    .venv/bin/python benchmarks/vs_trl.py --model smollm2-135m-instruct [--seeds 0,1,2] [--markdown]
    .venv/bin/python benchmarks/vs_trl.py --model smollm2-135m-instruct --recipe job --seeds 1,2 --json b.json
    .venv/bin/python benchmarks/vs_trl.py --model smollm2-135m-instruct --recipe job --merge a.json b.json

``--merge`` runs nothing: it reports the seeds of earlier ``--json`` files together (the files must share one setup,
the flags given must be the ones they ran with), so that a comparison of several hours is staged across sessions.
``--polyrl-set KEY=VALUE`` (repeatable) overrides polyrl's RL stage only, and ``--polyrl-only`` runs the SFT start
and polyrl without TRL: a difference between the trainers is tested against an earlier run's TRL figures at the
same seeds (the SFT start is the same run).

``--model`` other than ``tiny`` (a preset, a .gguf file or a Hugging Face directory) starts from
configs/smollm2.yaml (natural prompts through the chat template, its tasks and SFT recipe) with sizes for a
real model on a CPU: 8 RL steps × 4 prompts × G=4, ≤32 new tokens, lr 5e-6, 30 SFT steps, 30 held-out problems
per task (each flag still overrides).

``--precision best`` (the default) runs each trainer at its best supported precision on this machine: polyrl
with ``model.autocast: auto`` (bf16 autocast over float32 weights for a model at least 384 wide on a CPU with
bf16 matmul units, float32 otherwise) and TRL with ``bf16=True`` (the Trainer's CPU autocast) exactly when
polyrl's resolves to bf16; ``--precision fp32`` runs both in float32; ``--precision bf16`` both in bf16 autocast
(polyrl ``model.autocast: bf16``, TRL ``bf16=True``) whatever the model's width.

1. SFT warm start with polyrl (the config's tasks' reference solutions), saved as a Hugging Face directory.
2. polyrl RL from that directory (``model.path=<dir>``, ``sft.enabled=false``); ``trainer.rl.run`` is timed.
3. TRL GRPOTrainer from the same directory (``AutoModelForCausalLM``), on a ``datasets.Dataset`` holding
   the very problems polyrl drew at each step (same seeds), shown the same chat-template prompt, rewarded by
   the same polyrl reward (task verifier + format term, ``polyrl.rewards.compute_rewards``); ``train()`` is
   timed.
4. Both final models, and the SFT start, are scored by ``polyrl.eval.evaluate_policy`` (greedy) on the eval
   split, all three at polyrl's precision (TRL's model is given polyrl's autocast setting first).

Matched settings: group size (``num_generations``), completions per optimizer step
(``per_device_train_batch_size = prompts * G``, no gradient accumulation), ``max_new_tokens``
(``max_completion_length``), temperature, top-p/top-k off, learning rate (constant, no warmup), AdamW, grad
clip 1.0, no KL (``beta=0``), one epoch per batch (``num_iterations=1``), clip 0.2 / 0.28 (``epsilon``,
``epsilon_high``), token-mean loss (TRL ``loss_type="dapo"``), group-std advantages (``scale_rewards="group"``),
the precision chosen above, no gradient checkpointing. On one batch the two updates are the same to float
rounding (tests/train/test_vs_trl_reference.py). Known differences: TRL's group std is the sample std (n-1) with
eps 1e-4, polyrl's the population std with eps 1e-6 (advantages differ by a constant factor sqrt(G/(G-1)) per
group, which the gradient clip and AdamW cancel); in bf16 polyrl samples with bf16 weights and corrects towards
its training forward with truncated importance sampling (``ray.tis_cap``), while TRL's ``generate`` runs in
float32 outside its autocast; polyrl takes no optimizer step when every advantage of a step is zero, TRL takes
one with zero gradients (AdamW's momentum still moves the weights); polyrl writes one checkpoint at the end of
RL (inside the timed region), TRL saves nothing.

Beside the tables, each trainer's update is measured the same way (benchmarks/update_probe.py): optimizer steps
per RL step, the learning rate and AdamW settings applied, the loss normalizer and mean |advantage| fed to each
update, and per optimizer step the applied gradient norm, ``‖Δθ‖`` and KL(before ‖ after) on a fixed probe set;
``--json`` keeps every step's figures. The probe's own time (a weight copy and a probe forward per step) is taken
off both trainers' timings.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from learning_curves import Curve, EvaluateEvery, learning_report, plot, watch_polyrl  # benchmarks/learning_curves.py
from machine import (  # benchmarks/machine.py (scripts run from benchmarks/)
    checkpointing_off,
    cpu_model,
    markdown_table,
    mean_std,
)
from rich.console import Console
from rich.table import Table
from update_probe import Probe, UpdateProbe  # benchmarks/update_probe.py

from polyrl.cli.train import default_config_path
from polyrl.device import HOST
from polyrl.experiments.curriculum import free_memory
from polyrl.forward.precision import set_autocast
from polyrl.policy import PromptBuilder, TransformersBackend
from polyrl.rewards import compute_rewards
from polyrl.tasks.io import problem_row, row_problem
from polyrl.train import rl_stage
from polyrl.train.build import step_seed
from polyrl.train.config import TrainConfig, load_config
from polyrl.train.evaluation import evaluate
from polyrl.train.sft_data import reference_batch
from polyrl.train.trainer import Trainer

GOAL_SPEEDUP = {"tiny": 5.0, "real": 8.0}
"""Issue #23's goals: polyrl's RL throughput over TRL's on the embedded tiny model and on a real one."""
AUTOCAST = {"best": "auto", "fp32": "none", "bf16": "bf16"}  # --precision → polyrl's model.autocast
REAL_MODEL_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "smollm2.yaml"
# flag defaults: for the embedded tiny model, and for a real model (135 M parameters on a CPU)
SIZES = {
    "tiny": {"steps": 60, "prompts": 16, "group_size": 8, "sft_steps": 200, "eval_problems": 100,
             "max_new_tokens": 16, "lr": 2e-4},
    "real": {"steps": 8, "prompts": 4, "group_size": 4, "sft_steps": 30, "eval_problems": 30,
             "max_new_tokens": 32, "lr": 5e-6, "eval_every": 0},
    # --recipe job: the real-model job's own recipe (configs/smollm2.yaml), where RL moves held-out accuracy
    "job": {"steps": 90, "prompts": 4, "group_size": 4, "sft_steps": 15, "eval_problems": 200,
            "max_new_tokens": 32, "lr": 1e-5, "eval_every": 10},
}  # fmt: skip
SIZES["tiny"]["eval_every"] = 0
MARGIN = 5.0
"""Time to accuracy: training wall time until held-out accuracy first reaches the SFT start + this many points."""
POLYRL_STEP_METRICS = ("reward", "grad_norm", "zero_variance_frac", "updates", "skipped_updates", "tis_weight_mean",
                       "tis_truncated_fraction", "mismatch_abs_mean")  # fmt: skip
"""What polyrl's metrics log says of each RL step, kept beside the probe's figures (``--json``)."""
PROBE_SEQUENCES = 8
"""Reference solutions (train split, a fixed seed) on which each optimizer step's KL(before ‖ after) is measured."""


def polyrl_config(args, run_dir: Path, overrides: list[str]) -> TrainConfig:
    """default.yaml (configs/smollm2.yaml for a real model) with the benchmark's sizes (and ``overrides`` for the
    stage)."""
    base = [
        f"run_dir={run_dir}",
        f"seed={args.seed}",
        "tensorboard=false",
        "progress=false",
        f"rl.steps={args.steps}",
        f"rl.prompts_per_step={args.prompts}",
        f"rl.group_size={args.group_size}",
        f"rl.max_new_tokens={args.max_new_tokens}",
        f"rl.lr={args.lr}",
        f"sft.steps={args.sft_steps}",
        f"checkpoint_every={max(args.steps, args.sft_steps, 1)}",
        "keep_checkpoints=1",
        f"threads={args.threads}",
        "rl.dynamic_sampling=false",  # TRL has no dynamic sampling: same number of generations per step
        "rl.epochs=1",  # TRL: num_iterations=1
        "rl.minibatches=1",
    ]
    if args.eval_every:
        base += [f"eval.every={args.eval_every}", f"eval.problems_per_task={args.eval_problems}", "eval.pass_k=1"]
    if args.model == "tiny":
        # the RL stage loads the warm start from a directory, whose default style would be natural: keep the
        # terse prompts the tiny model was warm-started on (and that TRL is shown)
        base.append("prompt.style=terse")
    else:
        base.append(f"model.path={args.model}")
    base.append(f"model.autocast={AUTOCAST[args.precision]}")
    if args.tasks:
        base.append(f"tasks=[{args.tasks}]")
    return load_config(default_config_path() if args.model == "tiny" else REAL_MODEL_CONFIG, base + overrides)


def sft_warm_start(args, work: Path) -> tuple[Path, dict]:
    """polyrl's SFT stage once; returns the saved model directory and its held-out accuracy."""
    cfg = polyrl_config(args, work / "sft", ["rl.enabled=false"])
    trainer = Trainer(cfg)
    trainer.sft.run(None)
    trainer.parts.run_dir.close()
    accuracy = held_out(cfg, trainer.parts.backend, trainer.parts.prompts, trainer.parts.mix.eval_tasks(), args)
    model_dir = trainer.parts.run_dir.model_dir("sft_model")
    del trainer
    free_memory()
    return model_dir, accuracy


def held_out(config: TrainConfig, backend, prompts: PromptBuilder, eval_tasks: dict, args) -> dict:
    """Greedy held-out accuracy on ``args.eval_problems`` eval-split problems per task (the config's settings)."""
    return evaluate(config, backend, prompts, eval_tasks, args.eval_problems, pass_k=1)


@dataclass
class Matched:
    """What TRL's run takes from polyrl's: the settings, the very problems of each step, the prompts, tasks and
    tokenizer, and the precision polyrl resolved. polyrl's trainer (weights, AdamW states) is freed before
    TRL's model is built, so the two never hold memory at once."""

    config: TrainConfig
    tasks: dict
    prompts: PromptBuilder
    tokenizer: Any
    eval_tasks: dict
    problems: list
    bf16: bool
    probe: Probe


def run_polyrl(args, work: Path, sft_dir: Path) -> dict:
    cfg = polyrl_config(args, work / "polyrl", [f"model.path={sft_dir}", "sft.enabled=false", *args.polyrl_set])
    trainer = Trainer(cfg)
    probe = probe_set(trainer)
    watch = UpdateProbe(trainer.parts.policy.model, probe)
    curve = Curve()
    watch_polyrl(trainer, curve, watch)
    with watched_polyrl(trainer, watch):
        wall, cpu, curve.start = time.perf_counter(), time.process_time(), time.perf_counter()
        trainer.rl.run(None)
        wall = time.perf_counter() - wall - watch.wall - curve.excluded
        cpu = time.process_time() - cpu - watch.cpu - curve.excluded_cpu
    update = watch.summary(cfg.rl.steps)
    watch.release()
    trainer.parts.run_dir.close()
    steps = [json.loads(line) for line in trainer.parts.run_dir.metrics_file.read_text().splitlines()]
    steps = [r for r in steps if r.get("stage") == "rl"]
    step_time = sum(r["step_time"] for r in steps)
    gen_time = sum(r["tokens"] / r["tokens_per_s"] for r in steps if r.get("tokens_per_s"))
    bf16 = trainer.parts.policy.model.polyrl_autocast == "bf16"
    matched = Matched(
        cfg, trainer.parts.mix.tasks, trainer.parts.prompts, trainer.parts.policy.tokenizer, trainer.parts.mix.eval_tasks(),
        step_problems(cfg, trainer), bf16, probe,
    )  # fmt: skip
    accuracy = held_out(cfg, trainer.parts.backend, trainer.parts.prompts, matched.eval_tasks, args)
    curve.add_final(cfg.rl.steps, wall, accuracy)
    del trainer
    free_memory()
    for key in POLYRL_STEP_METRICS:
        update[key] = [r.get(key) for r in steps]
    return {
        "wall": wall,
        "cpu": cpu,
        "precision": "bf16 autocast" if bf16 else "fp32",
        "step_time": step_time,
        "gen_time": gen_time,
        "matched": matched,
        "accuracy": accuracy,
        "update": update,
        "curve": curve.as_dict(),
    }


def probe_set(trainer: Trainer) -> Probe:
    """The fixed sequences every optimizer step's KL is measured on: reference solutions of the run's tasks."""
    rng = np.random.default_rng(12345)
    pairs = reference_batch(
        trainer.parts.mix.tasks,
        trainer.parts.mix.difficulty,
        trainer.parts.prompts,
        trainer.parts.policy.tokenizer.eos_token_id,
        rng,
        PROBE_SEQUENCES,
    )
    return Probe.of([pair[:2] for pair in pairs], trainer.parts.policy.tokenizer.pad_token_id)


@contextmanager
def watched_polyrl(trainer: Trainer, watch: UpdateProbe):
    """polyrl's RL stage with ``watch`` on its optimizer (built when the stage starts) and on every batch the
    update is fed (``policy_update`` as the RL stage calls it)."""
    training, make, update = trainer.state.training, trainer.state.training.make_optimizer, rl_stage.policy_update

    def make_watched(*a, **k):
        make(*a, **k)
        watch.watch(training.optimizer)

    def update_watched(model, optimizer, batch, settings, *a, **k):
        watch.see_batch(batch.advantages, float(batch.tokens.loss_mask.sum()))
        return update(model, optimizer, batch, settings, *a, **k)

    training.make_optimizer, rl_stage.policy_update = make_watched, update_watched
    try:
        yield
    finally:
        del training.make_optimizer
        rl_stage.policy_update = update


def step_problems(cfg: TrainConfig, trainer: Trainer) -> list:
    """The problems polyrl's RL loop draws, step by step (the rng sequence of the trainer's ``make_problems`` in ``RLStage.collect``)."""
    problems = []
    for step in range(cfg.rl.steps):
        rng = np.random.default_rng(step_seed(cfg.seed, "rl", step))
        for name in trainer.parts.sampler.sample(cfg.rl.prompts_per_step, rng):
            problems.append(
                trainer.parts.mix.tasks[name].generate(
                    int(rng.integers(2**62)), trainer.parts.mix.difficulty(name), split="train"
                )
            )
    return problems


def run_trl(args, work: Path, sft_dir: Path, polyrl: Matched) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    cfg, tasks, problems = polyrl.config, polyrl.tasks, polyrl.problems
    content = polyrl.prompts.content  # the problem in the run's prompt field and style
    data = Dataset.from_list(
        [
            {"prompt": [{"role": "user", "content": content(p)}], "problem": json.dumps(problem_row(p))}
            for p in problems
        ]
    )

    def polyrl_reward(completions, problem, completion_ids, **_):
        out = []
        for completion, row, ids in zip(completions, problem, completion_ids):
            p = row_problem(json.loads(row), "trl dataset")
            text = completion[0]["content"]
            out.append(
                compute_rewards(cfg.reward, tasks[p.task], p, text, len(ids), True, cfg.rl.max_new_tokens).total
            )
        return out

    model = AutoModelForCausalLM.from_pretrained(sft_dir)
    tokenizer = AutoTokenizer.from_pretrained(sft_dir)
    rl = cfg.rl
    trl_args = GRPOConfig(
        output_dir=str(work / "trl"),
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        logging_steps=1,  # each step's reward and gradient norm, beside polyrl's
        seed=args.seed,
        bf16=polyrl.bf16,  # --precision best: what polyrl resolved
        **checkpointing_off(GRPOConfig),
        max_steps=rl.steps,
        per_device_train_batch_size=rl.prompts_per_step * rl.group_size,
        gradient_accumulation_steps=1,
        num_generations=rl.group_size,
        shuffle_dataset=False,
        max_completion_length=rl.max_new_tokens,
        temperature=rl.temperature,
        top_p=rl.top_p,
        top_k=0,
        learning_rate=rl.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=rl.weight_decay,
        max_grad_norm=rl.max_grad_norm,
        beta=0.0,
        num_iterations=rl.epochs,
        epsilon=rl.clip_ratio_low,
        epsilon_high=rl.clip_ratio_high,
        loss_type="dapo",
        scale_rewards="group",
    )
    trainer = GRPOTrainer(
        model=model, reward_funcs=polyrl_reward, args=trl_args, train_dataset=data, processing_class=tokenizer
    )
    check_same_prompt_ids(tokenizer, polyrl.prompts, problems[0], data[0]["prompt"])
    trainer.remove_callback(PrinterCallback)  # its per-log dict printing; the metrics stay in trainer.state
    watch = watched_trl(trainer, polyrl.probe)
    curve = Curve()
    evaluate = lambda model: held_out(cfg, eval_backend(model, polyrl), polyrl.prompts, polyrl.eval_tasks, args)
    trainer.add_callback(EvaluateEvery(args.eval_every, rl.steps, curve, evaluate, watch))
    wall, cpu, curve.start = time.perf_counter(), time.process_time(), time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - wall - watch.wall - curve.excluded
    cpu = time.process_time() - cpu - watch.cpu - curve.excluded_cpu
    update = watch.summary(rl.steps)
    watch.release()
    logs = [r for r in trainer.state.log_history if "reward" in r]
    update["reward"] = [r["reward"] for r in logs]
    update["grad_norm"] = [r.get("grad_norm") for r in logs]
    accuracy = evaluate(trainer.model)
    curve.add_final(rl.steps, wall, accuracy)
    return {
        "wall": wall,
        "cpu": cpu,
        "precision": "bf16=True" if trl_args.bf16 else "fp32",
        "accuracy": accuracy,
        "update": update,
        "curve": curve.as_dict(),
    }


def eval_backend(model, polyrl: Matched) -> TransformersBackend:
    """TRL's trained model, evaluated as polyrl's models are: with the same tokenizer and PromptBuilder (the SFT
    directory holds a copy of it) and at the same precision — polyrl's bf16 autocast when its run resolved to it.
    (A model that never went through polyrl's loader runs in float32: the SFT start and polyrl's model were then
    evaluated in bf16 and TRL's in float32, which alone moved seed 0's TRL accuracy by 2.5 points.)"""
    set_autocast(model, "bf16" if polyrl.bf16 else "none")
    return TransformersBackend(model, polyrl.tokenizer, device=HOST)


def watched_trl(trainer, probe: Probe) -> UpdateProbe:
    """``trainer`` with an :class:`UpdateProbe` on its optimizer (created here, before ``train()``, which then
    keeps it) and on every batch ``compute_loss`` is fed."""
    watch = UpdateProbe(trainer.model, probe)
    watch.watch(trainer.create_optimizer())
    compute_loss = trainer.compute_loss

    def compute_loss_watched(model, inputs, *a, **k):
        normalizer = inputs.get("num_items_in_batch", inputs["completion_mask"].sum())
        watch.see_batch(inputs["advantages"], float(normalizer))
        return compute_loss(model, inputs, *a, **k)

    trainer.compute_loss = compute_loss_watched
    return watch


def check_same_prompt_ids(tokenizer, prompts: PromptBuilder, problem, messages) -> None:
    """TRL tokenizes conversational prompts with ``apply_chat_template``; polyrl with its PromptBuilder."""
    trl_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)[
        "input_ids"
    ]
    if list(trl_ids) != prompts.ids(problem):
        raise SystemExit(f"prompt token ids differ:\n  TRL    {list(trl_ids)}\n  polyrl {prompts.ids(problem)}")


def run_seed(args, console: Console) -> dict:
    """One comparison (SFT warm start, polyrl RL, TRL RL, three evaluations) at ``args.seed``."""
    with tempfile.TemporaryDirectory(prefix="polyrl-vs-trl-") as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        with console.status(f"seed {args.seed}: SFT warm start (polyrl)…"):
            sft_dir, sft_acc = sft_warm_start(args, work)
        console.log(f"seed {args.seed}: SFT warm start and its evaluation: {time.perf_counter() - t0:.0f} s")
        with console.status(f"seed {args.seed}: RL with polyrl…"):
            ours = run_polyrl(args, work, sft_dir)
        console.log(f"seed {args.seed}: polyrl RL {ours['wall']:.0f} s")
        if args.polyrl_only:
            ours.pop("matched")
            return {"seed": args.seed, "sft": sft_acc, "polyrl": ours, "eval_problems": args.eval_problems}
        with console.status(f"seed {args.seed}: RL with TRL GRPOTrainer…"):
            theirs = run_trl(args, work, sft_dir, ours.pop("matched"))
        console.log(f"seed {args.seed}: TRL RL {theirs['wall']:.0f} s; seed total {time.perf_counter() - t0:.0f} s")
    return {"seed": args.seed, "sft": sft_acc, "polyrl": ours, "trl": theirs, "eval_problems": args.eval_problems}


def main() -> None:
    args, seeds = parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    console = Console(stderr=True)

    if args.merge:
        from learning_curves import merged_runs, without_seeds

        results, machines, setup = merged_runs(args.merge)
        seeds = [r["seed"] for r in results]
        curve = results[0]["polyrl"].get("curve") or {"points": [[0]]}
        args.eval_every = curve["points"][0][0]  # the files' own (the first evaluation is at step N)
        if without_seeds(setup_line(args, seeds, results)) != setup:
            raise SystemExit(
                f"--merge: the files ran {setup!r}; give the flags they ran with (--model, --recipe, ...)"
            )
        report(args, seeds, results, machine=" | ".join(dict.fromkeys(machines)))
        return
    load = [os.getloadavg()[0]]
    results = []
    for seed in seeds:
        args.seed = seed
        results.append(run_seed(args, console))
    load.append(os.getloadavg()[0])
    if args.polyrl_only:
        polyrl_only_report(args, results)
        return
    report(args, seeds, results, load)


def polyrl_only_report(args, results: list[dict]) -> None:
    """``--polyrl-only``: held-out accuracy per task of the SFT start and of polyrl's RL (with ``--polyrl-set``),
    per seed, for a comparison with an earlier run's TRL figures at the same seeds; ``--json`` keeps them."""
    tasks = [n for n in results[0]["sft"] if n != "mean"] + ["mean"]
    print(f"polyrl only, RL overrides {args.polyrl_set or 'none'}; held-out: {args.eval_problems} problems per task")
    print("| seed | stage | " + " | ".join(tasks) + " | RL wall s |")
    print("|---|---|" + "---:|" * (len(tasks) + 1))
    for r in results:
        for stage, acc, wall in (
            ("SFT start", r["sft"], ""),
            ("polyrl", r["polyrl"]["accuracy"], f"{r['polyrl']['wall']:.0f}"),
        ):
            cells = " | ".join(f"{100 * acc[t]['accuracy']:.1f}%" for t in tasks)
            print(f"| {r['seed']} | {stage} | {cells} | {wall} |")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"polyrl_set": args.polyrl_set, "results": results}, indent=1, default=str)
        )


def parse_args() -> tuple[argparse.Namespace, list[int]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default="tiny", help="tiny, or a real model: a preset, a .gguf file or a Hugging Face directory."
    )
    parser.add_argument("--steps", type=int, help="RL steps for each trainer (tiny 60, real 8).")
    parser.add_argument("--prompts", type=int, help="Distinct problems per RL step (tiny 16, real 4).")
    parser.add_argument("--group-size", type=int, help="Completions per problem, G (tiny 8, real 4).")
    parser.add_argument("--tasks", default="", help="Comma-separated task names (default: the config's).")
    parser.add_argument("--sft-steps", type=int, help="SFT warm-start steps, the config's batch (tiny 200, real 30).")
    parser.add_argument("--eval-problems", type=int, help="Held-out problems per task, greedy (tiny 100, real 30).")
    parser.add_argument("--max-new-tokens", type=int, help="Longest completion in tokens (tiny 16, real 32).")
    parser.add_argument("--lr", type=float, help="RL learning rate (tiny 2e-4, real 5e-6).")
    parser.add_argument("--seeds", default="0", help="Comma-separated seeds; each runs the whole comparison.")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads for both (1: on a shared machine more threads oversubscribe the cores).",
    )
    parser.add_argument(
        "--precision",
        choices=sorted(AUTOCAST),
        default="best",
        help="best: each trainer at its best supported precision here (polyrl autocast auto, TRL bf16=True where "
        "that resolves to bf16); fp32: both in float32; bf16: both in bf16 autocast.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="Smoke size: 20 RL steps, 60 SFT steps, 30 eval problems."
    )
    parser.add_argument(
        "--recipe",
        choices=("quick", "job"),
        default="quick",
        help="A real model's sizes: quick (8 RL steps, a throughput check) or job (the real-model job's recipe: 15 "
        "SFT + 90 RL steps, lr 1e-5, 200 held-out problems per task, evaluated every 10 steps).",
    )
    parser.add_argument(
        "--eval-every",
        type=int,
        help="Evaluate both trainers every N RL steps on the held-out problems (time to accuracy; job: 10).",
    )
    parser.add_argument("--plot", help="With evaluations during RL: write the learning curves to this PNG.")
    parser.add_argument("--markdown", action="store_true", help="Print markdown tables instead.")
    parser.add_argument("--json", help="Also write every figure, each optimizer step's included, to this file.")
    parser.add_argument(
        "--polyrl-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="A config override for polyrl's RL stage only (repeatable), e.g. rl.skip_zero_advantage=false: test a "
        "difference between the trainers.",
    )
    parser.add_argument(
        "--polyrl-only",
        action="store_true",
        help="Run the SFT start and polyrl's RL only (no TRL): per-task held-out accuracy, to set beside an earlier "
        "run's TRL figures at the same seeds.",
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        metavar="JSON",
        help="Run nothing: report together the seeds of earlier --json files (the same setup; give the flags they ran "
        "with), so that a long comparison can be staged across sessions.",
    )
    args = parser.parse_args()
    if args.model == "tiny" and args.recipe != "quick":
        parser.error("--recipe job is the real-model job's recipe: give --model smollm2-135m-instruct (or another)")
    sizes = "tiny" if args.model == "tiny" else ("job" if args.recipe == "job" else "real")
    for name, value in SIZES[sizes].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.quick:
        args.steps, args.sft_steps, args.eval_problems = 20, 60, 30
    try:
        seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--seeds must be comma-separated integers, got {args.seeds!r}")
    if not seeds:
        parser.error("--seeds is empty")
    if args.eval_every < 0 or (args.eval_every and args.eval_every >= args.steps):
        parser.error(
            f"--eval-every must be 0 (off) or from 1 to {args.steps - 1}, below the RL steps (the final evaluation "
            f"after step {args.steps} always runs), got {args.eval_every}"
        )
    if args.plot and not args.eval_every:
        parser.error("--plot draws the evaluations during RL: give --eval-every N (or --recipe job)")
    return args, seeds


def setup_line(args, seeds: list[int], results: list[dict]) -> str:
    """What was compared: sizes, model, tasks, seeds and precisions (``--merge`` checks files share it)."""
    completions = args.steps * args.prompts * args.group_size
    task_names = [n for n in results[0]["sft"] if n != "mean"]
    return (
        f"{args.steps} RL steps × {args.prompts} prompts × G={args.group_size} "
        f"({completions:,} completions per trainer), ≤{args.max_new_tokens} new tokens, lr {args.lr}, "
        f"model {args.model}, "
        f"tasks {', '.join(task_names)}; both start from one polyrl SFT warm start per seed "
        f"({args.sft_steps} steps); held-out: {args.eval_problems} eval-split problems per task, greedy; "
        f"seeds {', '.join(map(str, seeds))}; precision: polyrl {results[0]['polyrl']['precision']}, "
        f"TRL {results[0]['trl']['precision']}"
    )


def report(args, seeds: list[int], results: list[dict], load: list[float] | None = None, machine: str = "") -> None:
    """The tables and the verdict (``--markdown``: as Markdown; ``--json``: every figure to a file too). The
    machine line is this process's (``load``: the load average at start and end) unless ``machine`` is given
    (``--merge``: the merged files' own)."""
    goal = GOAL_SPEEDUP["tiny" if args.model == "tiny" else "real"]

    completions = args.steps * args.prompts * args.group_size
    machine = machine or (
        f"{cpu_model()}, {os.cpu_count()} cores shared with other jobs (load average {load[0]:.1f} at start, "
        f"{load[1]:.1f} at end), torch {torch.__version__} with {args.threads} thread(s), "
        f"transformers {_version('transformers')}, TRL {_version('trl')}, Python {platform.python_version()}"
    )
    task_names = [n for n in results[0]["sft"] if n != "mean"]
    setup = setup_line(args, seeds, results)

    tables = summary_tables(results, completions, task_names)
    speedups = [r["trl"]["wall"] / r["polyrl"]["wall"] for r in results]
    cpu_speedups = [r["trl"]["cpu"] / r["polyrl"]["cpu"] for r in results]
    diffs = [accuracy(r, "polyrl") - accuracy(r, "trl") for r in results]

    def moved(who: str) -> str:
        return mean_std([r[who]["update"]["total_delta"] for r in results], "{:.3f}")

    gen_share = [100 * r["polyrl"]["gen_time"] / max(r["polyrl"]["step_time"], 1e-9) for r in results]
    verdict = (
        f"polyrl/TRL throughput: {mean_std(speedups, '{:.2f}')}× wall, {mean_std(cpu_speedups, '{:.2f}')}× CPU "
        f"(goal ≥ {goal:.0f}×: {'met' if min(speedups) >= goal else 'NOT met'} in "
        f"{sum(s >= goal for s in speedups)}/{len(speedups)} seeds); held-out mean accuracy polyrl − TRL: "
        f"{mean_std(diffs)} points over {len(results)} seed(s); {mean_std(gen_share, '{:.0f}')}% of polyrl's RL "
        f"step time in generation; ‖θ_end − θ_start‖ polyrl {moved('polyrl')}, TRL {moved('trl')}"
    )
    tables.append(("The update, per seed (per optimizer step: mean (min–max))", *update_table(results)))
    if args.eval_every:
        learning, learned = learning_report(results, args.eval_every, MARGIN)
        tables += learning
        verdict += f"; {learned}"
        if args.plot:
            plot(results, MARGIN, Path(args.plot))
    if args.json:
        Path(args.json).write_text(json.dumps({"setup": setup, "machine": machine, "results": results}, indent=1))
    if args.markdown:
        print(f"Machine: {machine}.\n\nSetup: {setup}.\n")
        for _, header, rows in tables:
            print(markdown_table(header, rows) + "\n")
        print(f"{verdict}.")
        return
    out = Console()
    for title, header, rows in tables:
        table = Table(*header, title=title)
        for row in rows:
            table.add_row(*row)
        out.print(table)
    out.print(setup)
    out.print(machine)
    out.print(verdict)


def accuracy(r: dict, who: str, task: str = "mean") -> float:
    """Held-out accuracy in percent of ``who`` (sft, polyrl, trl) in one seed's result."""
    return 100 * (r[who] if who == "sft" else r[who]["accuracy"])[task]["accuracy"]


def summary_tables(results: list[dict], completions: int, task_names: list[str]) -> list[tuple]:
    """``(title, header, rows)`` of the per-seed, throughput and held-out accuracy tables."""
    per_seed_header = ["seed", "polyrl RL s", "TRL RL s", "speed-up", "SFT start", "polyrl held-out", "TRL held-out"]
    per_seed_rows = [
        [
            str(r["seed"]),
            f"{r['polyrl']['wall']:.1f}",
            f"{r['trl']['wall']:.1f}",
            f"{r['trl']['wall'] / r['polyrl']['wall']:.2f}×",
            f"{accuracy(r, 'sft'):.1f}%",
            f"{accuracy(r, 'polyrl'):.1f}%",
            f"{accuracy(r, 'trl'):.1f}%",
        ]
        for r in results
    ]
    speed_header = ["trainer", "RL wall s", "RL CPU s", "compl./s", "compl./CPU-s", "held-out mean"]
    speed_rows = [
        [
            label,
            mean_std([r[who]["wall"] for r in results]),
            mean_std([r[who]["cpu"] for r in results]),
            mean_std([completions / r[who]["wall"] for r in results]),
            mean_std([completions / r[who]["cpu"] for r in results]),
            mean_std([accuracy(r, who) for r in results]) + "%",
        ]
        for label, who in (("polyrl", "polyrl"), ("TRL GRPOTrainer", "trl"))
    ]
    acc_header = ["task", "SFT start", "polyrl", "TRL GRPOTrainer"]
    acc_rows = [
        [n, *(mean_std([accuracy(r, who, n) for r in results]) + "%" for who in ("sft", "polyrl", "trl"))]
        for n in [*task_names, "mean"]
    ]
    return [
        ("Per seed", per_seed_header, per_seed_rows),
        ("Throughput (mean ± std over seeds)", speed_header, speed_rows),
        ("Held-out accuracy, greedy (mean ± std over seeds)", acc_header, acc_rows),
    ]


def update_table(results: list[dict]) -> tuple[list[str], list[list[str]]]:
    """What each trainer's update did (benchmarks/update_probe.py): optimizer steps per RL step, the learning
    rate and AdamW settings applied, the loss normalizer and mean absolute advantage the updates were fed, and per
    optimizer step the applied (clipped) gradient norm, ``‖Δθ‖`` and the probe's KL(before ‖ after); last the
    run's ``‖θ_end − θ_start‖``."""

    def spread(xs: list[float], fmt: str) -> str:
        xs = [x for x in xs if x is not None]
        if not xs:
            return "–"
        return f"{fmt.format(float(np.mean(xs)))} ({fmt.format(min(xs))}–{fmt.format(max(xs))})"

    header = ["seed", "trainer", "opt. steps / RL step", "lr", "AdamW β, ε, wd", "normalizer (tokens)",
              "mean abs. advantage", "grad norm applied", "‖Δθ‖ per step", "KL per step",
              "‖θ_end − θ_start‖"]  # fmt: skip
    rows = []
    for r in results:
        for label, who in (("polyrl", "polyrl"), ("TRL", "trl")):
            u = r[who]["update"]
            adam = u["adam"]
            rows.append([
                str(r["seed"]), label, f"{u['optimizer_steps_per_rl_step']:.2f}",
                ", ".join(f"{x:g}" for x in u["lr"]) or "–",
                f"{adam['betas']}, {adam['eps']:g}, {adam['weight_decay']:g}" if adam["betas"] else "–",
                spread(u["normalizer"], "{:.0f}"), spread(u["mean_abs_adv"], "{:.3f}"),
                spread(u["grad_norm_applied"], "{:.3f}"), spread(u["delta_norm"], "{:.4f}"),
                spread(u["probe_kl"], "{:.2e}"), f"{u['total_delta']:.4f}",
            ])  # fmt: skip
    return header, rows


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


if __name__ == "__main__":
    main()
