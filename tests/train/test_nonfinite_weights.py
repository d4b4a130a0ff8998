"""A run whose weights become NaN or infinite stops (exit code 1) instead of saving them: ``rl.lr=inf`` made
every weight NaN in one step and the run exited 0 with a NaN ``final_model`` (issue #36). The config refuses
such rates now (tests/train/test_config_limits.py); this is the guard behind it, for whatever else does it."""

from pathlib import Path

import pytest
import torch
import yaml

from polyrl.cli import run


@pytest.fixture
def nan_steps(monkeypatch):
    """Every AdamW step leaves a NaN in the first weight it updates, as a step of rate inf does."""
    step = torch.optim.AdamW.step

    def poisoned(self, *args, **kwargs):
        out = step(self, *args, **kwargs)
        with torch.no_grad():
            self.param_groups[0]["params"][0].view(-1)[0] = float("nan")
        return out

    monkeypatch.setattr(torch.optim.AdamW, "step", poisoned)


def test_a_run_whose_weights_become_nan_exits_1_and_saves_no_model(tiny_train_config, tmp_path, nan_steps, capsys):
    cfg = tiny_train_config(sft__steps=2, rl__steps=2, checkpoint_every=10, tensorboard=False)
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    assert run(["train", "--config", str(config), "--run-dir", str(tmp_path / "run")]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "training stopped: the weights became NaN or infinite (1 of " in out
    assert f"so {tmp_path / 'run' / 'sft_model'} was not written" in out  # the model SFT ends with
    assert not (tmp_path / "run" / "sft_model").exists() and not (tmp_path / "run" / "final_model").exists()


def test_nan_weights_never_replace_the_checkpoints(tiny_train_config, nan_steps):
    from polyrl.train.trainer import Trainer, TrainingError

    cfg = tiny_train_config(sft__steps=2, rl__steps=2, checkpoint_every=1, tensorboard=False)
    with pytest.raises(
        TrainingError, match=r"so checkpoint sft/1 was not written; any checkpoints in .* hold earlier, finite"
    ):
        Trainer(cfg).run()
    assert list((Path(cfg.run_dir) / "checkpoints").iterdir()) == []
