"""Checkpoints and resume: an interrupted run, resumed, ends with the same weights as an uninterrupted one."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from polyrl.train.checkpoint import latest_checkpoint
from polyrl.train.trainer import Trainer


def _weights(run_dir) -> dict:
    from safetensors.torch import load_file

    return load_file(str(Path(run_dir) / "final_model" / "model.safetensors"))


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


class Crash(Exception):
    pass


@pytest.mark.parametrize("crash_at", [("sft", 4), ("rl", 5)])
def test_resumed_run_matches_uninterrupted(tiny_train_config, tmp_path, monkeypatch, crash_at):
    full = tiny_train_config(run_dir=str(tmp_path / "full"))
    Trainer(full).run()

    cfg = tiny_train_config(run_dir=str(tmp_path / "crashed"))
    stage, at = crash_at
    from polyrl.train import trainer as trainer_module

    real_log = trainer_module.RunDir.log

    def crashing_log(self, record):
        real_log(self, record)
        if record["stage"] == stage and record["step"] == at:
            raise Crash

    monkeypatch.setattr(trainer_module.RunDir, "log", crashing_log)
    with pytest.raises(Crash):
        Trainer(cfg).run()
    monkeypatch.setattr(trainer_module.RunDir, "log", real_log)
    ckpt = latest_checkpoint(Path(cfg.run_dir) / "checkpoints")
    assert (ckpt.stage, ckpt.step) == (stage, 3)

    Trainer(cfg, resume=True).run()
    assert _same(_weights(full.run_dir), _weights(cfg.run_dir))
    # metrics logged after the checkpoint were dropped and re-logged once
    lines = (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()
    full_lines = (Path(full.run_dir) / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == len(full_lines)


def test_sigkill_at_any_moment_leaves_a_resumable_run(tiny_train_config, tmp_path):
    cfg = tiny_train_config(run_dir=str(tmp_path / "killed"), rl__steps=12, checkpoint_every=2)
    Path(cfg.run_dir).mkdir(parents=True)
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "polyrl", "train", "--config", str(cfg_file), "--run-dir", cfg.run_dir]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    ckdir = Path(cfg.run_dir) / "checkpoints"
    while time.time() < deadline:
        ck = latest_checkpoint(ckdir) if ckdir.exists() else None
        if ck is not None and ck.stage == "rl":
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    code = subprocess.run(
        [sys.executable, "-m", "polyrl", "train", "--resume", cfg.run_dir],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert code.returncode == 0, code.stderr[-2000:]
    assert (Path(cfg.run_dir) / "final_model" / "model.safetensors").exists()
    rl_steps = [
        line for line in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines() if '"stage": "rl"' in line
    ]
    assert len(rl_steps) == 12
