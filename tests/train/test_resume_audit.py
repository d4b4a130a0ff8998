"""Resumes and disks (issue #36): a disk that fills while weights are written, a resume with another task
mix, a resume with another model shape. Each is one line and exit code 2 (or a run that carries on), nothing
already written is lost, and the run directory stays resumable."""

import json
from pathlib import Path

import pytest
import torch
import yaml
from cli_errors import one_error_line
from safetensors import SafetensorError

from polyrl.cli import run as cli
from polyrl.device import HOST
from polyrl.train.config import load_config
from polyrl.train.trainer import Trainer

DISK_FULL = "Error while serializing: I/O error: No space left on device (os error 28)"
"""What safetensors raises when the disk fills during a write (seen on a full tmpfs)."""


def _config(settings: dict, run_dir, **model):
    """The tiny run's config in ``run_dir``, with ``model`` settings changed."""
    data = {**settings, "run_dir": str(run_dir), "tensorboard": False, "model": {**settings["model"], **model}}
    return load_config(None, base=data)


def _config_file(cfg, tmp_path) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    return path


def _weights(run_dir) -> dict:
    from safetensors.torch import load_file

    return load_file(str(Path(run_dir) / "final_model" / "model.safetensors"))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tiny_train_settings) -> dict:
    """The final weights of the tiny run, trained without a fault."""
    cfg = _config(tiny_train_settings, tmp_path_factory.mktemp("uninterrupted") / "run")
    Trainer(cfg).run()
    return _weights(cfg.run_dir)


# -- a disk that fills while weights are written ----------------------------------------------------------
FILL_POINTS = {
    # where the write fails: (a part of the path being written, what the error says is intact)
    "first-checkpoint-weights": (".tmp-sft-000003", "no checkpoint was kept"),
    "checkpoint-weights": (".tmp-rl-000006", "the last checkpoint, rl-000003, is intact"),
    "sft-model": (".sft_model.tmp", "the last checkpoint, sft-000003, is intact"),
    "final-model": (".final_model.tmp", "the last checkpoint, rl-000006, is intact"),
}


@pytest.mark.parametrize("point", FILL_POINTS)
def test_a_disk_that_fills_during_a_weights_write_is_one_line_and_the_resume_is_exact(
    point, uninterrupted, tiny_train_settings, tmp_path, capsys, monkeypatch
):
    import transformers.modeling_utils

    marker, intact = FILL_POINTS[point]
    real_save = transformers.modeling_utils.safe_save_file

    def disk_fills(tensors, filename, *args, **kwargs):
        if marker in str(filename):
            Path(filename).write_bytes(b"\0" * 100)  # the part written before the disk filled
            raise SafetensorError(DISK_FULL)
        return real_save(tensors, filename, *args, **kwargs)

    cfg = _config(tiny_train_settings, tmp_path / "run")
    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", disk_fills)
    assert cli(["train", "--config", str(_config_file(cfg, tmp_path)), "--run-dir", cfg.run_dir]) == 2
    line = one_error_line(capsys)
    assert "the disk is full" in line and intact in line
    assert f"polyrl train --resume {cfg.run_dir}" in line
    assert not [p for p in Path(cfg.run_dir).rglob("*") if ".tmp" in p.name], "a partial write was left behind"
    monkeypatch.undo()  # space freed
    assert cli(["train", "--resume", cfg.run_dir]) == 0
    resumed = _weights(cfg.run_dir)
    assert resumed.keys() == uninterrupted.keys()
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in resumed)


def test_a_failed_weights_write_that_is_not_a_full_disk_is_not_called_one(tiny_train_settings, tmp_path, monkeypatch):
    """Only an I/O error (``os error N``) is a write failure; any other SafetensorError is a bug, raised as is."""
    import transformers.modeling_utils

    def broken(tensors, filename, *args, **kwargs):
        raise SafetensorError("You are trying to save a non contiguous tensor")

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", broken)
    with pytest.raises(SafetensorError, match="non contiguous"):
        Trainer(_config(tiny_train_settings, tmp_path / "run")).run()


