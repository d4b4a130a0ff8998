"""``polyrl push``: what it stages and the ``huggingface_hub.HfApi`` calls it makes (the methods are replaced here:
no network), and the one line it stops with, before staging, offline or without a token."""

from pathlib import Path

import huggingface_hub
import pytest
from cli_errors import one_error_line

from polyrl.cli import run
from polyrl.device import HOST
from polyrl.policy.loading import load_policy
from polyrl.train.config import load_config, save_config
from polyrl.train.model_card import CardInputs, write_model_card

REPO = "me/tiny-lora"


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, tiny_model_dir):
    """A run directory whose final_model holds a LoRA policy as the Trainer saves it (merged, adapter, cards)."""
    run_dir = tmp_path_factory.mktemp("push") / "run"
    model = {"path": str(tiny_model_dir), "lora": {"enabled": True, "r": 2}}
    config = load_config(None, base={"tasks": ["addition"], "model": model, "run_dir": str(run_dir)})
    policy = load_policy(config.model, device=HOST)
    policy.save(run_dir / "final_model")
    write_model_card(run_dir / "final_model", CardInputs(config, policy.source, {}))
    save_config(config, run_dir / "config.yaml")
    return run_dir


@pytest.fixture
def hub(monkeypatch):
    """Online, with a token; ``HfApi.create_repo`` and ``upload_folder`` recorded (with the staged files and the
    text of each staged card at upload time) instead of sent."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    calls = []

    def create_repo(self, repo_id, **kwargs):
        calls.append(("create_repo", repo_id, kwargs))

    def upload_folder(self, *, repo_id, folder_path, **kwargs):
        root = Path(folder_path)
        files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
        cards = {f: (root / f).read_text() for f in files if f.endswith("README.md")}
        calls.append(("upload_folder", repo_id, {**kwargs, "files": files, "cards": cards}))
        return type("Commit", (), {"commit_url": f"https://huggingface.co/{repo_id}/commit/abc"})()

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)
    return calls


def test_push_stages_the_merged_model_its_adapter_card_and_config_in_one_upload(lora_run, hub, capsys):
    assert run(["push", str(lora_run), REPO, "--private"]) == 0
    (create, name, options), (upload, uploaded_to, sent) = hub
    assert (create, name, options) == ("create_repo", REPO, {"private": True, "exist_ok": True})
    assert (upload, uploaded_to) == ("upload_folder", REPO)
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md", "polyrl_config.yaml"} <= set(
        sent["files"]
    )
    assert {"adapter/adapter_config.json", "adapter/adapter_model.safetensors", "adapter/README.md"} <= set(
        sent["files"]
    )
    assert f'MODEL = "{REPO}"' in sent["cards"]["README.md"]
    assert 'PeftModel.from_pretrained(base, ADAPTER, subfolder="adapter")' in sent["cards"]["adapter/README.md"]
    assert f"to {REPO}: https://huggingface.co/{REPO}/commit/abc" in capsys.readouterr().out
    assert (lora_run / "final_model" / "README.md").read_text().count(REPO) == 0  # the run's own card unchanged


def test_push_adapter_only_stages_the_adapter_alone_and_warns_of_a_local_base(lora_run, hub, capsys):
    assert run(["push", str(lora_run / "final_model"), REPO, "--adapter-only"]) == 0
    sent = hub[1][2]
    assert {"adapter_config.json", "adapter_model.safetensors", "README.md", "tokenizer.json"} <= set(sent["files"])
    assert not any(f.startswith("adapter/") or f == "model.safetensors" for f in sent["files"])
    assert f'ADAPTER = "{REPO}"' in sent["cards"]["README.md"]
    assert "the adapter's base is the local directory" in capsys.readouterr().err


def test_push_offline_is_one_line_before_anything_is_staged(lora_run, hub, monkeypatch, capsys):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr("polyrl.train.push.stage", lambda *a: pytest.fail("staged while offline"))
    assert run(["push", str(lora_run), REPO]) == 2
    assert "HF_HUB_OFFLINE is set" in one_error_line(capsys) and hub == []


def test_push_without_a_token_is_one_line_before_anything_is_staged(lora_run, hub, monkeypatch, capsys):
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    monkeypatch.setattr("polyrl.train.push.stage", lambda *a: pytest.fail("staged without a token"))
    assert run(["push", str(lora_run), REPO]) == 2
    assert "needs a Hugging Face token with write access: set HF_TOKEN" in one_error_line(capsys) and hub == []


def test_adapter_only_of_a_model_without_an_adapter_is_refused(tiny_model_dir, hub, capsys):
    assert run(["push", str(tiny_model_dir), REPO, "--adapter-only"]) == 2
    assert "holds no LoRA adapter" in one_error_line(capsys) and hub == []


def test_a_run_that_has_not_finished_names_its_model_directories(tmp_path, hub, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("seed: 0\n")
    assert run(["push", str(tmp_path / "run"), REPO]) == 2
    assert f"push one of its model directories, e.g. polyrl push {tmp_path / 'run' / 'sft_model'}" in one_error_line(
        capsys
    )


def test_a_failed_upload_is_one_line(lora_run, hub, monkeypatch, capsys):
    def refused(self, *, repo_id, folder_path, **kwargs):
        raise PermissionError("403 Forbidden: no write access to this repository")

    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", refused)
    assert run(["push", str(lora_run), REPO]) == 2
    assert f"cannot push to {REPO}: PermissionError: 403 Forbidden" in one_error_line(capsys)


def test_a_repository_id_must_be_org_slash_name(lora_run, hub, capsys):
    assert run(["push", str(lora_run), "not a repo"]) == 2
    assert "is not a Hugging Face repository id" in one_error_line(capsys)


def test_a_full_fine_tune_pushes_without_an_adapter_folder(tiny_model_dir, hub):
    assert run(["push", str(tiny_model_dir), REPO]) == 0
    assert not any(f.startswith("adapter/") for f in hub[1][2]["files"])
