"""Hugging Face vision-language policies on a device, in bf16 autocast: an SFT step and an RL step of random-weight
models of real VLMs' shapes, the training forward's log-probs against generation's, step times and peak memory.
Exits 1 when a check fails.

    python benchmarks/vlm_check.py --device cuda --out vlm_check.json [--small] [--prompts 4] [--group-size 4]
                                   [--new-tokens 32] [--shapes smolvlm-256m,qwen2-vl-2b] [--work DIR]
                                   [--layers N] [--vision-layers N]

For each shape (``benchmarks/gpu/make_vlm.py``: SmolVLM-256M-Instruct's; Qwen2-VL-2B-Instruct's at 4 of its decoder
layers and 4 of its vision blocks) the model is made on the device with random float32 weights and saved, then
loaded as polyrl loads a policy (``model.autocast: bf16``, ``model.images.size`` the family's) on the device, and:

- ``--prompts`` count_shapes problems (one picture each) × ``--group-size`` completions of ``--new-tokens`` are
  sampled (temperature 1) with polyrl's generation backend; the training forward (``sequence_logprobs``, the
  update's) scores the same tokens, and the two sets of log-probs must agree within
  ``polyrl.forward.precision.BF16_LOGPROB_TOLERANCE`` (what the bf16 tests hold text to);
- one RL step: the sampled groups with alternating rewards and generation's log-probs as behaviour log-probs
  through ``prepare_update`` and ``policy_update`` (GRPO's defaults, AdamW), then one SFT step on the prompts with
  a short answer — each loss finite, no step skipped, the weights moved by each;
- each step's wall time (after the device is synchronised) and peak memory (CUDA's allocator; None on a CPU).

The result is rewritten to ``--out`` as each figure comes (a check stopped at its time limit still returns what it
measured). ``benchmarks/gpu_check.sh vlm`` runs it; ``--small`` is the CPU run of the same code at a test's width.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch
from machine import device_option  # benchmarks/machine.py (scripts run from benchmarks/)

from polyrl.algos.objective_stats import logprob_mismatch
from polyrl.forward import collate, sequence_logprobs
from polyrl.forward.precision import BF16_LOGPROB_TOLERANCE, autocast_mode
from polyrl.learner.settings import UpdateSettings
from polyrl.learner.sft_step import sft_step
from polyrl.learner.update import policy_update
from polyrl.learner.update_batch import prepare_update
from polyrl.policy import PromptBuilder, TransformersBackend
from polyrl.policy.loading import ModelConfig, load_policy
from polyrl.policy.prompts import PromptConfig
from polyrl.rollout import Trajectory
from polyrl.tasks import Problem, Verdict, get_task
from polyrl.train.config import RLConfig

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))
from make_vlm import HERE as SHAPE_CONFIGS  # benchmarks/gpu/make_vlm.py
from make_vlm import PICTURE_SIDE, make

SHAPES = {"smolvlm-256m": {}, "qwen2-vl-2b": {"layers": 4, "vision_layers": 4}}
"""The shapes checked, and how much of each is kept (Qwen2-VL-2B at its widths, 4 + 4 layers)."""


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(device: torch.device, fn):
    """``fn()``, its wall seconds and the peak memory it took on a CUDA device (GiB; None elsewhere)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    _sync(device)
    start = time.perf_counter()
    value = fn()
    _sync(device)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    return value, round(seconds, 3), None if peak is None else round(peak, 2)


def _mismatch(gens, batch, logp) -> dict[str, float]:
    pad = torch.nn.utils.rnn.pad_sequence
    training = [logp[i][batch.loss_mask[i].bool()].float().cpu() for i in range(len(gens))]
    behaviour = pad([torch.tensor(g.logprobs) for g in gens], batch_first=True)
    mask = pad([torch.ones(len(g.logprobs)) for g in gens], batch_first=True)
    stats = logprob_mismatch(behaviour, pad(training, batch_first=True), mask)
    return {k: round(float(v), 5) for k, v in stats.items()}


def _within_tolerance(stats: dict[str, float]) -> bool:
    return (
        stats["mismatch_abs_mean"] < BF16_LOGPROB_TOLERANCE["mismatch_abs_mean"]
        and stats["mismatch_abs_max"] < BF16_LOGPROB_TOLERANCE["mismatch_abs_max"]
        and abs(stats["mismatch_ratio_mean"] - 1) < BF16_LOGPROB_TOLERANCE["mismatch_ratio_mean"]
    )


