"""Generation and one RL step on a GPU, side by side: polyrl vs transformers' ``generate`` and TRL's GRPOTrainer.

    python benchmarks/gpu_throughput.py --model DIR [--prompts 32] [--group-size 8] [--new-tokens 128]
                                        [--dtype float32] [--autocast auto] [--device cuda] [--steps 2]
                                        [--out FILE.json]

The batch of issue #34: 32 prompts × G=8 completions of 128 new tokens (EOS ignored, so every row decodes all
128: the same work for every engine, whatever the random weights emit), prompts from the default job's tasks
through the model's chat template. polyrl is measured as training runs it (issue #42: the benchmark built its own
backend, in another precision and without the Trainer's deterministic mode): one Trainer is built from the default
config at this batch (``--dtype``, ``--autocast``: ``auto``, the default, is bf16 over float32 weights on a GPU for a
model at least 384 wide), and its own generation backend and RL stage are timed. In one process, one after another,
each timed after a warm-up call:

1. transformers ``model.generate`` (sampling at temperature 1, its own KV cache), under the same autocast as polyrl;
2. the Trainer's generation backend (the packed forward, a static KV cache, each decode step a replayed CUDA graph
   on CUDA), and the same model with ``generation.cuda_graphs`` off; its CUDA graph captures, replays and
   fallbacks, and FlexAttention's, are recorded — a fallback fails the run (exit 1): the figures would not be of
   what they claim;
3. greedy tokens of polyrl (in float32, TF32 off, graphs on) checked equal to transformers' greedy decode on the
   first prompts;
4. one polyrl RL step (collect → score → advantages → update) through the Trainer's own RL stage,
   ``rl.skip_zero_advantage=false`` so that the update runs forward and backward over every row whatever the
   rewards of a random model;
5. one TRL ``GRPOTrainer`` step at that batch (generation + loss + backward + AdamW, ``loss_type="dapo"``,
   ``beta=0``, bf16 where polyrl's autocast is), a reward function that returns 0: TRL computes its loss over
   every row too.

transformers and TRL run with torch's deterministic mode off, as they do by default; polyrl with its own
(``deterministic: true``). ``goals`` says whether issue #34's goals hold in this run (generation ≥ 5× transformers',
an RL step ≤ 1/3 of TRL's). Prints one JSON object; with ``--out`` it is written there as each figure comes
(``"done": true`` once all are): a run stopped at its time limit keeps what it measured. Runs on a CPU as well
(``--device cpu``, small sizes) so that the script itself is tested where there is no GPU, and under the device guard
(``tests/test_gpu_check_entry_points.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
GENERATION_GOAL, RL_STEP_GOAL = 5.0, 1 / 3
"""Issue #34's goals: generation at least 5× transformers' ``generate``, an RL step at most 1/3 of TRL's."""


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


def training(args, device: torch.device, work: Path):
    """The Trainer of the default config at this batch, on ``device``: what a run builds (torch configured, the
    policy loaded and its autocast resolved, the generation backend made through the placement)."""
    from polyrl.cli.train import default_config_path
    from polyrl.train.config import load_config
    from polyrl.train.placement import LocalPlacement
    from polyrl.train.trainer import Trainer

    overrides = [
        f"run_dir={work / 'polyrl'}",
        f"model.path={args.model}",
        f"model.dtype={args.dtype}",
        f"model.autocast={args.autocast}",
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
    trainer = Trainer(load_config(default_config_path(), overrides), placement=LocalPlacement(device))
    trainer.parts.policy.model.generation_config.eos_token_id = None
    trainer.parts.backend._eos = []  # full-length completions, as for the other engines
    return trainer


@contextlib.contextmanager
def _others_defaults():
    """transformers and TRL as they run by default: torch's deterministic mode off (polyrl's Trainer turned it on)."""
    on, warn_only = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(False)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(on, warn_only=warn_only)


def _autocast(device: torch.device, mode: str):
    from polyrl.forward.precision import AUTOCAST_DTYPES

    if mode == "none" or device.type not in ("cuda", "cpu"):
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=AUTOCAST_DTYPES[mode])


class Results(dict):
    """The figures so far; :meth:`record` adds some and rewrites ``out`` (JSON, replaced atomically), so that a run
    stopped at its time limit still returns what it measured."""

    def __init__(self, out: Path | None, **figures):
        super().__init__(figures)
        self.out = out

    def record(self, **figures) -> None:
        self.update(figures)
        if self.out is not None:
            tmp = self.out.with_name(self.out.name + ".tmp")
            tmp.write_text(json.dumps(self, indent=2, default=str) + "\n")
            tmp.replace(self.out)


