"""Hub ids wherever a model is named: resolved from the Hugging Face cache (laid out by hand here, offline), a
revision pinned to its commit, and every way that fails one line that names the id, the cache and the fix."""

import json

import huggingface_hub
import pytest
import torch
from cli_errors import one_error_line
from hub_cache import commit_for, lay_out

from polyrl.cli import run
from polyrl.device import HOST
from polyrl.errors import UserError
from polyrl.policy import hub
from polyrl.policy.loading import ModelConfig, load_policy
from polyrl.policy.resolve import resolve_model

REPO = "polyrl-tests/tiny-chat"


def test_hub_ids_are_org_slash_name_and_paths_are_not():
    assert hub.is_hub_id("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert hub.is_hub_id("Qwen/Qwen2.5-0.5B-Instruct")
    for name in ("gpt2", "/abs/path", "./rel/x", "runs/x/final_model", "~/m", "a/../b", "a--b/c", "x.gguf"):
        assert not hub.is_hub_id(name), name


def test_a_cached_hub_id_resolves_to_its_snapshot_and_commit(hub_cache, tiny_model_dir):
    snapshot = lay_out(hub_cache, REPO, tiny_model_dir)
    found = resolve_model(REPO)
    assert (found.kind, found.directory, found.repo_id, found.commit) == ("hub", snapshot, REPO, snapshot.name)
    assert found.base_model == REPO and found.license() == "apache-2.0"  # from the snapshot's model card


def test_a_branch_resolves_through_its_ref_and_a_commit_directly(hub_cache, tiny_model_dir):
    main = lay_out(hub_cache, REPO, tiny_model_dir)
    other = lay_out(hub_cache, REPO, tiny_model_dir, commit=commit_for("v2"), branch="v2")
    assert resolve_model(REPO, "v2").commit == other.name
    assert resolve_model(REPO, main.name).directory == main
    assert resolve_model(REPO).commit == main.name


def test_a_hub_id_loads_as_the_files_it_holds(hub_cache, tiny_model_dir):
    lay_out(hub_cache, REPO, tiny_model_dir)
    from_hub = load_policy(ModelConfig(path=REPO), device=HOST)
    local = load_policy(ModelConfig(path=str(tiny_model_dir)), device=HOST)
    assert from_hub.source.commit is not None
    for (name, a), (_, b) in zip(from_hub.model.named_parameters(), local.model.named_parameters(), strict=True):
        assert torch.equal(a, b), name


def test_a_revision_on_a_local_directory_is_refused(tiny_model_dir):
    with pytest.raises(UserError, match=r"applies to Hugging Face Hub ids, and .* is a local directory"):
        resolve_model(str(tiny_model_dir), "main")


def test_an_uncached_id_offline_stops_training_in_one_line_before_the_run_directory(hub_cache, tmp_path, capsys):
    code = run(["train", "--run-dir", str(tmp_path / "run"), f"model.path={REPO}"])
    line = one_error_line(capsys)
    assert code == 2
    assert REPO in line and str(hub_cache) in line and f"polyrl models pull {REPO}" in line
    assert "HF_HUB_OFFLINE" in line
    assert not (tmp_path / "run").exists()


def test_an_unknown_revision_of_a_cached_id_names_the_revision_in_the_fix(hub_cache, tiny_model_dir):
    lay_out(hub_cache, REPO, tiny_model_dir)
    with pytest.raises(UserError, match=f"polyrl models pull {REPO} --revision v9"):
        resolve_model(REPO, "v9")


def test_an_uncached_id_with_an_unreachable_hub_is_one_line(hub_cache, monkeypatch):
    import httpx2

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)

    def unreachable(self, repo_id, **kwargs):
        raise httpx2.ConnectError("[Errno -2] Name or service not known")

    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", unreachable)
    with pytest.raises(UserError) as caught:
        resolve_model(REPO)
    message = str(caught.value)
    assert "could not be reached (ConnectError: [Errno -2] Name or service not known)" in message
    assert f"polyrl models pull {REPO}" in message and str(hub_cache) in message


def test_a_gated_repository_says_how_to_get_access(hub_cache, monkeypatch):
    import httpx2
    from huggingface_hub.errors import GatedRepoError

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    response = httpx2.Response(403, request=httpx2.Request("GET", f"https://huggingface.co/api/models/{REPO}"))

    def gated(self, repo_id, **kwargs):
        raise GatedRepoError("Access to model is restricted", response=response)

    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", gated)
    with pytest.raises(UserError, match=f"is gated: accept its terms on https://huggingface.co/{REPO}.*HF_TOKEN"):
        resolve_model(REPO)


def test_a_download_asks_for_the_revision_into_the_hub_cache_without_other_formats(hub_cache, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    calls = []

    def listing(self, repo_id, revision=None, **kwargs):
        return ["config.json", "model.safetensors", "pytorch_model.bin", "model.gguf", "onnx/model.onnx"]

    def download(repo_id, **kwargs):
        calls.append((repo_id, kwargs))
        if kwargs.get("local_files_only"):
            raise huggingface_hub.errors.LocalEntryNotFoundError("not cached")
        return str(hub_cache / "models--x" / "snapshots" / commit_for("downloaded"))

    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", listing)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", download)
    snapshot = hub.hub_snapshot(REPO, "v1")
    assert snapshot.commit == commit_for("downloaded")
    (_, cached), (_, fetched) = calls
    assert cached["local_files_only"] and not fetched.get("local_files_only")
    assert fetched["revision"] == "v1" and fetched["cache_dir"] == hub_cache
    assert {"*.bin", "*.gguf", "onnx/*"} <= set(fetched["ignore_patterns"])