def _files(run_dir) -> dict:
    return {p: p.read_bytes() for p in Path(run_dir).rglob("*") if p.is_file() and p.name != ".lock"}


# -- a resume with another model shape -------------------------------------------------------------------
SHAPE_CHANGES = {
    "hidden-size": (
        {},
        "model.tiny.hidden_size=64",
        "model.embed_tokens.weight is [110, 32] in checkpoint rl-000003 but [110, 64] in this model",
    ),
    "lora-rank": (
        {"lora": {"enabled": True, "r": 2, "alpha": 4}},
        "model.lora.r=4",
        "is [2, 32] in checkpoint rl-000003 but [4, 32] in this model",
    ),
}


@pytest.mark.parametrize("change", SHAPE_CHANGES)
def test_a_resume_with_another_model_shape_is_refused_before_it_writes_anything(
    change, tiny_train_settings, tmp_path, capsys, interrupted_run
):
    model, override, mismatch = SHAPE_CHANGES[change]
    cfg = _config(tiny_train_settings, tmp_path / "run", **model)
    interrupted_run(cfg)
    before = _files(cfg.run_dir)
    capsys.readouterr()
    assert cli(["train", "--resume", cfg.run_dir, override]) == 2
    line = one_error_line(capsys)
    assert "cannot resume" in line and mismatch in line and override.partition("=")[0] in line
    assert _files(cfg.run_dir) == before  # config.yaml (and its resume history), metrics, checkpoints
    # so a plain resume goes on from where the run was
    assert cli(["train", "--resume", cfg.run_dir]) == 0
    assert yaml.safe_load((Path(cfg.run_dir) / "config.yaml").read_text())["resumes"] == []


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_sharded_checkpoint_is_checked_against_the_model_from_its_dcp_metadata(tiny_train_settings, tmp_path):
    """A multi-process run's checkpoint holds DCP shards, not safetensors: the check reads their metadata."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from polyrl.policy.loading import ModelConfig, load_policy
    from polyrl.train.checkpoint import weights_mismatch

    tiny = tiny_train_settings["model"]["tiny"]
    trained = load_policy(ModelConfig(path="tiny", tiny=tiny), device=HOST).model
    model_state, optim_state = get_state_dict(trained, torch.optim.AdamW(trained.parameters()))
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(tmp_path / "model"))
    wider = load_policy(ModelConfig(path="tiny", tiny={**tiny, "hidden_size": 64}), device=HOST).model
    assert weights_mismatch(trained, tmp_path / "model", "checkpoint rl-000002") is None
    assert weights_mismatch(wider, tmp_path / "model", "checkpoint rl-000002").startswith(
        "model.embed_tokens.weight is [110, 32] in checkpoint rl-000002 but [110, 64] in this model (and "
    )


# -- a resume with another task mix ----------------------------------------------------------------------
def test_a_resume_that_drops_a_task_carries_on_and_reports_the_tasks_evaluated(
    tiny_train_settings, tmp_path, capsys, interrupted_run
):
    cfg = _config(tiny_train_settings, tmp_path / "run")
    interrupted_run(cfg)
    capsys.readouterr()
    assert cli(["train", "--resume", cfg.run_dir, "tasks=[{name: addition, difficulty: easy}]"]) == 0
    out = capsys.readouterr().out
    run_dir = Path(cfg.run_dir)
    assert set(json.loads((run_dir / "eval" / "after_sft.json").read_text())) == {"addition", "sort_digits", "mean"}
    assert set(json.loads((run_dir / "eval" / "after_rl.json").read_text())) == {"addition", "mean"}
    summary = (run_dir / "summary.md").read_text()
    assert "| sort_digits | 0.0% | – | – |" in summary  # evaluated after SFT only
    assert "| addition | 0.0% | 0.0% | +0.0 |" in summary
    assert "| **mean** | 0.0% | 0.0% | – |" in summary  # means over different tasks are not compared
    assert "sort_digits" in out and "addition" in out
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["resumes"][0]["overrides"] == {"tasks": [saved["tasks"][0]]}
