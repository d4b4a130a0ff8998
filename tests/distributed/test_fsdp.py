"""Multi-process training (FSDP2 on CPU with gloo, launched by ``polyrl train --nproc N`` → torchrun).

The contract: on the same global batch, 2 processes train what 1 process trains (per-step losses within float32
rounding of the terms they sum, final weights within 1e-4: only the order of float sums differs); a 2-process run killed
with SIGKILL mid-RL and resumed ends with exactly the weights of an uninterrupted one; impossible
combinations are one line and exit code 2 before any process starts.
"""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from cli_errors import one_error_line
from hub_cache import lay_out

from polyrl.cli import run as cli

TINY_FSDP = {
    "seed": 0,
    "model": {"path": "tiny", "tiny": {"hidden_size": 32, "intermediate_size": 64, "num_layers": 2, "num_heads": 2}},
    "prompt": {"field": "question"},
    "tasks": [{"name": "addition", "difficulty": "easy"}, {"name": "sort_digits", "difficulty": "easy"}],
    # SFT in micro-batches too: a different number of passes on each rank, padded with idle passes
    "sft": {"steps": 2, "batch_size": 8, "warmup_steps": 1, "micro_batch_tokens": 64},
    "rl": {
        "steps": 4,
        "prompts_per_step": 4,
        "group_size": 4,
        "max_new_tokens": 8,
        "epochs": 2,
        "minibatches": 2,
        "micro_batch_tokens": 96,  # several micro-batches, a different number on each rank
        "kl_coef": 0.05,  # the sharded reference
        "dynamic_sampling": False,
    },
    # rewards differ within groups even before the policy is right; majority vote is scored across ranks
    "reward": {"length": 0.5, "majority_vote": 0.2},
    "eval": {"problems_per_task": 4, "pass_k": 2},
    "checkpoint_every": 2,
    "tensorboard": False,
    "progress": False,
    "threads": 1,
}

WEIGHT_ATOL = 1e-4

FLOAT32_EPS = float(torch.finfo(torch.float32).eps)
LOSS_ULPS = 512
"""How many float32 roundings of its terms' scale two processes' losses of one step may differ by. One process and
two add the same terms in another order (each rank sums its rows, FSDP sums the ranks' gradients) and run the model
on other micro-batch shapes, so each matmul's kernel accumulates its dot products (≤ 64 terms here) in another order.
A per-token log-prob then moves by about √64 roundings of logits of magnitude ≲ 10, ≈ 80 ulps. Measured on an AMX
Xeon: 0.2 ulp on most steps, and 118 ulps on a step whose loss was the KL term alone (every group without signal):
the budget is 4x that. An RL loss sums terms of both signs to nearly 0 (-6.5e-4 from terms of size ~1), so its own
value is no scale for its error; :func:`_loss_scale` is."""

LOGPROB_SCALE = 10.0
"""The magnitude of a log-prob (logits ≲ 10): the scale of the rounding of each log-ratio the KL term reads."""


def _loss_scale(record: dict) -> float:
    """The scale of the rounding error of a step's logged loss. SFT: the terms (-log p / tokens) share one sign, so
    |loss| itself. RL (token-mean PPO-clip + KL): ratio_max · Σ|advantage| / policy tokens (``adv_abs_sum/<task>``
    sums |A| over a task's tokens), plus the KL term's: kl_coef · (KL + |r| · LOGPROB_SCALE) — the k3 estimator
    ``exp(r) - r - 1 ≈ r²/2`` of a log-ratio ``r`` moves by ``r · dr`` when ``r`` is rounded by ``dr``, and the mean
    |r| is at most ``sqrt(2 KL)`` (Cauchy-Schwarz): a KL of 1e-4 is 1e-4 in size but its error scales with 0.014 · 10."""
    if record["stage"] == "sft":
        return abs(record["loss"])
    adv_abs = sum(v for k, v in record.items() if k.startswith("adv_abs_sum/"))
    policy = record["ratio_max"] * adv_abs / record["policy_tokens"]
    kl = max(record["kl"], 0.0)
    return policy + TINY_FSDP["rl"]["kl_coef"] * (kl + math.sqrt(2 * kl) * LOGPROB_SCALE)


def _launch(
    tmp: Path,
    name: str,
    nproc: int,
    resume: bool = False,
    config: dict = TINY_FSDP,
    overrides: tuple = (),
    env: dict | None = None,
) -> subprocess.Popen:
    config_file = tmp / f"{name}.yaml"
    config_file.write_text(yaml.safe_dump(config))
    where = ["--resume", str(tmp / name)] if resume else ["--config", str(config_file), "--run-dir", str(tmp / name)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "polyrl", "train", "--nproc", str(nproc), *where, *overrides],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (torchrun starts each rank in a session of its own)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        out.append(todo.pop())
        todo += children.get(out[-1], [])
    return out


def _finish(proc: subprocess.Popen) -> None:
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]


def _weights(run_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "final_model" / "model.safetensors"))


def _records(run_dir: Path) -> list[dict]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r["stage"] in ("sft", "rl")]


