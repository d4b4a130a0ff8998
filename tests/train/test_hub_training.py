"""A run that names its model by Hub id, as a TRL user does: it trains from the Hugging Face cache (offline here),
its config.yaml records the commit it loaded, and a LoRA run leaves the merged model and the PEFT adapter, each
with a model card whose header the Hub reads."""

import hashlib
import json
import shutil

import pytest
import torch
import yaml
from cli_errors import one_error_line
from hub_cache import commit_for, lay_out

from polyrl.cli import run as cli
from polyrl.device import HOST
from polyrl.policy.loading import ModelConfig, load_policy
from polyrl.train.config import load_config, save_config
from polyrl.train.resume import pin_models
from polyrl.train.trainer import Trainer

REPO = "polyrl-tests/tiny-chat"


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, tiny_model_dir, tiny_train_settings):
    """One LoRA run (2 SFT + 2 RL steps) on ``REPO`` from an offline Hub cache; its run directory and snapshot."""
    from huggingface_hub import constants

    tmp = tmp_path_factory.mktemp("hub_run")
    cache = tmp / "hf-cache"
    snapshot = lay_out(cache, REPO, tiny_model_dir)
    data = {**tiny_train_settings, "run_dir": str(tmp / "run"), "tensorboard": False}
    data["model"] = {"path": REPO, "lora": {"enabled": True, "r": 4, "alpha": 8}}
    data["prompt"] = {"field": "question", "style": "terse"}
    data["sft"] = {**data["sft"], "steps": 2, "lr": 3e-2}
    data["rl"] = {**data["rl"], "steps": 2, "lr": 1e-2, "kl_coef": 0.05}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_CACHE", str(cache))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setattr(constants, "HF_HUB_CACHE", str(cache))
        mp.setattr(constants, "HF_HUB_OFFLINE", True)
        Trainer(load_config(None, base=data)).run()
    return tmp / "run", snapshot, cache


def test_the_run_config_records_the_commit_it_loaded(lora_run):
    run, snapshot, _ = lora_run
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["model"]["path"] == REPO and saved["model"]["revision"] == snapshot.name


def test_every_saved_model_holds_the_merged_checkpoint_and_the_adapter(lora_run):
    run, _, _ = lora_run
    for name in ("sft_model", "final_model"):
        files = {p.relative_to(run / name).as_posix() for p in (run / name).rglob("*") if p.is_file()}
        assert {"config.json", "model.safetensors", "README.md", "polyrl_config.yaml"} <= files
        assert {"adapter/adapter_config.json", "adapter/adapter_model.safetensors", "adapter/README.md"} <= files
        assert "adapter/tokenizer.json" in files  # the adapter folder is pushable on its own


def test_the_adapter_names_its_hub_base_and_commit(lora_run):
    run, snapshot, _ = lora_run
    saved = json.loads((run / "final_model" / "adapter" / "adapter_config.json").read_text())
    assert (saved["base_model_name_or_path"], saved["revision"]) == (REPO, snapshot.name)


def test_the_adapter_on_the_base_from_the_hub_cache_computes_the_merged_model(lora_run):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run, snapshot, cache = lora_run
    base = AutoModelForCausalLM.from_pretrained(REPO, revision=snapshot.name, cache_dir=cache, local_files_only=True)
    adapted = PeftModel.from_pretrained(base, run / "final_model" / "adapter").eval()
    merged = AutoModelForCausalLM.from_pretrained(run / "final_model").eval()
    ids = torch.tensor([[3, 17, 25, 9, 40, 41, 12]])
    with torch.no_grad():
        torch.testing.assert_close(adapted(input_ids=ids).logits, merged(input_ids=ids).logits, rtol=0, atol=1e-5)
        assert not torch.allclose(base(input_ids=ids).logits, merged(input_ids=ids).logits)  # training moved it


def test_the_cards_carry_the_base_its_license_and_the_results(lora_run):
    from huggingface_hub import ModelCard

    run, snapshot, _ = lora_run
    merged = ModelCard.load(run / "final_model" / "README.md")
    adapter = ModelCard.load(run / "final_model" / "adapter" / "README.md")
    assert merged.data.base_model == adapter.data.base_model == REPO
    assert merged.data.license == adapter.data.license == "apache-2.0"  # carried from the base's card
    assert (merged.data.library_name, adapter.data.library_name) == ("transformers", "peft")
    assert adapter.data.base_model_relation == "adapter"
    assert {"polyrl", "grpo", "lora"} <= set(merged.data.tags)
    assert f"at commit `{snapshot.name}`" in merged.text
    assert "| addition |" in merged.text and "after RL" in merged.text  # the held-out table, before and after
    reproduce = load_config(run / "final_model" / "polyrl_config.yaml", saved=True)
    assert reproduce.model.revision == snapshot.name


def test_the_sft_model_card_shows_the_after_sft_results(lora_run):
    run, _, _ = lora_run
    text = (run / "sft_model" / "README.md").read_text()
    assert "| task | after SFT |" in text and "Not evaluated yet" not in text


