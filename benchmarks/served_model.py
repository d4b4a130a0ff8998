"""What the OpenAI-endpoint paths do on a served real model: ``polyrl serve`` a preset, then run ``polyrl synth
qa`` against it and a short RL run whose LLM-judge term (``reward.judge_source``, backend openai) is that model.

Prints how many question/answer pairs the model proposed and how many survived the filters (with the rejection
reasons), and the judge's record: calls, verdicts that parsed, failure reasons, the mean judge score.

    python benchmarks/served_model.py --model smollm2-135m-instruct

The documents are the first ``--doc-chars`` characters of a few of polyrl's own docs (prose a user would point
synth at); the judged policy is the embedded tiny model after a short SFT (the judge is what is measured).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "docs/models.md", "docs/curricula.md")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 300.0) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        if proc.poll() is not None:
            raise SystemExit(f"polyrl serve exited with {proc.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    return time.perf_counter() - t0
        except OSError:
            time.sleep(1.0)
    raise SystemExit(f"polyrl serve was not healthy after {timeout_s:.0f} s")


def polyrl(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyrl", *args], capture_output=True, text=True, env=env, cwd=ROOT)


def run_synth(base_url: str, name: str, tmp: Path, doc_chars: int) -> dict:
    docs = tmp / "docs"
    docs.mkdir()
    for rel in DOCS:
        (docs / Path(rel).name.replace(".md", ".txt")).write_text((ROOT / rel).read_text()[:doc_chars])
    out = tmp / "qa.jsonl"
    t0 = time.perf_counter()
    done = polyrl(
        "synth", "qa", "--docs", str(docs), "--endpoint", base_url, "--model", name, "--out", str(out),
        "--concurrency", "2", "--timeout", "300",
    )  # fmt: skip
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed", "wall_s": wall}
    report = json.loads(Path(f"{out}.report.json").read_text())
    rows = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    return {"wall_s": wall, "report": report, "examples": rows[:3]}


def run_judge(base_url: str, name: str, tmp: Path, steps: int) -> dict:
    run = tmp / "judge_run"
    overrides = [
        "--config", "configs/judge_demo.yaml", f"run_dir={run}", "sft.steps=150", f"rl.steps={steps}",
        "rl.prompts_per_step=4", "rl.group_size=4", "eval.problems_per_task=4", "progress=false",
        "reward.judge_source.backend=openai", f"reward.judge_source.base_url={base_url}",
        f"reward.judge_source.model={name}", "reward.judge_source.max_tokens=96",
        "reward.judge_source.timeout_s=300", "reward.judge_source.max_concurrency=4",
    ]  # fmt: skip
    t0 = time.perf_counter()
    done = polyrl("train", *overrides)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1], "wall_s": wall}
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in records if r.get("stage") == "rl"]
    judged = len(rl) * 16
    fails = {}
    for r in rl:
        for k, v in r.items():
            if k.startswith("reward_failures/judge") and isinstance(v, (int, float)):
                fails[k] = fails.get(k, 0) + v
    terms = [r["reward_terms/judge"] for r in rl if isinstance(r.get("reward_terms/judge"), (int, float))]
    return {
        "wall_s": wall,
        "rl_steps": len(rl),
        "judged": judged,
        "failures": fails,
        "mean_judge_term": sum(terms) / len(terms) if terms else None,
        "keys": sorted({k for r in rl for k in r if "judge" in k}),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct", help="Preset, checkpoint directory or .gguf file.")
    ap.add_argument("--doc-chars", type=int, default=3000, help="Characters of each document given to synth qa.")
    ap.add_argument("--judge-steps", type=int, default=3, help="RL steps of the judged run (16 judgments each).")
    args = ap.parse_args()
    port, name = free_port(), "served"
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    server = subprocess.Popen(
        [sys.executable, "-m", "polyrl", "serve", args.model, "--port", str(port), "--model-name", name],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="polyrl_served_"))
    try:
        up = wait_healthy(url, server)
        synth = run_synth(f"{url}/v1", name, tmp, args.doc_chars)
        judge = run_judge(f"{url}/v1", name, tmp, args.judge_steps)
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    result = {"model": args.model, "server_ready_s": up, "synth": synth, "judge": judge}
    print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
