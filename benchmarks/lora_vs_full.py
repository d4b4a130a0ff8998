"""LoRA adapters against full fine-tuning on a job's recipe: seconds per SFT and RL step, peak memory, held-out
accuracy after SFT and after RL — each variant in its own process, one after the other, side by side in one table.

    python benchmarks/lora_vs_full.py                              # configs/smollm2.yaml at its full length
    python benchmarks/lora_vs_full.py --sft-steps 4 --rl-steps 4   # a quick look at time and memory only
    python benchmarks/lora_vs_full.py --model HuggingFaceTB/SmolLM2-135M-Instruct   # the model by Hub id

LoRA (``model.lora``: rank ``--lora-r`` 16, alpha twice the rank, every linear layer) trains the adapters only, so it
takes a larger learning rate: ``--lora-lr-scale`` (10×) multiplies the config's SFT and RL learning rates for it.
Peak memory is the process's own high-water mark (``VmHWM`` of ``/proc/self/status``, Linux); elsewhere it is left
out. The LoRA run's ``final_model/adapter/`` (the PEFT adapter it saves beside the merged model) is measured too.
``--out DIR`` keeps the runs (default: a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHILD = """
import sys
from polyrl.cli import run
rc = run(sys.argv[1:])
try:
    hwm = open("/proc/self/status").read().split("VmHWM:")[1].split()[0]
    print(f"VMHWM_KB {hwm}", flush=True)
except (OSError, IndexError):
    pass
sys.exit(rc)
"""


def variant(config: str, run_dir: Path, overrides: list[str]) -> dict:
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, "train", "--config", config, f"run_dir={run_dir}", "progress=false", *overrides],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(overrides)}: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    hwm = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("VMHWM_KB")]
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    times = {
        stage: statistics.median(r["step_time"] for r in records if r.get("stage") == stage and "step_time" in r)
        for stage in ("sft", "rl")
    }
    evals = {p.stem: json.loads(p.read_text())["mean"]["accuracy"] for p in (run_dir / "eval").glob("after_*.json")}
    adapter = run_dir / "final_model" / "adapter" / "adapter_model.safetensors"
    return {
        "adapter_mb": adapter.stat().st_size / 2**20 if adapter.is_file() else None,
        "wall_s": wall,
        "sft_s_per_step": times["sft"],
        "rl_s_per_step": times["rl"],
        "peak_rss_gb": int(hwm[0]) / 2**20 if hwm else None,
        "after_sft": evals.get("after_sft"),
        "after_rl": evals.get("after_rl"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/smollm2.yaml")
    ap.add_argument("--sft-steps", type=int, default=None, help="Override sft.steps (default: the config's).")
    ap.add_argument("--rl-steps", type=int, default=None, help="Override rl.steps (default: the config's).")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lora-lr-scale", type=float, default=10.0)
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--model", default=None, help="model.path for both variants (default: the config's).")
    ap.add_argument("--variants", default="full,lora", help="Comma-separated: full, lora.")
    ap.add_argument("--out", type=Path, default=None, help="Keep the runs here (default: a temporary folder).")
    args = ap.parse_args()
    cfg = yaml.safe_load((ROOT / args.config).read_text())
    common = [f"seed={args.seed}", "checkpoint_every=100000"]
    if args.model is not None:
        common.append(f"model.path={args.model}")
    if args.sft_steps is not None:
        common.append(f"sft.steps={args.sft_steps}")
    if args.rl_steps is not None:
        common.append(f"rl.steps={args.rl_steps}")
    sft_lr, rl_lr = cfg.get("sft", {}).get("lr", 2e-5), cfg.get("rl", {}).get("lr", 1e-5)
    lora = [
        "model.lora.enabled=true",
        f"model.lora.r={args.lora_r}",
        f"model.lora.alpha={2 * args.lora_r}",
        "model.lora.target_modules=all-linear",
        f"sft.lr={sft_lr * args.lora_lr_scale:g}",
        f"rl.lr={rl_lr * args.lora_lr_scale:g}",
    ]
    rows = {}
    with tempfile.TemporaryDirectory(prefix="polyrl_lora_") as tmp:
        out = args.out or Path(tmp)
        for name in args.variants.split(","):
            extra = lora if name == "lora" else []
            rows[name] = variant(args.config, out / name, [*common, *extra])
            print(f"{name}: {json.dumps(rows[name])}", flush=True)

    def pct(x):
        return "—" if x is None else f"{100 * x:.1f}%"

    print(f"\n{args.config}, seed {args.seed}, {' '.join(common)}; LoRA: {' '.join(lora)}")
    print(f"CPU: {cpu_name()}; commit {commit()}\n")
    print("| variant | SFT s/step | RL s/step | peak RSS | after SFT | after RL | wall | adapter |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        rss = "—" if r["peak_rss_gb"] is None else f"{r['peak_rss_gb']:.2f} GB"
        adapter = "—" if r["adapter_mb"] is None else f"{r['adapter_mb']:.1f} MB"
        print(
            f"| {name} | {r['sft_s_per_step']:.2f} | {r['rl_s_per_step']:.2f} | {rss} | {pct(r['after_sft'])} | "
            f"{pct(r['after_rl'])} | {r['wall_s'] / 60:.1f} min | {adapter} |"
        )


def cpu_name() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return "unknown"
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown")


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() + (" + uncommitted changes" if dirty.stdout.strip() else "")


if __name__ == "__main__":
    main()