def test_a_rerun_of_the_saved_config_loads_the_recorded_commit_after_main_moves(
    hub_cache, tiny_model_dir, tiny_train_settings, tmp_path
):
    first = lay_out(hub_cache, REPO, tiny_model_dir)
    config = load_config(None, base={"tasks": ["addition"], "model": {"path": REPO}, "run_dir": str(tmp_path / "r")})
    save_config(pin_models(config), tmp_path / "config.yaml")
    other = tmp_path / "other"
    load_policy(ModelConfig(path="tiny", tiny=tiny_train_settings["model"]["tiny"]), seed=1, device=HOST).save(other)
    lay_out(hub_cache, REPO, other, commit=commit_for("second"))  # main now names another commit
    rerun = load_policy(load_config(tmp_path / "config.yaml", saved=True).model, device=HOST)
    assert rerun.source.commit == first.name
    assert load_policy(ModelConfig(path=REPO), device=HOST).source.commit == commit_for("second")
    original = load_policy(ModelConfig(path=str(tiny_model_dir)), device=HOST)
    for (name, a), (_, b) in zip(rerun.model.named_parameters(), original.model.named_parameters(), strict=True):
        assert torch.equal(a, b), name


def test_a_resume_that_names_another_revision_is_refused_and_changes_nothing(
    lora_run, hub_cache, tiny_model_dir, tiny_train_settings, tmp_path, capsys
):
    """The run goes on from its checkpoint's weights, so a resume cannot switch the base to another commit: it would
    only be recorded (issue #43's rule for ``model.path``, held for ``model.revision``)."""
    run, snapshot, _ = lora_run
    copied = shutil.copytree(run, tmp_path / "run")
    lay_out(hub_cache, REPO, tiny_model_dir, commit=snapshot.name)
    other = tmp_path / "other"
    load_policy(ModelConfig(path="tiny", tiny=tiny_train_settings["model"]["tiny"]), seed=1, device=HOST).save(other)
    lay_out(hub_cache, REPO, other, commit=commit_for("v2"), branch="v2")
    files = lambda: {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(copied.rglob("*")) if p.is_file()}
    before = files()
    assert cli(["train", "--resume", str(copied), "model.revision=v2"]) == 2
    line = one_error_line(capsys)
    assert f"cannot resume {copied} from checkpoint rl-" in line and "with model.revision changed: " in line
    assert "the run goes on from the weights of rl-" in line
    assert files() == before


def test_a_lora_checkpoint_of_a_hub_base_asks_the_hub_nothing(hub_cache, tiny_model_dir, tmp_path, recwarn):
    """PEFT's save looked the base's config.json up on the Hub at every checkpoint (offline: a warning each time)."""
    from polyrl.train.checkpoint import save_checkpoint

    lay_out(hub_cache, REPO, tiny_model_dir)
    policy = load_policy(ModelConfig(path=REPO, lora={"enabled": True, "r": 2}), device=HOST)
    policy.save(tmp_path / "sft_model")  # as a run saves its model first: the adapter names its Hub base
    optimizer = torch.optim.AdamW([p for p in policy.model.parameters() if p.requires_grad])
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    save_checkpoint(tmp_path / "checkpoints", "sft", 1, policy.model, optimizer, scheduler, {}, keep=2)
    assert (tmp_path / "checkpoints" / "sft-000001" / "model" / "adapter_model.safetensors").is_file()
    assert [str(w.message) for w in recwarn if "Could not find a config file" in str(w.message)] == []


def test_reward_model_and_local_judge_hub_ids_are_pinned(hub_cache, tiny_model_dir, tmp_path):
    from polyrl.rewards.reward_model import build_tiny_reward_model

    rm_dir = tmp_path / "rm"
    model, tokenizer = build_tiny_reward_model(0, **TINY_SHAPE_RM)
    model.save_pretrained(rm_dir)
    tokenizer.save_pretrained(rm_dir)
    rm_snapshot = lay_out(hub_cache, "polyrl-tests/tiny-rm", rm_dir)
    judge_snapshot = lay_out(hub_cache, REPO, tiny_model_dir)
    rubric = tmp_path / "rubric.md"
    rubric.write_text("Correct answers score 10.")
    reward = {
        "reward_model_source": {"path": "polyrl-tests/tiny-rm"},
        "judge_source": {"rubric": str(rubric), "backend": "local", "model": REPO},
    }
    config = load_config(None, base={"tasks": ["addition"], "reward": reward, "run_dir": str(tmp_path / "r")})
    pinned = pin_models(config).reward
    assert pinned.reward_model_source.revision == rm_snapshot.name
    assert pinned.judge_source.revision == judge_snapshot.name


TINY_SHAPE_RM = {"hidden_size": 32, "intermediate_size": 64, "num_layers": 1, "num_heads": 2}
