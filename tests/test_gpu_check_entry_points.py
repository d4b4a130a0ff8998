"""Every Python entry point of the GPU check runs on the pretend second device of ``tests/device_guard.py``, at small
sizes: ``benchmarks/packed_check.py``, ``benchmarks/gpu_throughput.py``, ``benchmarks/memory.py``, the default job
(``benchmarks/default_job.py``), the packed-train check (``configs/smollm2.yaml``) and the vision-language check
(``benchmarks/vlm_check.py``).

Issue #42: ``packed_check.py`` collated a host batch and scored it with the model on CUDA (the embedding met CPU
token ids), a crash no CPU run of the check could see, since every tensor there is a host tensor.
``gpu_check.sh`` runs these on the GPU; here they run with their model on the guard's device, where an op that
mixes a device tensor with a host one raises as CUDA does.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest
import torch
from device_guard import on_device, second_device

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"


def _load(path: Path, monkeypatch):
    """A benchmark script as a module (they import benchmarks/machine.py, so benchmarks/ goes on the path)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def small_smollm2(tmp_path_factory) -> Path:
    """SmolLM2-135M's family, tokenizer and chat template at a test's width: what the check's models are, small."""
    sys.path.insert(0, str(BENCHMARKS / "gpu"))
    try:
        from make_model import make
    finally:
        sys.path.remove(str(BENCHMARKS / "gpu"))
    return make("smollm2-135m", tmp_path_factory.mktemp("smollm2") / "model", weights=True, layers=2, small=True)


def test_the_packed_check_runs_on_the_device(small_smollm2, monkeypatch):
    """Fails on f37cc3d's packed_check.py (``collate(...)`` left on the host: ``embedding got host tensors``)."""
    packed_check = _load(BENCHMARKS / "packed_check.py", monkeypatch)
    with second_device() as guard:
        result = packed_check.check(str(small_smollm2), guard.device, prompts=1, group_size=2, max_new_tokens=4)
        assert guard.checked > 1000
    assert result["ok"] and result["greedy_rows_equal"] == 2


def test_the_speed_benchmark_runs_on_the_device_and_writes_each_figure_as_it_comes(
    small_smollm2, monkeypatch, tmp_path
):
    """It measures the Trainer's own generation backend and RL stage (issue #42: it built its own backend, in
    another configuration than training runs), and rewrites its JSON as each figure comes."""
    throughput = _load(BENCHMARKS / "gpu_throughput.py", monkeypatch)
    args = Namespace(
        model=str(small_smollm2),
        prompts=2,
        group_size=2,
        new_tokens=4,
        dtype="float32",
        autocast="auto",
        steps=1,
        repeats=1,
        greedy_check=2,
        greedy_tokens=4,
        skip_trl=True,
    )
    out = tmp_path / "speed.json"
    written: list[dict] = []
    real_replace = Path.replace

    def replace(self, target):  # what the file held each time it was written
        written.append(json.loads(self.read_text()))
        return real_replace(self, target)

    monkeypatch.setattr(Path, "replace", replace)
    with second_device() as guard:
        result = throughput.measure(args, guard.device, out)
        assert guard.checked > 1000
    assert json.loads(out.read_text()) == json.loads(json.dumps(result, default=str))
    assert result["done"] and result["greedy_equal"] == "2/2" and result["polyrl_rl_step_s"] > 0
    assert result["configuration"]["deterministic"] is True and result["configuration"]["autocast"] == "none"
    assert result["fallbacks"] == [] and "generation >= 5x transformers" in result["goals"]
    assert [w["done"] for w in written] == [False] * (len(written) - 1) + [True]
    first = next(w for w in written if "hf_generate_s" in w)
    assert "polyrl_generate_s" not in first  # each figure written when it exists, not all at the end


def test_a_fallback_fails_the_speed_benchmark(monkeypatch):
    """Issue #42: a failed capture decoded eagerly and the check passed at eager speed."""
    throughput = _load(BENCHMARKS / "gpu_throughput.py", monkeypatch)
    clean = {"graphs": {"fallbacks": []}, "greedy_graphs": None, "attention_fallbacks": []}
    assert throughput.fallbacks(clean) == []
    graphs = {**clean, "graphs": {"fallbacks": ["RuntimeError: operation not permitted when stream is capturing"]}}
    flex = {**clean, "attention_fallbacks": ["ImportError: no Triton"]}
    assert throughput.fallbacks(graphs) == graphs["graphs"]["fallbacks"] and throughput.fallbacks(flex) == [
        "ImportError: no Triton"
    ]


