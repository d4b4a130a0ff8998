"""A run directory belongs to one trainer at a time, a fresh run never writes over what it does not own, a
resume says what it changed, and whatever goes wrong on the way is one line and exit code 2 (issue #25)."""

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from cli_errors import one_error_line

from polyrl.cli import run as cli
from polyrl.train.checkpoint import latest_checkpoint
from polyrl.train.trainer import Trainer


def _config_file(cfg, tmp_path) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    return path


def _train(cfg_file: Path, run_dir) -> int:
    return cli(["train", "--config", str(cfg_file), "--run-dir", str(run_dir)])


def _weights(run_dir) -> dict:
    from safetensors.torch import load_file

    return load_file(str(Path(run_dir) / "final_model" / "model.safetensors"))


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


HOLD_LOCK = """
import sys, time
from polyrl.run_dir import RunDir
RunDir(sys.argv[1]).create(resume=sys.argv[2] == "resume")
print("locked", flush=True)
time.sleep(60)
"""


def _hold(run_dir, resume: bool) -> subprocess.Popen:
    """Another process holding ``run_dir`` as a trainer does."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(run_dir), "resume" if resume else "fresh"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_trainer_on_a_directory_in_use_is_refused_and_touches_nothing(tiny_train_config, tmp_path, capsys):
    cfg = tiny_train_config(run_dir=str(tmp_path / "run"))
    Trainer(cfg).run()
    before = {p: p.read_bytes() for p in Path(cfg.run_dir).rglob("*") if p.is_file() and p.name != ".lock"}
    holder = _hold(cfg.run_dir, resume=True)
    try:
        assert cli(["train", "--resume", cfg.run_dir, "rl.steps=8"]) == 2
        assert "is in use by another polyrl train (pid " in one_error_line(capsys)
        assert _train(_config_file(cfg, tmp_path), cfg.run_dir) == 2
        assert "in use" in one_error_line(capsys)
    finally:
        holder.kill()
        holder.wait()
    after = {p: p.read_bytes() for p in Path(cfg.run_dir).rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before


def test_the_lock_dies_with_its_process(tiny_train_config, tmp_path):
    """A trainer killed with SIGKILL leaves no stale lock: the kernel drops it."""
    cfg = tiny_train_config(run_dir=str(tmp_path / "run"), rl__enabled=False)
    holder = _hold(cfg.run_dir, resume=False)
    holder.kill()
    holder.wait()
    Trainer(cfg).run()
    assert (Path(cfg.run_dir) / "sft_model" / "model.safetensors").is_file()


FORK_AND_END = """
import os, sys, time
from polyrl.run_dir import RunDir
RunDir(sys.argv[1]).create(resume=False)
child = os.fork()
if child == 0:  # what an agent's or a tool's forked process does: outlive the trainer
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1)
    os.dup2(null, 2)
    time.sleep(60)
    os._exit(0)
