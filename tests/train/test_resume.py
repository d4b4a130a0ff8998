"""Checkpoints and resume: an interrupted run, resumed, ends with the same weights as an uninterrupted one."""

import json
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


def _crash_at(cfg, monkeypatch, stage: str, step: int) -> None:
    """Run ``cfg`` until it has logged ``stage`` step ``step``, then crash it there."""
    from polyrl.run_dir import RunDir

    real_log = RunDir.log

    def crashing_log(self, record):
        real_log(self, record)
        if record["stage"] == stage and record["step"] == step:
            raise Crash

    monkeypatch.setattr(RunDir, "log", crashing_log)
    with pytest.raises(Crash):
        Trainer(cfg).run()
    monkeypatch.setattr(RunDir, "log", real_log)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("crash_at", [("sft", 4), ("rl", 5)])
def test_resumed_run_matches_uninterrupted(tiny_train_config, tmp_path, monkeypatch, crash_at, threads):
    full = tiny_train_config(run_dir=str(tmp_path / "full"), threads=threads)
    Trainer(full).run()

    cfg = tiny_train_config(run_dir=str(tmp_path / "crashed"), threads=threads)
    stage, at = crash_at
    _crash_at(cfg, monkeypatch, stage, at)
    ckpt = latest_checkpoint(Path(cfg.run_dir) / "checkpoints")
    assert (ckpt.stage, ckpt.step) == (stage, 3)

    Trainer(cfg, resume=True).run()
    assert _same(_weights(full.run_dir), _weights(cfg.run_dir))
    # metrics logged after the checkpoint were dropped and re-logged once
    lines = (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()
    full_lines = (Path(full.run_dir) / "metrics.jsonl").read_text().splitlines()
    assert _steps(lines) == _steps(full_lines)  # each record at the same stage step and global step


def _steps(lines: list[str]) -> list[tuple]:
    return [(r["stage"], r["step"], r["global_step"]) for r in map(json.loads, lines)]


def test_a_checkpoint_from_before_the_global_step_resumes_at_the_global_step_it_implies(
    tiny_train_config, tmp_path, monkeypatch
):
    cfg = tiny_train_config(run_dir=str(tmp_path / "old"), threads=1)
    _crash_at(cfg, monkeypatch, "rl", 4)
    ckpt = latest_checkpoint(Path(cfg.run_dir) / "checkpoints")
    state = json.loads((ckpt.path / "trainer_state.json").read_text())
    del state["global_step"]  # as an earlier version wrote it
    (ckpt.path / "trainer_state.json").write_text(json.dumps(state))

    Trainer(cfg, resume=True).run()
    records = map(json.loads, (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines())
    assert [r["global_step"] for r in records if r["stage"] == "rl"] == [6 + k for k in range(1, 7)]  # after 6 SFT


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


VOLATILE = {"step_time", "tokens_per_s", "completions_per_s"}
"""Per-record timings: the only fields two runs of the same config may disagree on."""


def _records(run_dir) -> list[dict]:
    import json

    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in VOLATILE} for line in lines]


def _train_cmd(cfg_file: Path, run_dir: str) -> list[str]:
    return [sys.executable, "-m", "polyrl", "train", "--config", str(cfg_file), "--run-dir", run_dir]


def test_repeated_sigkill_with_a_kl_term_and_a_critic_matches_an_uninterrupted_run(tiny_train_config, tmp_path):
    """Killed with SIGKILL at random moments three times (SFT, evaluation and RL all fair game), resumed each
    time: the final weights and the metrics file equal an uninterrupted run's (timings aside)."""
    import random

    rl = {**tiny_train_config().rl.model_dump(), "kl_coef": 0.05, "advantage": "gae", "critic": {"warmup_steps": 2}}
    cfg = tiny_train_config(rl=rl, checkpoint_every=2, threads=1, tensorboard=False)
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    full, killed = str(tmp_path / "full"), str(tmp_path / "killed")
    done = subprocess.run(_train_cmd(cfg_file, full), env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]

    rng = random.Random(7)
    proc = subprocess.Popen(
        _train_cmd(cfg_file, killed), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    for _ in range(3):
        time.sleep(rng.uniform(4.0, 12.0))  # start-up, SFT, evaluation or RL: wherever it lands
        if proc.poll() is not None:
            break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # a kill before the run saved its config leaves nothing to resume: start it again
        saved = (Path(killed) / "config.yaml").exists()
        again = (
            [sys.executable, "-m", "polyrl", "train", "--resume", killed] if saved else _train_cmd(cfg_file, killed)
        )
        proc = subprocess.Popen(again, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    assert _same(_weights(full), _weights(killed))
    assert _records(killed) == _records(full)


def test_a_damaged_newest_checkpoint_is_skipped_with_a_warning(tiny_train_config, tmp_path, monkeypatch):
    full = tiny_train_config(run_dir=str(tmp_path / "full"), checkpoint_every=2)
    Trainer(full).run()

    cfg = tiny_train_config(run_dir=str(tmp_path / "crashed"), checkpoint_every=2)
    _crash_at(cfg, monkeypatch, "rl", 5)
    newest = Path(cfg.run_dir) / "checkpoints" / "rl-000004" / "model" / "model.safetensors"
    newest.write_bytes(newest.read_bytes()[:1000])  # cut short, as a full disk would leave it
    with pytest.warns(UserWarning, match=r"checkpoint rl-000004 is not usable \(model/model.safetensors is damaged"):
        ckpt = latest_checkpoint(Path(cfg.run_dir) / "checkpoints")
    assert (ckpt.stage, ckpt.step) == ("rl", 2)
    with pytest.warns(UserWarning, match="rl-000004 is not usable"):
        Trainer(cfg, resume=True).run()
    assert _same(_weights(full.run_dir), _weights(cfg.run_dir))
    assert _records(cfg.run_dir) == _records(full.run_dir)


def test_a_kill_between_the_last_sft_checkpoint_and_sft_model_is_repaired(tiny_train_config, tmp_path):
    cfg = tiny_train_config(run_dir=str(tmp_path / "run"), rl__enabled=False)
    Trainer(cfg).run()
    import shutil

    shutil.rmtree(Path(cfg.run_dir) / "sft_model")  # what a kill right after the checkpoint would have left
    Trainer(cfg, resume=True).run()
    assert (Path(cfg.run_dir) / "sft_model" / "model.safetensors").is_file()
    evals = [r for r in _records(cfg.run_dir) if r["stage"] == "eval"]
    assert [r["name"] for r in evals] == ["after_sft"]
