"""Generation and one RL step on a GPU, side by side: polyrl vs transformers' ``generate`` and TRL's GRPOTrainer.

    python benchmarks/gpu_throughput.py --model DIR [--prompts 32] [--group-size 8] [--new-tokens 128]
                                        [--dtype float32] [--device cuda] [--steps 3] [--out FILE.json]

The batch of issue #34: 32 prompts × G=8 completions of 128 new tokens (EOS ignored, so every row decodes all
128: the same work for every engine, whatever the random weights emit), prompts from the default job's tasks
through the model's chat template. In one process, one after another, each timed after a warm-up call:

1. transformers ``model.generate`` (sampling at temperature 1, its own KV cache);
2. polyrl's ``TransformersBackend`` (the packed forward, a static KV cache, each decode step a CUDA graph on CUDA),
   and the same with ``generation.cuda_graphs`` off; greedy tokens of both checked equal to transformers' greedy
   decode on the first prompts (TF32 off, so the three compute the same float32 matmuls);
3. one polyrl RL step (collect → score → advantages → update) at that batch, through the Trainer's own RL stage,
   ``rl.skip_zero_advantage=false`` so that the update runs forward and backward over every row whatever the
   rewards of a random model;
4. one TRL ``GRPOTrainer`` step at that batch (generation + loss + backward + AdamW, ``loss_type="dapo"``,
   ``beta=0``), a reward function that returns 0: TRL computes its loss over every row too.

Prints one JSON object (and writes it with ``--out``): seconds of each, the ratios, the greedy check. Runs on a CPU
as well (``--device cpu``, small sizes) so that the script itself is tested where there is no GPU.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device, repeats: int = 1) -> float:
    """Seconds per call of ``fn`` after one warm-up call (median of ``repeats``)."""
    fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def prompt_ids(tokenizer, model_dir: str, prompts: int) -> list[list[int]]:
    """``prompts`` distinct problems of the default job's tasks, in the chat template of ``tokenizer`` (the
    model's; prompts need no padding settings, so any loader's tokenizer of ``model_dir`` gives the same ids)."""
    import numpy as np

    from polyrl.cli.train import default_config_path
    from polyrl.policy import PromptBuilder
    from polyrl.tasks import resolve_task
    from polyrl.train.config import load_config

    cfg = load_config(default_config_path(), [f"model.path={model_dir}"])
    builder = PromptBuilder(tokenizer, cfg.prompt)
    rng = np.random.default_rng(0)
    tasks = [resolve_task(spec.name, env=cfg.env, harness=spec.harness, dataset=spec.dataset) for spec in cfg.tasks]
    out = []
    for k in range(prompts):
        task = tasks[k % len(tasks)]
        out.append(builder.ids(task.generate(int(rng.integers(2**31)), cfg.tasks[k % len(tasks)].difficulty)))
    return out


def generation(args, device: torch.device) -> dict:
    from transformers import AutoModelForCausalLM

    from polyrl.forward.prefill import left_pad
    from polyrl.policy.generation import TransformersBackend
    from polyrl.policy.loading import ModelConfig, load_policy

    policy = load_policy(ModelConfig(path=args.model, dtype=args.dtype, autocast="none"), device=device)
    model, tok = policy.model.eval(), policy.tokenizer
    model.generation_config.eos_token_id = None  # every row decodes all new tokens
    distinct = prompt_ids(tok, args.model, args.prompts)
    batch = [p for p in distinct for _ in range(args.group_size)]
    ids, attention = (t.to(device) for t in left_pad(batch, tok.pad_token_id))
    hf_model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype)).to(device).eval()

    @torch.no_grad()
    def hf(inputs=ids, mask=attention, new=args.new_tokens, sample=True):
        return hf_model.generate(
            input_ids=inputs,
            attention_mask=mask,
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=sample,
            temperature=1.0 if sample else None,
            top_p=1.0 if sample else None,
            top_k=0 if sample else None,
            pad_token_id=tok.pad_token_id,
        )

    out = {"hf_generate_s": timed(hf, device, args.repeats)}
    for graphs in (True, False):
        backend = TransformersBackend(model, tok, batch_size=len(batch), device=device, cuda_graphs=graphs)
        key = "polyrl_generate_s" if graphs else "polyrl_generate_eager_s"
        out[key] = timed(lambda b=backend: b.generate(batch, max_new_tokens=args.new_tokens), device, args.repeats)
    out["speedup_vs_hf"] = out["hf_generate_s"] / out["polyrl_generate_s"]
    check = distinct[: args.greedy_check]
    ref_ids, ref_mask = (t.to(device) for t in left_pad(check, tok.pad_token_id))
    ref = hf(ref_ids, ref_mask, args.greedy_tokens, sample=False)[:, ref_ids.shape[1] :].tolist()
    backend = TransformersBackend(model, tok, device=device)
    ours = [g.completion_ids for g in backend.generate(check, max_new_tokens=args.greedy_tokens, greedy=True)]
    out["greedy_equal"] = f"{sum(a == b for a, b in zip(ours, ref))}/{len(check)}"
    return out


def polyrl_step(args, device: torch.device, work: Path) -> float:
    """Seconds of one RL step of the Trainer's own stage (after a warm-up step)."""
    from polyrl.train.config import load_config
    from polyrl.train.placement import LocalPlacement
    from polyrl.train.trainer import Trainer

    overrides = [
        f"run_dir={work / 'polyrl'}",
        f"model.path={args.model}",
        f"model.dtype={args.dtype}",
        "model.autocast=none",
        "sft.enabled=false",
        f"rl.prompts_per_step={args.prompts}",
        f"rl.group_size={args.group_size}",
        f"rl.max_new_tokens={args.new_tokens}",
        "rl.dynamic_sampling=false",
        "rl.skip_zero_advantage=false",
        f"rl.steps={args.steps + 1}",
        "tensorboard=false",
        "progress=false",
    ]
    from polyrl.cli.train import default_config_path

    trainer = Trainer(load_config(default_config_path(), overrides), placement=LocalPlacement(device))
    trainer.parts.policy.model.generation_config.eos_token_id = None
    trainer.parts.backend._eos = []  # full-length completions, as for the other engines
    rl = trainer.rl
    cfg = trainer.config.rl
    trainer.state.training.make_optimizer(cfg.lr, 0, cfg.steps, cosine=False, weight_decay=cfg.weight_decay)
    times = []
    for k in range(args.steps + 1):
        _sync(device)
        t0 = time.perf_counter()
        rl.step(k, trainer.parts.seed_step("rl", k))
        _sync(device)
        times.append(time.perf_counter() - t0)
    trainer._close()
    return sorted(times[1:])[len(times[1:]) // 2]


def trl_step(args, device: torch.device, work: Path) -> float | None:
    """Seconds of one TRL GRPOTrainer step at the same batch (median after the first), or None without TRL."""
    try:
        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer
    except ImportError:
        return None
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    tok = AutoTokenizer.from_pretrained(args.model)
    ids = prompt_ids(tok, args.model, args.prompts)
    data = Dataset.from_list([{"prompt": tok.decode(p)} for p in ids] * (args.steps + 1))
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype))
    model.generation_config.eos_token_id = None
    config = GRPOConfig(
        output_dir=str(work / "trl"),
        per_device_train_batch_size=args.prompts * args.group_size,
        num_generations=args.group_size,
        max_completion_length=args.new_tokens,
        learning_rate=1e-6,
        beta=0.0,
        loss_type="dapo",
        max_steps=args.steps + 1,
        logging_steps=1000,
        save_strategy="no",
        report_to=[],
        use_cpu=device.type == "cpu",
        bf16=False,
        temperature=1.0,
        top_k=0,
    )
    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            _sync(device)
            times.append(time.perf_counter())

        def on_step_end(self, *a, **k):
            _sync(device)
            times[-1] = time.perf_counter() - times[-1]

    trainer = GRPOTrainer(
        model=model, reward_funcs=[lambda completions, **_: [0.0] * len(completions)], args=config, train_dataset=data
    )
    trainer.add_callback(Clock())
    trainer.train()
    rest = times[1:] or times
    return sorted(rest)[len(rest) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="A Hugging Face directory (gpu/make_model.py writes one).")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=2, help="RL steps timed after the warm-up one.")
    parser.add_argument("--repeats", type=int, default=3, help="Timed generation calls (median).")
    parser.add_argument("--greedy-check", type=int, default=8, help="Prompts whose greedy tokens are compared.")
    parser.add_argument("--greedy-tokens", type=int, default=32)
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    from machine import device_option  # benchmarks/machine.py (scripts run from benchmarks/)

    from polyrl.device import describe

    device = device_option(args.device, "gpu_throughput")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    result = {"device": describe(device), "torch": torch.__version__, "args": vars(args)}
    result.update(generation(args, device))
    with tempfile.TemporaryDirectory() as tmp:
        result["polyrl_rl_step_s"] = polyrl_step(args, device, Path(tmp))
        trl = None if args.skip_trl else trl_step(args, device, Path(tmp))
    result["trl_rl_step_s"] = trl
    if trl:
        result["rl_step_vs_trl"] = result["polyrl_rl_step_s"] / trl
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