print(child, flush=True)
"""


def test_a_process_forked_by_a_trainer_does_not_keep_its_lock(tmp_path):
    """The lock's descriptor is close-on-exec, and a fork without exec lets go of it (a resume was refused
    naming the ended trainer's pid while its agent's child lived on)."""
    from polyrl.run_dir import RunDir

    run_dir = tmp_path / "run"
    trainer = subprocess.run(
        [sys.executable, "-c", FORK_AND_END, str(run_dir)], capture_output=True, text=True, check=True
    )
    child = int(trainer.stdout)
    try:
        RunDir(run_dir).create(resume=False)  # the trainer has ended; its child still runs
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_fresh_run_refuses_a_directory_that_is_not_a_polyrl_run(tiny_train_config, tmp_path, capsys):
    mine = tmp_path / "mine"
    (mine / "sft_model").mkdir(parents=True)
    (mine / "sft_model" / "weights.bin").write_bytes(b"precious")
    (mine / "metrics.jsonl").write_text('{"mine": 1}\n')
    cfg = tiny_train_config(run_dir=str(mine))
    assert _train(_config_file(cfg, tmp_path), mine) == 2
    line = one_error_line(capsys)
    assert "is not empty and holds no polyrl run (metrics.jsonl, sft_model/)" in line
    assert (mine / "sft_model" / "weights.bin").read_bytes() == b"precious"
    assert (mine / "metrics.jsonl").read_text() == '{"mine": 1}\n'
    assert sorted(p.name for p in mine.iterdir()) == ["metrics.jsonl", "sft_model"]


def test_a_fresh_run_may_use_what_a_run_killed_at_start_up_left(tiny_train_config, tmp_path):
    cfg = tiny_train_config(run_dir=str(tmp_path / "run"), rl__enabled=False)
    for d in ("checkpoints", "eval"):
        (Path(cfg.run_dir) / d).mkdir(parents=True)
    (Path(cfg.run_dir) / ".lock").write_text("12345\n")
    Trainer(cfg).run()
    assert (Path(cfg.run_dir) / "config.yaml").is_file()


def test_overrides_given_with_resume_are_recorded_with_the_checkpoint_they_took_effect_at(tiny_train_config, tmp_path):
    cfg = tiny_train_config(run_dir=str(tmp_path / "run"), tensorboard=False)
    Trainer(cfg).run()
    assert cli(["train", "--resume", cfg.run_dir, "rl.steps=8", "rl.lr=0.0002"]) == 0
    saved = yaml.safe_load((Path(cfg.run_dir) / "config.yaml").read_text())
    assert saved["rl"]["steps"] == 8 and saved["rl"]["lr"] == 0.0002
    assert saved["resumes"] == [{"stage": "rl", "step": 6, "overrides": {"rl.steps": 8, "rl.lr": 0.0002}}]
    rl_steps = [r["step"] for r in map(json.loads, (Path(cfg.run_dir) / "metrics.jsonl").open()) if r["stage"] == "rl"]
    assert rl_steps == [1, 2, 3, 4, 5, 6, 7, 8]
    # a second resume without overrides changes nothing and adds no record
    assert cli(["train", "--resume", cfg.run_dir]) == 0
    assert yaml.safe_load((Path(cfg.run_dir) / "config.yaml").read_text())["resumes"] == saved["resumes"]


def test_resume_with_every_checkpoint_damaged_is_an_error_not_a_restart(tiny_train_config, tmp_path, capsys):
    cfg = tiny_train_config(run_dir=str(tmp_path / "run"), tensorboard=False)
    Trainer(cfg).run()
    metrics = (Path(cfg.run_dir) / "metrics.jsonl").read_bytes()
    for ckpt in (Path(cfg.run_dir) / "checkpoints").iterdir():
        if ckpt.is_dir():
            weights = ckpt / "model" / "model.safetensors"
            weights.write_bytes(weights.read_bytes()[:100])
    assert cli(["train", "--resume", cfg.run_dir]) == 2
    line = one_error_line(capsys)
    assert "no usable checkpoint in" in line and "rl-000006 is not usable" in line
    assert (Path(cfg.run_dir) / "metrics.jsonl").read_bytes() == metrics


def test_a_damaged_checkpoint_warning_is_one_line_without_a_source_line(tiny_train_config, tmp_path, capsys):
    cfg = tiny_train_config(run_dir=str(tmp_path / "run"), tensorboard=False)
    Trainer(cfg).run()
    newest = Path(cfg.run_dir) / "checkpoints" / "rl-000006" / "model" / "model.safetensors"
    newest.write_bytes(newest.read_bytes()[:100])
    assert cli(["train", "--resume", cfg.run_dir]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert warnings == [
        "polyrl: warning: checkpoint rl-000006 is not usable (model/model.safetensors is damaged (checksum "
        "mismatch)); resuming from rl-000003"
    ]


@pytest.mark.parametrize("torch_error", [False, True], ids=["oserror", "torch-zip-writer"])
def test_a_full_disk_during_a_checkpoint_is_one_line_and_loses_nothing(
    tiny_train_config, tmp_path, capsys, monkeypatch, torch_error
):
    full = tiny_train_config(run_dir=str(tmp_path / "full"), tensorboard=False)
    Trainer(full).run()
    cfg = tiny_train_config(run_dir=str(tmp_path / "run"), tensorboard=False)
    from polyrl.train import checkpoint

    real_save = checkpoint.torch.save

    def disk_fills_at_rl_6(obj, path, *args, **kwargs):
        if "rl-000006" in str(path):
            if torch_error:  # what torch's zip writer raises when the disk fills (seen on SmolLM2 checkpoints)
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 881093056 vs 881093008")
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(checkpoint.torch, "save", disk_fills_at_rl_6)
    if torch_error:  # the disk is (almost) full when the write fails
        monkeypatch.setattr(checkpoint.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(1, 1, 0))
    assert _train(_config_file(cfg, tmp_path), cfg.run_dir) == 2
    line = one_error_line(capsys)
    assert "could not write checkpoint rl-000006" in line and "the disk is full" in line
    assert "the last checkpoint, rl-000003, is intact" in line
    assert not list((Path(cfg.run_dir) / "checkpoints").glob(".tmp-*"))
    monkeypatch.setattr(checkpoint.torch, "save", real_save)  # space freed
    monkeypatch.undo()
    assert cli(["train", "--resume", cfg.run_dir]) == 0
    assert _same(_weights(full.run_dir), _weights(cfg.run_dir))


def test_a_full_disk_while_logging_is_one_line(tiny_train_config, tmp_path, capsys, monkeypatch):
    cfg = tiny_train_config(run_dir=str(tmp_path / "run"), tensorboard=False)
    from polyrl.run_dir import RunDir

    def no_space(self, record):
        raise OSError(errno.ENOSPC, "No space left on device", str(self.metrics_file))

    monkeypatch.setattr(RunDir, "log", no_space)
    assert _train(_config_file(cfg, tmp_path), cfg.run_dir) == 2
    assert "the disk is full (writing" in one_error_line(capsys)


def test_a_kept_metrics_line_that_is_not_utf8_survives_a_resume(tiny_train_config, tmp_path, interrupted_run):
    cfg = tiny_train_config(run_dir=str(tmp_path / "run"), tensorboard=False)
    interrupted_run(cfg)
    metrics = Path(cfg.run_dir) / "metrics.jsonl"
    lines = metrics.read_bytes().split(b"\n")
    lines[0] = lines[0][:-1] + b', "note": "\xff"}'  # a byte that is not UTF-8, in a line the resume keeps
    metrics.write_bytes(b"\n".join(lines))
    assert cli(["train", "--resume", cfg.run_dir]) == 0
    kept = metrics.read_bytes().split(b"\n")
    assert kept[0] == lines[0]
    assert sum(b'"stage": "rl"' in line for line in kept) == 6


def test_resume_without_the_kl_reference_model_is_one_line(tiny_train_config, tmp_path, capsys, interrupted_run):
    rl = {**tiny_train_config().rl.model_dump(), "kl_coef": 0.05}
    cfg = tiny_train_config(run_dir=str(tmp_path / "run"), rl=rl, tensorboard=False)
    interrupted_run(cfg)
    shutil.rmtree(Path(cfg.run_dir) / "sft_model")
    assert latest_checkpoint(Path(cfg.run_dir) / "checkpoints").stage == "rl"
    assert cli(["train", "--resume", cfg.run_dir]) == 2
    assert "sft_model holds no model weights (model.safetensors is missing)" in one_error_line(capsys)


def test_an_abandoned_trainer_does_not_lock_its_directory_against_this_process(tiny_train_config, tmp_path):
    """The lock keeps other processes out; in one process a Trainer that was made and dropped without running
    (a failed set-up in a notebook, say) leaves the directory usable by the next."""
    cfg = tiny_train_config(run_dir=str(tmp_path / "run"), rl__enabled=False, tensorboard=False)
    abandoned = Trainer(cfg)
    Trainer(cfg, resume=True).run()
    assert (Path(cfg.run_dir) / "sft_model" / "model.safetensors").is_file()
    del abandoned


def test_a_resume_with_overrides_reports_a_damaged_checkpoint_once(tiny_train_config, tmp_path, capsys):
    cfg = tiny_train_config(run_dir=str(tmp_path / "run"), tensorboard=False)
    Trainer(cfg).run()
    newest = Path(cfg.run_dir) / "checkpoints" / "rl-000006" / "model" / "model.safetensors"
    newest.write_bytes(newest.read_bytes()[:100])
    assert cli(["train", "--resume", cfg.run_dir, "rl.steps=7"]) == 0
    err = capsys.readouterr().err
    assert err.count("polyrl: warning: checkpoint rl-000006 is not usable") == 1, err
    saved = yaml.safe_load((Path(cfg.run_dir) / "config.yaml").read_text())
    assert saved["resumes"] == [{"stage": "rl", "step": 3, "overrides": {"rl.steps": 7}}]