def _losses(run_dir: Path) -> list[tuple[str, int, float]]:
    return [(r["stage"], r["step"], r["loss"]) for r in _records(run_dir)]


def _one_and_two(tmp: Path, config: dict = TINY_FSDP, env: dict | None = None) -> Path:
    """A 1-process and a 2-process run of ``config`` (``tmp/one``, ``tmp/two``), started together; returns ``tmp``."""
    procs = [_launch(tmp, name, nproc, config=config, env=env) for name, nproc in (("one", 1), ("two", 2))]
    for proc in procs:
        _finish(proc)
    return tmp


def _assert_losses_of_one(one: list[dict], two: list[tuple[str, int, float]]) -> None:
    """Each loss the 2-process run logged (``two``, :func:`_losses`) is the 1-process run's (``one``,
    :func:`_records`) within the rounding budget of its step (:func:`_loss_scale`)."""
    for record, (_, _, b) in zip(one, two, strict=True):
        scale = max(_loss_scale(record), abs(record["loss"]))
        assert b == pytest.approx(record["loss"], rel=0, abs=LOSS_ULPS * FLOAT32_EPS * scale), record["step"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A 1-process and a 2-process run of the same config, started together."""
    return _one_and_two(tmp_path_factory.mktemp("fsdp"))


def test_two_processes_reach_the_losses_of_one(runs):
    one, two = _losses(runs / "one"), _losses(runs / "two")
    assert [r[:2] for r in one] == [r[:2] for r in two] == [("sft", 1), ("sft", 2)] + [("rl", k) for k in range(1, 5)]
    assert all(loss != 0 for stage, _, loss in one if stage == "rl")  # RL trained on every step
    _assert_losses_of_one(_records(runs / "one"), two)


def test_two_processes_reach_the_weights_of_one(runs):
    one, two = _weights(runs / "one"), _weights(runs / "two")
    assert one.keys() == two.keys()
    assert max(float((one[k] - two[k]).abs().max()) for k in one) < WEIGHT_ATOL


def test_only_rank_zero_writes_the_run(runs):
    run = runs / "two"
    records = _losses(run)
    assert len(records) == len(set(records))  # each step logged once, not once per rank
    assert (run / "final_model" / "config.json").is_file()  # a plain Hugging Face checkpoint
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["LATEST", "rl-000002", "rl-000004"]
    assert (run / "checkpoints" / "rl-000004" / "model" / ".metadata").is_file()  # sharded DCP state


def test_resume_after_sigkill_matches_uninterrupted(runs, tmp_path):
    proc = _launch(tmp_path, "killed", 2)
    latest = tmp_path / "killed" / "checkpoints" / "LATEST"
    deadline = time.monotonic() + 600
    while not (latest.exists() and latest.read_text().strip() == "rl-000002"):
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    for pid in _descendants(proc.pid):  # the launcher, torchrun and both ranks, as a machine failure would
        os.kill(pid, signal.SIGKILL)
    proc.communicate()
    assert not (tmp_path / "killed" / "final_model").exists()  # killed mid-RL, before the end

    _finish(_launch(tmp_path, "killed", 2, resume=True))
    done, resumed = _weights(runs / "two"), _weights(tmp_path / "killed")
    assert done.keys() == resumed.keys() and all(torch.equal(done[k], resumed[k]) for k in done)
    assert _losses(tmp_path / "killed") == _losses(runs / "two")


HUB_REPO = "polyrl-tests/tiny-chat"
TINY_LORA = {
    **TINY_FSDP,
    # the base by Hub id, from an offline cache: the launcher resolves it once and every rank loads that commit
    "model": {"path": HUB_REPO, "lora": {"enabled": True, "r": 4, "alpha": 8}},
    "prompt": {"field": "question", "style": "terse"},
    "sft": {**TINY_FSDP["sft"], "lr": 3e-2},
    "rl": {**TINY_FSDP["rl"], "lr": 1e-2},  # the KL reference is the base: the adapters disabled on the shards
    "reward": {"length": 0.5},
}


@pytest.fixture(scope="module")
def hub_env(tmp_path_factory, tiny_model_dir) -> dict:
    """An offline Hugging Face cache whose ``HUB_REPO`` is the tiny model of ``TINY_FSDP``'s shape (seed 0)."""
    cache = tmp_path_factory.mktemp("hf") / "cache"
    snapshot = lay_out(cache, HUB_REPO, tiny_model_dir)
    return {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "POLYRL_TEST_COMMIT": snapshot.name}


@pytest.fixture(scope="module")
def lora_runs(tmp_path_factory, hub_env):
    """A 1-process and a 2-process LoRA run of the same config (base sharded, adapters trained), started together."""
    return _one_and_two(tmp_path_factory.mktemp("fsdp_lora"), TINY_LORA, hub_env)


def test_the_launcher_resolves_a_hub_id_once_and_the_run_records_its_commit(lora_runs, hub_env):
    saved = yaml.safe_load((lora_runs / "two" / "config.yaml").read_text())
    assert saved["model"]["revision"] == hub_env["POLYRL_TEST_COMMIT"]
    assert saved["resumes"] == []  # the pinned commit is the run's own setting, not a resume's override


def test_lora_on_two_processes_reaches_the_losses_of_one(lora_runs):
    one, two = _records(lora_runs / "one"), _losses(lora_runs / "two")
    assert [(r["stage"], r["step"]) for r in one] == [r[:2] for r in two]
    assert all(r["loss"] != 0 for r in one if r["stage"] == "rl")
    _assert_losses_of_one(one, two)


def test_lora_on_two_processes_trains_only_the_adapters_to_the_weights_of_one(lora_runs):
    from safetensors.torch import load_file

    one, two = (
        load_file(str(lora_runs / n / "final_model" / "adapter" / "adapter_model.safetensors")) for n in ("one", "two")
    )
    assert one.keys() == two.keys() and all("lora_" in k for k in one)
    assert max(float((one[k] - two[k]).abs().max()) for k in one) < WEIGHT_ATOL


def test_the_adapter_two_processes_saved_loads_in_peft_as_the_merged_model(lora_runs, tiny_model_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    final = lora_runs / "two" / "final_model"
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    adapted = PeftModel.from_pretrained(base, final / "adapter").eval()
    merged = AutoModelForCausalLM.from_pretrained(final).eval()
    ids = torch.tensor([[3, 17, 25, 9, 40, 41, 12]])
    with torch.no_grad():
        torch.testing.assert_close(adapted(input_ids=ids).logits, merged(input_ids=ids).logits, rtol=0, atol=1e-5)


def test_a_two_process_lora_run_resumes_from_its_sharded_checkpoint(lora_runs, hub_env, tmp_path):
    _finish(_launch(tmp_path, "halted", 2, config=TINY_LORA, overrides=("rl.steps=2",), env=hub_env))
    steps = (f"rl.steps={TINY_LORA['rl']['steps']}",)
    _finish(_launch(tmp_path, "halted", 2, resume=True, overrides=steps, env=hub_env))
    assert _losses(tmp_path / "halted") == _losses(lora_runs / "two")


def test_nproc_zero_is_refused(capsys):
    assert cli(["train", "--nproc", "0"]) == 2
    assert "--nproc must be at least 1" in one_error_line(capsys)


def test_fsdp_with_vllm_is_refused_before_launch(tmp_path, capsys):
    args = ["train", "--nproc", "2", "--run-dir", str(tmp_path / "run"), "generation.engine=vllm", "device=cuda"]
    assert cli(args) == 2
    assert "generation.engine=vllm" in one_error_line(capsys)
    assert not (tmp_path / "run").exists()


def test_fsdp_with_ray_is_refused_before_launch(tmp_path, capsys):
    assert cli(["train", "--nproc", "2", "--ray", "local", "--run-dir", str(tmp_path / "run")]) == 2
    assert "backend=ray" in one_error_line(capsys)


def test_torchrun_without_a_config_trains_the_embedded_default(tmp_path):
    """``torchrun -m polyrl train`` with no ``--config`` loads the embedded default on every rank (as ``polyrl
    train`` does) and both ranks write one run, in rank 0's default directory."""
    small = ["sft.steps=1", "rl.steps=1", "rl.prompts_per_step=2", "rl.group_size=2", "rl.max_new_tokens=4"]
    small += ["eval.problems_per_task=1", "tensorboard=false", "progress=false", "threads=1"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    proc = subprocess.run(
        [*torchrun, "-m", "polyrl", "train", *small],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (run,) = (tmp_path / "runs").iterdir()  # one directory, not one per rank
    from polyrl.cli.train import default_config_path

    default_tasks = yaml.safe_load(default_config_path().read_text())["tasks"]
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert [t["name"] for t in saved["tasks"]] == [t["name"] for t in default_tasks]
    assert (run / "final_model" / "config.json").is_file()


def test_each_rank_takes_every_world_th_row():
    rows = torch.tensor([7, 3, 9, 4, 1])
    from polyrl.distributed.fsdp import DistributedRanks

    assert DistributedRanks(0, 2).mine(rows).tolist() == [7, 9, 1]
    assert DistributedRanks(1, 2).mine(rows).tolist() == [3, 4]


def test_statistics_of_two_ranks_combine_as_one():
    from polyrl.algos.objective_stats import StatMeans

    a, b, both = StatMeans(), StatMeans(), StatMeans()
    a.add({"clip_frac": torch.tensor(0.5), "ratio_max": torch.tensor(1.5)}, weight=2.0)
    b.add({"clip_frac": torch.tensor(0.2), "ratio_max": torch.tensor(1.25)}, weight=8.0)
    both.absorb(a.sums, a.weights)
    both.absorb(b.sums, b.weights)
    # token-weighted mean (0.5·2 + 0.2·8) / 10 = 0.26; the maximum of the maxima
    assert both.result() == pytest.approx({"clip_frac": 0.26, "ratio_max": 1.5})


def test_an_existing_run_is_refused_before_launch(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("seed: 1\n")
    assert cli(["train", "--nproc", "2", "--run-dir", str(tmp_path / "run")]) == 2
    assert "already holds a run" in one_error_line(capsys)
    assert (tmp_path / "run" / "config.yaml").read_text() == "seed: 1\n"