def generation(args, device: torch.device, trainer, results: Results) -> None:
    from transformers import AutoModelForCausalLM

    from polyrl.forward.precision import autocast_mode, set_autocast
    from polyrl.forward.prefill import left_pad
    from polyrl.policy.generation import TransformersBackend

    model, tok, cfg = trainer.parts.policy.model, trainer.parts.policy.tokenizer, trainer.config
    mode = autocast_mode(model)
    results.record(
        configuration={
            "autocast": mode,
            "dtype": args.dtype,
            "deterministic": cfg.deterministic,
            "cuda_graphs": cfg.generation.cuda_graphs,
            "batch_size": cfg.generation.batch_size,
        }
    )
    distinct = prompt_ids(tok, args.model, args.prompts)
    batch = [p for p in distinct for _ in range(args.group_size)]
    ids, attention = (t.to(device) for t in left_pad(batch, tok.pad_token_id))
    hf_model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype)).to(device).eval()

    @torch.no_grad()
    def hf(inputs=ids, mask=attention, new=args.new_tokens, sample=True, precision=mode):
        with _others_defaults(), _autocast(device, precision):
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

    results.record(hf_generate_s=timed(hf, device, args.repeats))
    sampling = {"max_new_tokens": args.new_tokens, "temperature": cfg.rl.temperature, "top_p": cfg.rl.top_p}
    trained = trainer.parts.backend
    results.record(polyrl_generate_s=timed(lambda: trained.generate(batch, **sampling), device, args.repeats))
    results.record(graphs=trained.graph_stats(), speedup_vs_hf=results["hf_generate_s"] / results["polyrl_generate_s"])
    eager = TransformersBackend(
        model, tok, cfg.generation.batch_size, cfg.rl.share_prompts, device=device, cuda_graphs=False
    )
    eager._eos = []
    results.record(polyrl_generate_eager_s=timed(lambda: eager.generate(batch, **sampling), device, args.repeats))
    check = distinct[: args.greedy_check]
    ref_ids, ref_mask = (t.to(device) for t in left_pad(check, tok.pad_token_id))
    ref = hf(ref_ids, ref_mask, args.greedy_tokens, sample=False, precision="none")[:, ref_ids.shape[1] :].tolist()
    set_autocast(model, "none")  # the greedy check in float32: the same matmuls as transformers' (TF32 off)
    try:
        fp32 = TransformersBackend(model, tok, device=device)
        ours = [g.completion_ids for g in fp32.generate(check, max_new_tokens=args.greedy_tokens, greedy=True)]
    finally:
        set_autocast(model, mode)
    equal = sum(a == b for a, b in zip(ours, ref))
    results.record(greedy_equal=f"{equal}/{len(check)}", greedy_graphs=fp32.graph_stats())


def polyrl_step(args, device: torch.device, trainer) -> float:
    """Seconds of one RL step of the Trainer's own stage (median of ``--steps``, after a warm-up step)."""
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
    return sorted(times[1:])[len(times[1:]) // 2]


def trl_step(args, device: torch.device, work: Path, bf16: bool) -> float | None:
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
        bf16=bf16,
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
    with _others_defaults():
        trainer.train()
    rest = times[1:] or times
    return sorted(rest)[len(rest) // 2]


def fallbacks(result: dict) -> list[str]:
    """Every CUDA graph and FlexAttention fallback the run recorded: each makes the run's figures not those of the
    kernels it claims to measure."""
    graphs = [f for key in ("graphs", "greedy_graphs") for f in (result.get(key) or {}).get("fallbacks", [])]
    return graphs + list(result.get("attention_fallbacks", []))


def measure(args, device: torch.device, out: Path | None = None) -> dict:
    """Every figure of the module docstring on ``device``, each written to ``out`` as soon as it exists."""
    from polyrl.device import describe
    from polyrl.forward import attention_kernels
    from polyrl.forward.precision import autocast_mode

    results = Results(out, device=describe(device), torch=torch.__version__, args=vars(args), done=False)
    results.record()
    with tempfile.TemporaryDirectory() as tmp:
        trainer = training(args, device, Path(tmp))
        try:
            generation(args, device, trainer, results)
            results.record(polyrl_rl_step_s=polyrl_step(args, device, trainer))
            results.record(graphs=trainer.parts.backend.graph_stats())
            bf16 = autocast_mode(trainer.parts.policy.model) == "bf16"
        finally:
            trainer._close()
        trl = None if args.skip_trl else trl_step(args, device, Path(tmp), bf16)
    results.record(trl_rl_step_s=trl, attention_fallbacks=list(attention_kernels.FALLBACKS))
    goals = {f"generation >= {GENERATION_GOAL:g}x transformers": results["speedup_vs_hf"] >= GENERATION_GOAL}
    if trl:
        results.record(rl_step_vs_trl=results["polyrl_rl_step_s"] / trl)
        goals[f"rl step <= {RL_STEP_GOAL:.2f} of TRL's"] = results["rl_step_vs_trl"] <= RL_STEP_GOAL
    results.record(goals=goals, fallbacks=fallbacks(results), done=True)
    return dict(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="A Hugging Face directory (gpu/make_model.py writes one).")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--autocast", default="auto", choices=["auto", "none", "bf16"], help="model.autocast.")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=2, help="RL steps timed after the warm-up one.")
    parser.add_argument("--repeats", type=int, default=3, help="Timed generation calls (median).")
    parser.add_argument("--greedy-check", type=int, default=8, help="Prompts whose greedy tokens are compared.")
    parser.add_argument("--greedy-tokens", type=int, default=32)
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--out", type=Path, help="Write the result here (JSON), each figure as soon as it exists.")
    args = parser.parse_args()
    from machine import device_option  # benchmarks/machine.py (scripts run from benchmarks/)

    device = device_option(args.device, "gpu_throughput")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    result = measure(args, device, args.out)
    print(json.dumps(result, indent=2, default=str))
    if result["fallbacks"]:
        print(f"gpu_throughput: {len(result['fallbacks'])} fallback(s): {result['fallbacks'][0]}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
