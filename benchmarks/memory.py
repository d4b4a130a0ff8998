"""Peak memory and time of one RL update, polyrl's memory switches side by side with TRL's GRPOTrainer.

    .venv/bin/python benchmarks/memory.py [--group-size 16] [--length 512] [--prompt-length 32]
                                          [--hidden 256] [--layers 4] [--micro-batch-tokens 2048]
                                          [--only before,chunked,...] [--markdown]
    .venv/bin/python benchmarks/memory.py --model smollm2-135m-instruct [...]

With ``--model`` (a preset, a .gguf file or a Hugging Face directory) the model is that checkpoint, with its
own vocabulary and tokenizer, instead of the Qwen2-shaped one; a directory holding only a config.json
(``benchmarks/gpu/make_model.py qwen2.5-1.5b DIR``) is that shape with random weights. On a machine with CUDA, every setting runs on
the GPU (``--device``: auto, cpu, cuda or cuda:N).

The model is a Qwen2ForCausalLM built from a config with Qwen2's real 151,936-token vocabulary (tied
embeddings, random weights, ``--hidden`` wide, ``--layers`` deep); the batch is one prompt of
``--prompt-length`` tokens with ``--group-size`` completions filling ``--length`` tokens each (random ids,
alternating rewards, so every row has a non-zero GRPO advantage). Each setting runs in a fresh subprocess
and does one optimizer step (AdamW, fp32 master weights unless stated): polyrl's ``policy_update`` with
token-mean PPO-clip, no KL, one epoch, one minibatch; TRL's ``GRPOTrainer.compute_loss`` (``loss_type="dapo"``,
``beta=0``) + backward + clip + AdamW step on the same tokens and advantages.

Each setting runs one warm-up update (AdamW's states get allocated), then the measured one. Peak memory is
the process's peak resident set (``VmHWM``, reset just before the measured update) minus its resident set
before it: what an update adds on top of weights, optimizer states and batch (activations, logits,
gradients); with a GPU, ``torch.cuda.max_memory_allocated`` over the update minus what was allocated before. ``before`` is the update as it was
before the memory switches: one forward that materializes the full ``[batch, tokens, vocab]`` logits (the
fallback polyrl keeps for models whose logits are not a projection of the trunk).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
import warnings

import torch
from machine import (  # benchmarks/machine.py (scripts run from benchmarks/)
    checkpointing_off,
    cpu_model,
    device_option,
    markdown_table,
)

VOCAB = 151_936
SETTINGS = {
    "before": "polyrl before the switches: full-vocabulary logits, fp32",
    "chunked": "+ chunked log-probs from hidden states (the default now)",
    "micro": "+ rl.micro_batch_tokens",
    "checkpointing": "+ model.gradient_checkpointing",
    "bf16-autocast": "+ model.autocast=bf16 (fp32 master weights)",
    "all": "chunked + micro-batches + checkpointing + bf16 autocast",
    "pure-bf16": "chunked + micro-batches + checkpointing, model.dtype=bfloat16",
    "trl": "TRL GRPOTrainer, same batch (fp32, its defaults)",
}


def device(args) -> torch.device:
    """The device every setting runs on: ``--device``, read by polyrl's device parser in :func:`parse_args` (auto:
    the GPU where there is one) — the one place this script decides it."""
    return args.device


def vocab_size(args) -> int:
    if not args.model:
        return VOCAB
    from pathlib import Path

    from polyrl.policy.resolve import resolve_model_path

    return json.loads((Path(resolve_model_path(args.model)) / "config.json").read_text())["vocab_size"]


def build_model(args, dtype: torch.dtype = torch.float32):
    """The model of ``args`` on its device. Random weights are made there (``torch.device`` as the default device):
    the 1.5B shape's random init took 70-85 s of 2 CPU threads in each setting's subprocess before it moved to the
    GPU (issue #42); on a GPU it takes a second."""
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if args.model:
        from pathlib import Path

        from transformers import AutoConfig

        from polyrl.policy.resolve import resolve_model_path

        path = Path(resolve_model_path(args.model))
        if any(path.glob("*.safetensors")):
            return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device(args))
        config = AutoConfig.from_pretrained(path)  # a config only (benchmarks/gpu/make_model.py): its shape at random
    else:
        config = Qwen2Config(
            vocab_size=VOCAB,
            hidden_size=args.hidden,
            intermediate_size=args.hidden * 11 // 4,
            num_hidden_layers=args.layers,
            num_attention_heads=max(1, args.hidden // 64),
            num_key_value_heads=max(1, args.hidden // 128),
            max_position_embeddings=max(args.length, 1024),
            tie_word_embeddings=True,
        )
    torch.manual_seed(0)
    with torch.device(device(args)):
        if args.model:
            return AutoModelForCausalLM.from_config(config, dtype=dtype)
        return Qwen2ForCausalLM(config).to(dtype)


def trajectories(args):
    """One group: a shared prompt and ``group_size`` completions of ``length - prompt_length`` tokens."""
    from polyrl.rollout import Trajectory
    from polyrl.tasks import Problem, Verdict

    g = torch.Generator().manual_seed(0)
    vocab = vocab_size(args)
    prompt = torch.randint(10, vocab, (args.prompt_length,), generator=g).tolist()
    problem = Problem("bench", "q", "q", None, None, 0, "train", 0.0, {})
    out = []
    for k in range(args.group_size):
        response = torch.randint(10, vocab, (args.length - args.prompt_length,), generator=g).tolist()
        reward = float(k % 2)
        verdict = Verdict(reward, reward >= 1, "")
        out.append(Trajectory("bench", 0, problem, prompt, response, "", True, reward, {}, verdict))
    return out


def polyrl_update(args, setting: str):
    """A closure running one polyrl update for ``setting``."""
    import polyrl.forward.logprobs as batch_module
    from polyrl.forward.precision import enable_gradient_checkpointing, set_autocast
    from polyrl.learner.settings import UpdateSettings
    from polyrl.learner.update import policy_update
    from polyrl.learner.update_batch import prepare_update
    from polyrl.train.config import RLConfig

    micro = args.micro_batch_tokens if setting in ("micro", "all", "pure-bf16") else None
    model = build_model(args, torch.bfloat16 if setting == "pure-bf16" else torch.float32).train()
    if setting in ("checkpointing", "all", "pure-bf16"):
        enable_gradient_checkpointing(model)
    if setting in ("bf16-autocast", "all"):
        set_autocast(model, "bf16")
    if setting == "before":
        batch_module.split_lm = lambda model: None  # the full-logits forward
    cfg = UpdateSettings.from_config(
        RLConfig(micro_batch_tokens=micro, max_new_tokens=args.length, skip_zero_advantage=False, share_prompts=False)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    batch = prepare_update(trajectories(args), ["bench"], 0, cfg)
    return lambda: policy_update(model, optimizer, batch, cfg, list(model.parameters()), device=device(args))


def trl_update(args):
    """A closure running one TRL GRPOTrainer update (compute_loss, backward, clip, AdamW) on the same batch."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from polyrl.learner.update_batch import prepare_update
    from polyrl.policy.tiny import build_tiny_tokenizer

    model = build_model(args).train()
    group = args.group_size
    if args.model:
        from transformers import AutoTokenizer

        from polyrl.policy.resolve import resolve_model_path

        tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(args.model))
    else:
        tokenizer = build_tiny_tokenizer()
    trl_args = GRPOConfig(
        output_dir=os.path.join(args.work, "trl"),
        use_cpu=device(args).type == "cpu",
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        bf16=False,
        **checkpointing_off(GRPOConfig),
        per_device_train_batch_size=group,
        gradient_accumulation_steps=1,
        num_generations=group,
        max_completion_length=args.length - args.prompt_length,
        learning_rate=1e-5,
        beta=0.0,
        loss_type="dapo",
        max_grad_norm=1.0,
    )
    data = Dataset.from_list([{"prompt": "q"}] * group)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **_: [0.0] * len(completions),
        args=trl_args,
        train_dataset=data,
        processing_class=tokenizer,
    )
    trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = 1
    trajs = trajectories(args)
    batch = prepare_update(trajs, ["bench"], 0, _rl_config(args))
    on = device(args)
    completion = torch.tensor([t.response_ids for t in trajs], device=on)
    inputs = {
        "prompt_ids": torch.tensor([t.prompt_ids for t in trajs], device=on),
        "prompt_mask": torch.ones(group, args.prompt_length, dtype=torch.long, device=on),
        "completion_ids": completion,
        "completion_mask": torch.ones_like(completion),
        "advantages": batch.advantages.to(on),
        "num_items_in_batch": torch.tensor(float(completion.numel()), device=on),
    }

    def update():
        loss = trainer.compute_loss(model, inputs)
        trainer.accelerator.backward(loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        trainer.optimizer.step()
        trainer.optimizer.zero_grad()

    return update


def _rl_config(args):
    from polyrl.learner.settings import UpdateSettings
    from polyrl.train.config import RLConfig

    return UpdateSettings.from_config(RLConfig(max_new_tokens=args.length, skip_zero_advantage=False))


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def measure(args, setting: str) -> dict:
    """Peak memory (MiB) and wall time of one update of ``setting`` in this process."""
    update = trl_update(args) if setting == "trl" else polyrl_update(args, setting)
    update()  # warm-up: AdamW's states and the allocator's pools exist from here on, as in a training run
    cuda = device(args).type == "cuda"
    if cuda:
        torch.cuda.synchronize(device(args))
        torch.cuda.reset_peak_memory_stats(device(args))
        base = torch.cuda.memory_allocated(device(args))
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM, the peak resident set, to the current one
    rss = _rss_kib("VmRSS")
    t0 = time.perf_counter()
    update()
    if cuda:
        torch.cuda.synchronize(device(args))
    seconds = time.perf_counter() - t0
    out = {"setting": setting, "seconds": seconds, "rss_peak_mib": (_rss_kib("VmHWM") - rss) / 1024}
    if cuda:
        out["cuda_peak_mib"] = (torch.cuda.max_memory_allocated(device(args)) - base) / 2**20
    return out


def run_all(args) -> list[dict]:
    results = []
    for setting in args.only:
        cmd = [sys.executable, __file__, "--one", setting, *sys.argv[1:]]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode < 0:  # killed by a signal: the last stderr line is some progress bar, not the cause
            name = signal.Signals(-proc.returncode).name
            hint = " (out of memory?)" if proc.returncode == -signal.SIGKILL else ""
            results.append({"setting": setting, "error": f"killed by {name}{hint}"})
        elif proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            results.append({"setting": setting, "error": tail})
        else:
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"{setting}: {results[-1]}", file=sys.stderr)
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="A preset, .gguf file or HF directory instead of the Qwen2-shaped model.")
    parser.add_argument("--group-size", type=int, default=16, help="Completions in the batch (G).")
    parser.add_argument("--length", type=int, default=512, help="Prompt + completion tokens per row (L).")
    parser.add_argument("--prompt-length", type=int, default=32, help="Tokens of the shared prompt.")
    parser.add_argument("--hidden", type=int, default=256, help="Hidden size of the Qwen2-shaped model.")
    parser.add_argument("--layers", type=int, default=4, help="Decoder layers.")
    parser.add_argument("--micro-batch-tokens", type=int, default=2048, help="rl.micro_batch_tokens of 'micro'.")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads.")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present, else the CPU), cpu, cuda, cuda:N.")
    parser.add_argument("--only", default=",".join(SETTINGS), help="Comma-separated settings to run.")
    parser.add_argument("--markdown", action="store_true", help="Print a markdown table.")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--work", default="/tmp/polyrl-memory-bench", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in args.only if s not in SETTINGS]
    if unknown:
        parser.error(f"unknown setting(s) {', '.join(unknown)}; choose from {', '.join(SETTINGS)}")
    if not 0 < args.prompt_length < args.length:
        parser.error("--prompt-length must be between 0 and --length")
    args.device = device_option(args.device, "memory")
    return args


def main() -> None:
    args = parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    if args.one:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        print(json.dumps(measure(args, args.one)))
        return
    load = os.getloadavg()[0]
    results = run_all(args)
    cuda = device(args).type == "cuda"
    trl = next((r for r in results if r["setting"] == "trl" and "error" not in r), None)
    key = "cuda_peak_mib" if cuda else "rss_peak_mib"
    header = ["setting", "what", "peak MiB" + (" (CUDA)" if cuda else " (RSS)"), "vs TRL", "update s"]
    rows = []
    for r in results:
        if "error" in r:
            rows.append([r["setting"], SETTINGS[r["setting"]], "failed", "", r["error"][:60]])
            continue
        ratio = f"{r[key] / trl[key]:.2f}×" if trl else ""
        rows.append([r["setting"], SETTINGS[r["setting"]], f"{r[key]:.0f}", ratio, f"{r['seconds']:.1f}"])
    machine = (
        f"{cpu_model()}, {os.cpu_count()} cores (load average {load:.1f} at start), "
        f"{'CUDA ' + torch.cuda.get_device_name(device(args)) if cuda else 'no GPU'}, torch {torch.__version__} with "
        f"{args.threads} thread(s), Python {platform.python_version()}"
    )
    shape = f"model {args.model}" if args.model else f"Qwen2-shaped model, hidden {args.hidden}, {args.layers} layers"
    setup = (
        f"{shape}, vocabulary {vocab_size(args):,}; one group of "
        f"G={args.group_size} × L={args.length} tokens (prompt {args.prompt_length}); micro-batches of "
        f"{args.micro_batch_tokens} tokens"
    )
    if args.markdown:
        print(f"Machine: {machine}.\n\nSetup: {setup}.\n\n{markdown_table(header, rows)}")
    else:
        print(setup, machine, markdown_table(header, rows), sep="\n")


if __name__ == "__main__":
    main()