def test_bin_weights_are_downloaded_only_where_no_safetensors_are():
    assert "*.bin" in hub.ignored_files(["config.json", "model.safetensors", "pytorch_model.bin"])
    assert "*.bin" not in hub.ignored_files(["config.json", "pytorch_model.bin"])


def test_a_damaged_snapshot_is_one_line_naming_the_hub_id_and_commit(hub_cache, tiny_model_dir):
    snapshot = lay_out(hub_cache, REPO, tiny_model_dir, copy=True)
    weights = snapshot / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(UserError) as caught:
        load_policy(ModelConfig(path=REPO), device=HOST)
    message = str(caught.value)
    assert "is damaged or not a safetensors file" in message
    assert f"the Hub snapshot of {REPO} at commit {snapshot.name}" in message


def test_a_snapshot_of_an_encoder_is_refused_as_not_causal(hub_cache, tmp_path):
    from transformers import BertConfig, BertLMHeadModel

    bert = tmp_path / "bert"
    config = BertConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
    )
    BertLMHeadModel(config).save_pretrained(bert)
    lay_out(hub_cache, "polyrl-tests/bert", bert)
    with pytest.raises(UserError, match="not a causal language model"):
        load_policy(ModelConfig(path="polyrl-tests/bert"), device=HOST)


def test_models_pull_offline_is_one_line(hub_cache, capsys):
    assert run(["models", "pull", REPO]) == 2
    assert one_error_line(capsys) == (
        f"polyrl: error: polyrl models pull {REPO} needs the Hugging Face Hub, and HF_HUB_OFFLINE is set"
    )


def test_models_pull_fetches_the_revision_and_prints_snapshot_and_commit(
    hub_cache, tiny_model_dir, monkeypatch, capsys
):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", lambda self, repo_id, **kw: ["model.safetensors"])
    seen = []

    def download(repo_id, revision=None, **kwargs):
        seen.append((repo_id, revision, kwargs.get("local_files_only", False)))
        return str(lay_out(hub_cache, repo_id, tiny_model_dir, branch=revision))

    monkeypatch.setattr(huggingface_hub, "snapshot_download", download)
    assert run(["models", "pull", REPO, "--revision", "v1"]) == 0
    snapshot = next((hub_cache / f"models--{REPO.replace('/', '--')}" / "snapshots").iterdir())
    assert capsys.readouterr().out.splitlines() == [str(snapshot), f"commit: {snapshot.name}"]
    assert seen == [(REPO, "v1", False)]  # pull always asks the Hub, never only the cache


def test_models_prepare_and_list_show_a_cached_hub_model(hub_cache, tiny_model_dir, capsys):
    snapshot = lay_out(hub_cache, REPO, tiny_model_dir)
    assert run(["models", "prepare", REPO]) == 0
    assert capsys.readouterr().out.strip() == str(snapshot)
    assert run(["models", "list"]) == 0
    listed = capsys.readouterr().out
    assert f"Hugging Face cache: {hub_cache}" in listed and f"  {REPO} ({snapshot.name[:10]})" in listed


def test_eval_takes_a_hub_id_and_its_revision(hub_cache, tiny_model_dir, tmp_path, capsys):
    snapshot = lay_out(hub_cache, REPO, tiny_model_dir, branch="v1")
    args = [
        "eval",
        "--model",
        REPO,
        "--revision",
        "v1",
        "--tasks",
        "addition",
        "--n",
        "2",
        "--out",
        str(tmp_path / "e"),
    ]
    assert run(args) == 0
    assert json.loads((tmp_path / "e" / "results.json").read_text())["model"] == (
        f"checkpoint {REPO} at commit {snapshot.name}"
    )
    assert run(["eval", "--model", REPO, "--tasks", "addition", "--n", "2", "--out", str(tmp_path / "f")]) == 2
    assert "HF_HUB_OFFLINE" in capsys.readouterr().err  # no main branch in this cache: only v1 was laid out


def test_serve_names_a_hub_model_by_its_id(hub_cache, tiny_model_dir, monkeypatch):
    pytest.importorskip("fastapi")
    snapshot = lay_out(hub_cache, REPO, tiny_model_dir)
    served = []
    monkeypatch.setattr(
        "polyrl.serve.app.serve", lambda checkpoint, host, port, name, *rest: served.append((checkpoint, name))
    )
    assert run(["serve", REPO]) == 0
    assert served == [(str(snapshot), REPO)]


def test_rm_train_starts_a_reward_model_from_a_hub_id(hub_cache, tiny_model_dir, tmp_path):
    from polyrl.rewards.reward_model import load_reward_model
    from polyrl.rewards.rm_training import build_preference_data, save_preferences, train_reward_model

    lay_out(hub_cache, REPO, tiny_model_dir, branch="v1")
    data = save_preferences(build_preference_data(["addition"], 8, 0, "easy"), tmp_path / "pairs.jsonl")
    train_reward_model(data, REPO, tmp_path / "rm", steps=1, batch_size=4, log=lambda m: None, revision="v1")
    model, _ = load_reward_model(tmp_path / "rm", device=HOST)
    assert model.config.num_labels == 1 and type(model).__name__ == "LlamaForSequenceClassification"
