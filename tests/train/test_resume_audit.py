"""Resumes and disks (issue #36): a disk that fills while weights are written, a resume with another task
mix, a resume with another model shape. Each is one line and exit code 2 (or a run that carries on), nothing
already written is lost, and the run directory stays resumable."""

from pathlib import Path

import pytest
import torch
import yaml
from conftest import TINY_TRAIN
from safetensors import SafetensorError

from polyrl.cli import run as cli
from polyrl.train.config import load_config
from polyrl.train.trainer import Trainer

DISK_FULL = "Error while serializing: I/O error: No space left on device (os error 28)"
"""What safetensors raises when the disk fills during a write (seen on a full tmpfs)."""


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("polyrl: error: ")
    return err[0]


def _config(run_dir, **sections):
    return load_config(None, base={**TINY_TRAIN, "run_dir": str(run_dir), "tensorboard": False, **sections})


def _config_file(cfg, tmp_path) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    return path


def _weights(run_dir) -> dict:
    from safetensors.torch import load_file

    return load_file(str(Path(run_dir) / "final_model" / "model.safetensors"))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    """The final weights of the tiny run, trained without a fault."""
    cfg = _config(tmp_path_factory.mktemp("uninterrupted") / "run")
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
    point, uninterrupted, tmp_path, capsys, monkeypatch
):
    import transformers.modeling_utils

    marker, intact = FILL_POINTS[point]
    real_save = transformers.modeling_utils.safe_save_file

    def disk_fills(tensors, filename, *args, **kwargs):
        if marker in str(filename):
            Path(filename).write_bytes(b"\0" * 100)  # the part written before the disk filled
            raise SafetensorError(DISK_FULL)
        return real_save(tensors, filename, *args, **kwargs)

    cfg = _config(tmp_path / "run")
    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", disk_fills)
    assert cli(["train", "--config", str(_config_file(cfg, tmp_path)), "--run-dir", cfg.run_dir]) == 2
    line = _one_line(capsys)
    assert "the disk is full" in line and intact in line
    assert f"polyrl train --resume {cfg.run_dir}" in line
    assert not [p for p in Path(cfg.run_dir).rglob("*") if ".tmp" in p.name], "a partial write was left behind"
    monkeypatch.undo()  # space freed
    assert cli(["train", "--resume", cfg.run_dir]) == 0
    resumed = _weights(cfg.run_dir)
    assert resumed.keys() == uninterrupted.keys()
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in resumed)


def test_a_failed_weights_write_that_is_not_a_full_disk_is_not_called_one(tmp_path, monkeypatch):
    """Only an I/O error (``os error N``) is a write failure; any other SafetensorError is a bug, raised as is."""
    import transformers.modeling_utils

    def broken(tensors, filename, *args, **kwargs):
        raise SafetensorError("You are trying to save a non contiguous tensor")

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", broken)
    with pytest.raises(SafetensorError, match="non contiguous"):
        Trainer(_config(tmp_path / "run")).run()
