"""A run and its resumes said what they did (issue #43): ``rl.steps=0`` listed a ``final_model/`` it never wrote,
and resume overrides that cannot take effect (``model.path``, ``sft.`` settings after SFT, ``run_dir``) were
recorded or ignored without a word. Each such resume is now one line and exit code 2, the run directory byte for
byte as it was; the overrides that do take effect still apply."""

import hashlib
import shutil
from pathlib import Path

import pytest
import yaml
from cli_errors import one_error_line

from polyrl.cli import run as cli
from polyrl.train.config import load_config
from polyrl.train.trainer import Trainer


def _snapshot(run_dir: Path) -> dict[str, str]:
    return {
        str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_train_settings) -> Path:
    """The tiny run, trained to its end with every checkpoint kept (sft-000003 … rl-000006)."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    data = {**tiny_train_settings, "run_dir": str(run_dir), "tensorboard": False, "keep_checkpoints": 10}
    Trainer(load_config(None, base=data)).run()
    return run_dir


@pytest.fixture
def copied(finished, tmp_path) -> Path:
    """A copy of the finished run, to resume."""
    return Path(shutil.copytree(finished, tmp_path / "run"))


def _in_sft(run_dir: Path) -> Path:
    """``run_dir`` as a run killed during SFT leaves it: its newest checkpoint sft-000006, nothing of RL."""
    for path in (run_dir / "checkpoints").iterdir():
        if path.name.startswith("rl-") or path.name == "LATEST":
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    for name in ("final_model", "summary.md"):
        if (run_dir / name).exists():
            shutil.rmtree(run_dir / name) if (run_dir / name).is_dir() else (run_dir / name).unlink()
    return run_dir


# -- rl.steps=0 -----------------------------------------------------------------------------------------------------
def test_a_run_without_rl_steps_lists_only_what_it_wrote_and_says_why(tiny_train_settings, tmp_path, capsys):
    data = {**tiny_train_settings, "run_dir": str(tmp_path / "run"), "tensorboard": False}
    data["rl"] = {**data["rl"], "steps": 0}
    config = tmp_path / "cfg.yaml"
    config.write_text(yaml.safe_dump(data))
    assert cli(["train", "--config", str(config), "--run-dir", str(tmp_path / "run")]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert not (tmp_path / "run" / "final_model").exists()
    assert f"run directory: {tmp_path / 'run'} (metrics.jsonl, sft_model/, eval/); no RL ran (rl.steps is 0)" in out
    assert "no final_model/ or summary.md, the model is sft_model/" in out


# -- resume overrides that could only be recorded -------------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides, keys, why",
    [
        (["sft.steps=12"], "sft.steps", "SFT is over (rl-000006 is an RL checkpoint; its model is sft_model/)"),
        (["sft.lr=0.01", "sft.batch_size=4"], "sft.batch_size, sft.lr", "SFT is over"),
        (["model.path=smollm2-135m-instruct"], "model.path", "the run goes on from the weights of rl-000006"),
    ],
    ids=["sft.steps", "two-sft-keys", "model.path"],
)
def test_a_resume_override_that_cannot_take_effect_is_refused_and_changes_nothing(
    copied, capsys, overrides, keys, why, monkeypatch
):
    from polyrl.train import build

    before = _snapshot(copied)
    if overrides[0].startswith("model.path"):  # the preset's files are not needed: the refusal comes first
        real = build.load_policy
        monkeypatch.setattr(
            build, "load_policy", lambda cfg, **kw: real(cfg.model_copy(update={"path": "tiny"}), **kw)
        )
    assert cli(["train", "--resume", str(copied), *overrides]) == 2
    line = one_error_line(capsys)
    assert f"cannot resume {copied} from checkpoint rl-000006 with {keys} changed: " in line
    assert why in line and line.endswith("or start a new run in another run_dir")
    assert _snapshot(copied) == before


@pytest.mark.parametrize(
    "args, given",
    [(["--run-dir", "elsewhere"], "--run-dir"), (["run_dir=elsewhere"], "run_dir"), (["resumes=[]"], "resumes")],
)
def test_a_resume_refuses_to_move_the_run_or_rewrite_its_history(copied, tmp_path, capsys, monkeypatch, args, given):
    """``--resume RUN run_dir=X`` went on in RUN, ``resumes=[]`` was dropped: both silently."""
    monkeypatch.chdir(tmp_path)
    before = _snapshot(copied)
    assert cli(["train", "--resume", str(copied), *args]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"polyrl: error: --resume {copied} with {given}: ")
    why = "the resume history is written by polyrl" if given == "resumes" else "a resumed run stays in"
    assert why in line
    assert _snapshot(copied) == before
    assert not (tmp_path / "elsewhere").exists()


def test_sft_settings_still_apply_to_a_resume_during_sft(copied, capsys):
    """What holds: a run resumed from an SFT checkpoint goes on with the SFT settings it is given."""
    run_dir = _in_sft(copied)
    assert cli(["train", "--resume", str(run_dir), "sft.steps=8"]) == 0
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["sft"]["steps"] == 8
    assert saved["resumes"][-1] == {"stage": "sft", "step": 6, "overrides": {"sft.steps": 8}}
    assert (run_dir / "final_model").is_dir()