def test_the_memory_benchmark_makes_its_model_on_the_device(monkeypatch):
    """Its random weights are made where it runs (on a GPU: a second; issue #42: the 1.5B shape took 70-85 s of a
    90 s limit on the CPU before it moved), not made on the host and moved."""
    memory = _load(BENCHMARKS / "memory.py", monkeypatch)
    args = memory.parse_args(["--hidden", "64", "--layers", "1"])
    moves = []
    real_to = torch.nn.Module.to
    monkeypatch.setattr(torch.nn.Module, "to", lambda self, *a, **k: moves.append(a) or real_to(self, *a, **k))
    with second_device() as guard:
        args.device = guard.device
        model = memory.build_model(args)
        assert all(on_device(p) for p in model.parameters())
    assert not [a for a in moves if any(isinstance(x, (str, torch.device)) for x in a)]


def _run_on_the_device(config):
    from polyrl.train.placement import LocalPlacement
    from polyrl.train.trainer import Trainer

    with second_device() as guard:
        trainer = Trainer(config, placement=LocalPlacement(guard.device))
        results = trainer.run()
        assert guard.checked > 1000
    return results


def test_the_default_job_runs_on_the_device(monkeypatch, tmp_path):
    """The default job's config (``polyrl train`` with no config and default_job.py's overrides), shortened, and
    its README table made from the run."""
    from polyrl.cli.train import default_config_path
    from polyrl.train.config import load_config

    default_job = _load(BENCHMARKS / "default_job.py", monkeypatch)
    short = ["sft.steps=2", "rl.steps=1", "rl.prompts_per_step=2", "eval.problems_per_task=2", "tensorboard=false"]
    run = tmp_path / "default"
    config = load_config(default_config_path(), [f"run_dir={run}", *default_job.JOB, *short])
    _run_on_the_device(config)
    table = default_job.table(run)
    assert table.startswith("| task | after SFT | after RL |") and "| **mean** |" in table


def test_the_packed_train_check_runs_on_the_device(small_smollm2, tmp_path):
    """``polyrl train --config configs/smollm2.yaml`` on the check's model (bf16 autocast, the packed forward)."""
    from polyrl.train.config import load_config

    short = ["sft.steps=1", "rl.steps=1", "rl.prompts_per_step=2", "rl.group_size=2", "rl.max_new_tokens=4"]
    config = load_config(
        REPO / "configs" / "smollm2.yaml",
        [f"run_dir={tmp_path / 'run'}", f"model.path={small_smollm2}", "eval.problems_per_task=1", "tensorboard=false"]
        + short,
    )
    assert set(_run_on_the_device(config)) >= {"after_sft", "after_rl"}


def test_the_default_job_says_the_commit_is_unknown_where_there_is_no_git(monkeypatch, tmp_path):
    """A lent GPU machine gets a copy of the tree without .git, perhaps without git (issue #42: FileNotFoundError)."""
    default_job = _load(BENCHMARKS / "default_job.py", monkeypatch)

    def no_git(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "git")

    monkeypatch.setattr(default_job.subprocess, "run", no_git)
    assert default_job.commit() == default_job.UNKNOWN_COMMIT
    monkeypatch.setattr(default_job.subprocess, "run", subprocess.run)
    monkeypatch.setattr(default_job, "REPO", tmp_path)  # git, but no repository
    assert default_job.commit() == default_job.UNKNOWN_COMMIT


@pytest.mark.parametrize("shape", ["smolvlm-256m", "qwen2-vl-2b"])
def test_the_vlm_check_runs_an_sft_and_an_rl_step_in_bf16_on_the_device(shape, monkeypatch, tmp_path):
    """``gpu_check.sh vlm``'s Python on the device guard, at a test's width: the model made as on the GPU (saved, then
    loaded by polyrl on the device), generation's log-probs against the training forward's, an RL and an SFT step."""
    vlm_check = _load(BENCHMARKS / "vlm_check.py", monkeypatch)
    path = vlm_check.make(shape, tmp_path / shape, "cpu", small=True)
    family = "idefics3" if shape == "smolvlm-256m" else "qwen2_vl"
    side = vlm_check.PICTURE_SIDE[family][True] if family in vlm_check.PICTURE_SIDE else None
    with second_device() as guard:
        result = vlm_check.check_model(str(path), guard.device, family, side, 2, 2, 4)
        assert guard.checked > 1000
    assert result["ok"], result
    assert result["autocast"] == "bf16" and result["image_tokens"] == 4 and result["rl_skipped_updates"] == 0


def test_trl_s_config_takes_the_checkpointing_switch_of_the_installed_transformers(monkeypatch, tmp_path):
    """The memory check's TRL setting failed on transformers 5.17 (the lent machine's): ``GRPOConfig`` took no
    ``activation_checkpointing``, the name later 5.x releases gave ``gradient_checkpointing``."""
    from trl import GRPOConfig

    machine = _load(BENCHMARKS / "machine.py", monkeypatch)
    switch = machine.checkpointing_off(GRPOConfig)
    config = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], **switch)
    assert list(switch) in (["activation_checkpointing"], ["gradient_checkpointing"])
    assert getattr(config, next(iter(switch))) is False
