"""One owner of the device (issue #34): ``device: auto`` by default, resolved once by the placement, printed at the
start of a run; a device the machine does not have is one line and exit code 2 before anything starts."""

import json

import pytest
import torch
from cli_errors import one_error_line

from polyrl.cli import run
from polyrl.device import check_device_spec, describe, device_kind, resolve_device
from polyrl.errors import UserError


@pytest.fixture
def two_gpus(monkeypatch):
    """A machine that says it has two CUDA devices (nothing is put on them)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


def test_auto_is_the_cpu_without_cuda_and_the_gpu_with_it(monkeypatch, two_gpus):
    assert resolve_device("auto") == torch.device("cuda", 0) and device_kind("auto") == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu") and device_kind("auto") == "cpu"


def test_under_torchrun_each_rank_takes_its_own_gpu(two_gpus):
    """The FSDP placement's device: ``cuda:LOCAL_RANK`` whatever index the config named."""
    assert resolve_device("cuda", local_rank=1) == torch.device("cuda", 1)
    assert resolve_device("auto", local_rank=1) == torch.device("cuda", 1)
    assert resolve_device("cpu", local_rank=1) == torch.device("cpu")


def test_a_gpu_index_the_machine_lacks_is_a_user_error(two_gpus):
    with pytest.raises(UserError, match=r"device=cuda:2 but this machine has 2 CUDA device\(s\)"):
        resolve_device("cuda:2")


def test_cuda_without_cuda_is_a_user_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match="device=cuda but this machine has no CUDA device"):
        resolve_device("cuda")


def test_the_default_config_trains_on_auto():
    from polyrl.train.config import load_config

    assert load_config(None, base={"tasks": ["addition"]}).device == "auto"


NOT_DEVICES = ["gpu", "cuda:x", "cpu:0", "", "meta", "CUDA", "garbage", "cuda:", "cuda:-1", " cpu", "cuda:0:0"]
NOT_DEVICES += ["cuda:99999999999999999999", "cuda:128", "cuda:\u0663", "cuda:\u00b2", "cuda:01", "cuda:+1", "auto:0"]
"""Names the issue #43 audit gave ``--device`` and ``device=``: ``cuda:٣`` (an Arabic-Indic three), ``cuda:²``,
an index past torch's 8 bits (``cuda:128`` would become ``cuda:-128``) or past a 64-bit integer."""


@pytest.mark.parametrize("spec", NOT_DEVICES)
def test_a_device_polyrl_does_not_know_is_refused_by_the_config(spec, tmp_path, capsys):
    assert run(["train", "--run-dir", str(tmp_path / "run"), f"device={json.dumps(spec)}"]) == 2
    assert "give auto, cpu, cuda, cuda:N (N from 0 to 127) or mps" in one_error_line(capsys)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("spec", NOT_DEVICES)
@pytest.mark.parametrize(
    "args",
    [["eval", "--model", "tiny", "--tasks", "addition", "--n", "1"], ["serve", "tiny", "--port", "8765"]],
    ids=["eval", "serve"],
)
def test_eval_and_serve_refuse_a_device_polyrl_does_not_know_in_one_line(args, spec, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run([*args, "--device", spec]) == 2
    assert "give auto, cpu, cuda, cuda:N (N from 0 to 127) or mps" in one_error_line(capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("spec", ["auto", "cpu", "cuda", "cuda:0", "cuda:7", "cuda:127", "mps"])
def test_every_device_polyrl_knows_passes_the_parser(spec):
    assert check_device_spec(spec) == spec


def test_train_on_cuda_without_cuda_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert run(["train", "--run-dir", str(tmp_path / "run"), "device=cuda"]) == 2
    assert "device=cuda but this machine has no CUDA device" in one_error_line(capsys)
    assert not (tmp_path / "run").exists()


def test_the_run_prints_the_device_it_trains_on(tmp_path, capsys):
    small = ["sft.steps=1", "rl.steps=1", "rl.prompts_per_step=2", "rl.group_size=2", "rl.max_new_tokens=4"]
    small += ["eval.problems_per_task=1", "tensorboard=false", "progress=false", "threads=1"]
    small += ['model.tiny={"hidden_size": 32, "intermediate_size": 64, "num_layers": 2, "num_heads": 2}']
    assert run(["train", "--run-dir", str(tmp_path / "run"), *small]) == 0
    out = "".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert f"→{tmp_path / 'run'}oncpu(device=auto)" in out


def test_a_cpu_is_described_by_its_name():
    assert describe(torch.device("cpu")) == "cpu"


@pytest.mark.parametrize(
    "args",
    [["eval", "--model", "tiny", "--tasks", "addition", "--n", "1"], ["serve", "tiny", "--port", "8765"]],
    ids=["eval", "serve"],
)
def test_eval_and_serve_take_a_device_and_refuse_a_missing_gpu_in_one_line(args, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.chdir(tmp_path)
    assert run([*args, "--device", "cuda"]) == 2
    assert "device=cuda but this machine has no CUDA device" in one_error_line(capsys)