def _trajectories(gens, group_size: int) -> list[Trajectory]:
    """The sampled completions as one task's groups, rewards 1 and 0 alternating (every group has a spread)."""
    problem = Problem("count_shapes", "q", "q", None, None, 0, "train", 0.0, {})
    trajs = [Trajectory.from_generation(problem, g, group=k // group_size, behaviour=True) for k, g in enumerate(gens)]
    for k, t in enumerate(trajs):
        t.reward, t.verdict = float(k % 2), Verdict(float(k % 2), k % 2 == 1, "")
    return trajs


def check_model(
    path: str, device: torch.device, family: str, side: int | None, prompts: int, group_size: int, new_tokens: int
) -> dict:
    """The checks of one saved model on ``device`` (see the module's docstring); ``side``: ``model.images.size``."""
    config = ModelConfig(path=path, autocast="bf16", images={"size": side} if side else {})
    policy, load_s, _ = _timed(device, lambda: load_policy(config, device=device))
    model, tokenizer = policy.model, policy.tokenizer
    result: dict = {"family": family, "autocast": autocast_mode(model), "load_s": load_s}
    result["picture_side"] = policy.image_input.size
    result["image_tokens"] = policy.image_input.tokens
    result["parameters_m"] = round(sum(p.numel() for p in model.parameters()) / 1e6, 1)
    builder = PromptBuilder(tokenizer, PromptConfig(field="question", style="terse"), policy.image_input)
    task = get_task("count_shapes")
    ids = [builder.ids(task.generate(seed, "easy")) for seed in range(prompts)]
    backend = TransformersBackend(model, tokenizer, device=device)
    torch.manual_seed(0)
    rows = [p for p in ids for _ in range(group_size)]
    gens, result["generate_s"], result["generate_peak_gib"] = _timed(
        device, lambda: backend.generate(rows, max_new_tokens=new_tokens, temperature=1.0)
    )
    result["new_tokens"] = sum(len(g.completion_ids) for g in gens)
    batch = collate([(g.prompt_ids, g.completion_ids) for g in gens], tokenizer.pad_token_id)
    with torch.no_grad():
        logp, _ = sequence_logprobs(model, batch.to(device))
    result["logprob_mismatch"] = _mismatch(gens, batch, logp)
    result["logprobs_ok"] = _within_tolerance(result["logprob_mismatch"])

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    answer = tokenizer("<answer>3</answer>", add_special_tokens=False).input_ids
    pad = tokenizer.pad_token_id
    embedding = next(p for n, p in model.named_parameters() if "embed_tokens" in n and p.requires_grad)
    seen = [embedding.detach().clone()]  # before each step, and after the last: each step moves the weights
    settings = UpdateSettings.from_config(RLConfig(temperature=1.0), tis_cap=2.0)
    update = prepare_update(_trajectories(gens, group_size), ["count_shapes"], pad, settings)
    stats, result["rl_update_s"], result["rl_peak_gib"] = _timed(
        device, lambda: policy_update(model, optimizer, update, settings, params, device=device)
    )
    seen.append(embedding.detach().clone())
    loss, result["sft_step_s"], result["sft_peak_gib"] = _timed(
        device, lambda: sft_step(model, optimizer, params, pad, [(p, answer) for p in ids], None, device)
    )
    result["sft_loss"] = loss
    result["rl_step_s"] = round(result["generate_s"] + result["rl_update_s"], 3)
    result["rl_loss"] = stats.loss
    result["rl_skipped_updates"] = stats.skipped_updates
    result["rl_mismatch_abs_max"] = round(float(stats.objective.get("mismatch_abs_max", float("nan"))), 5)
    seen.append(embedding.detach())
    finite = all(x is not None and x == x and abs(x) != float("inf") for x in (loss, stats.loss))
    moved = not torch.equal(seen[0], seen[1]) and not torch.equal(seen[1], seen[2])
    result["ok"] = (
        result["autocast"] == "bf16" and result["logprobs_ok"] and finite and moved and not stats.skipped_updates
    )
    return result


def measure(args, device: torch.device, out: Path | None) -> dict:
    """Every shape of ``args.shapes``, the result rewritten to ``out`` after each figure's model."""
    result: dict = {"device": str(device), "torch": torch.__version__, "done": False, "models": {}}
    if device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name(device)
    import transformers

    result["transformers"] = transformers.__version__
    _write(result, out)
    work = Path(args.work or tempfile.mkdtemp(prefix="vlm_check_"))
    for shape in args.shapes.split(","):
        cut = {} if args.small else dict(SHAPES[shape])
        cut.update({k: v for k, v in (("layers", args.layers), ("vision_layers", args.vision_layers)) if v})
        make_device = "cpu" if device.type == "meta" else str(device)
        made = functools.partial(make, shape, work / shape, make_device, small=args.small, **cut)
        family = json.loads((SHAPE_CONFIGS / shape / "config.json").read_text())["model_type"]
        side = PICTURE_SIDE[family][args.small] if family in PICTURE_SIDE else None
        make_s = None
        try:
            path, make_s, _ = _timed(device, made)
            model_result = check_model(str(path), device, family, side, args.prompts, args.group_size, args.new_tokens)
        except Exception as exc:  # recorded as this shape's failure (traceback in the log); the next shape still runs
            traceback.print_exc()
            model_result = {"family": family, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
        result["models"][shape] = {"make_s": make_s, **model_result}
        _write(result, out)
    result["ok"] = all(m["ok"] for m in result["models"].values())
    result["done"] = True
    _write(result, out)
    return result


def _write(result: dict, out: Path | None) -> None:
    if out is None:
        return
    partial = out.with_suffix(".partial")
    partial.write_text(json.dumps(result, indent=1, default=str))
    partial.replace(out)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto", help="auto (CUDA when present, else the CPU), cpu, cuda, cuda:N.")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--layers", type=int, help="Decoder layers each shape keeps (default: SHAPES').")
    parser.add_argument("--vision-layers", type=int, help="Vision blocks each shape keeps (default: SHAPES').")
    parser.add_argument("--small", action="store_true", help="Each shape at a CPU test's width (make_vlm --small).")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--work", help="Where the model directories are made (default: a temporary folder).")
    parser.add_argument("--out", type=Path, help="Write the result as JSON here, as each figure comes.")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    unknown = [s for s in args.shapes.split(",") if s not in SHAPES]
    if unknown:
        print(f"vlm_check: error: --shapes: unknown {unknown}; choose from {', '.join(SHAPES)}", file=sys.stderr)
        sys.exit(2)
    device = device_option(args.device, "vlm_check")
    torch.set_num_threads(args.threads)
    result = measure(args, device, args.out)
    print(json.dumps(result, indent=1, default=str))
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
