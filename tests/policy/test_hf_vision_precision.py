"""bf16 for Hugging Face vision-language policies (``policy/hf_vision.py`` loaded by ``policy/loading.py``, the
precision of ``forward/precision.py``), on the small random-initialised Idefics3 and Qwen2-VL of
``tests/small_vlms.py``: ``model.autocast: bf16`` and ``model.dtype: bfloat16`` run generation and the training
forward in the same precision (their log-probs within the bf16 tolerance of the text tests), the vision tower's patch
embedding (a convolution) runs in bf16 under CPU autocast, ``auto`` reads the language model's width from the text
config (a vision-language model's top-level config has no ``hidden_size``: ``auto`` left every one in fp32), and
fp16 is refused for training as for text."""

import json

import pytest
import torch
from small_vlms import save_idefics3, save_qwen2_vl

from polyrl.algos.objective_stats import logprob_mismatch
from polyrl.cli import run
from polyrl.device import HOST
from polyrl.forward import precision as precision_module
from polyrl.forward.batch import collate
from polyrl.forward.logprobs import sequence_logprobs
from polyrl.forward.precision import BF16_LOGPROB_TOLERANCE, autocast_mode, resolve_autocast
from polyrl.learner.sft_step import sft_step
from polyrl.policy.generation import TransformersBackend
from polyrl.policy.loading import ModelConfig, load_policy
from polyrl.policy.prompts import PromptBuilder, PromptConfig
from polyrl.tasks import get_task

FAMILIES = {"idefics3": (save_idefics3, {}), "qwen2_vl": (save_qwen2_vl, {"images": {"size": 16}})}
PRECISIONS = {"autocast bf16": {"autocast": "bf16"}, "bfloat16 weights": {"dtype": "bfloat16"}}
PATCH_EMBEDDINGS = {"idefics3": "vision_model.embeddings.patch_embedding", "qwen2_vl": "visual.patch_embed.proj"}
"""The convolution that cuts each family's pictures into patch embeddings (a Conv2d; Qwen2-VL's a Conv3d)."""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return {name: save(tmp_path_factory.mktemp(name)) for name, (save, _) in FAMILIES.items()}


def _policy(saved, family, **model):
    """The saved model with sharp random weights (logits spread over nats, as in tests/train/test_bf16.py: near
    uniform distributions round to the same log-probs in every precision)."""
    policy = load_policy(ModelConfig(path=str(saved[family]), **FAMILIES[family][1], **model), device=HOST)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in policy.model.parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.25)
    return policy


def _prompts(policy, seeds=(0, 1, 2)):
    builder = PromptBuilder(policy.tokenizer, PromptConfig(field="question", style="terse"), policy.image_input)
    return [builder.ids(get_task("count_shapes").generate(s, "easy")) for s in seeds]


def _generate_and_score(policy):
    """Completions sampled from ``policy`` with their log-probs, and the training forward's log-probs of them."""
    torch.manual_seed(0)
    prompts = [p for p in _prompts(policy) for _ in range(2)]
    gens = TransformersBackend(policy.model, policy.tokenizer, device=HOST).generate(
        prompts, max_new_tokens=8, temperature=1.0
    )
    batch = collate([(g.prompt_ids, g.completion_ids) for g in gens], policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logp, _ = sequence_logprobs(policy.model, batch)
    training = [logp[i][batch.loss_mask[i].bool()] for i in range(len(gens))]
    return gens, training


def _mismatch(gens, training) -> dict[str, float]:
    pad = torch.nn.utils.rnn.pad_sequence
    behaviour = pad([torch.tensor(g.logprobs) for g in gens], batch_first=True)
    mask = pad([torch.ones(len(g.logprobs)) for g in gens], batch_first=True)
    return {k: float(v) for k, v in logprob_mismatch(behaviour, pad(training, batch_first=True), mask).items()}


@pytest.mark.parametrize("precision", list(PRECISIONS))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_bf16_generation_log_probs_equal_the_bf16_training_forward_s_within_the_text_tolerance(
    saved, family, precision
):
    policy = _policy(saved, family, **PRECISIONS[precision])
    gens, training = _generate_and_score(policy)
    stats = _mismatch(gens, training)
    assert stats["mismatch_abs_mean"] < BF16_LOGPROB_TOLERANCE["mismatch_abs_mean"]
    assert stats["mismatch_abs_max"] < BF16_LOGPROB_TOLERANCE["mismatch_abs_max"]
    assert stats["mismatch_ratio_mean"] == pytest.approx(1.0, abs=BF16_LOGPROB_TOLERANCE["mismatch_ratio_mean"])
    fp32 = _policy(saved, family, autocast="none")  # the same weights, in float32: bf16 did round
    batch = collate([(g.prompt_ids, g.completion_ids) for g in gens], fp32.tokenizer.pad_token_id)
    with torch.no_grad():
        logp, _ = sequence_logprobs(fp32.model, batch)
    exact = [logp[i][batch.loss_mask[i].bool()] for i in range(len(gens))]
    assert not all(torch.equal(a, b) for a, b in zip(exact, training))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_patch_embedding_convolution_runs_in_bf16_under_cpu_autocast_in_generation_and_training(saved, family):
    policy = _policy(saved, family, autocast="bf16")
    assert autocast_mode(policy.model) == "bf16"
    conv = policy.model.model.get_submodule(PATCH_EMBEDDINGS[family])
    outputs: list[torch.Tensor] = []
    conv.register_forward_hook(lambda module, args, out: outputs.append(out.detach()))
    gens, _ = _generate_and_score(policy)
    assert len(outputs) == 2, "one prefill and one training forward saw the pictures"
    assert all(o.dtype == torch.bfloat16 and torch.isfinite(o).all() for o in outputs)
    reference = conv(*_conv_inputs(conv, policy, gens))  # the same pictures in float32, outside autocast
    assert torch.allclose(outputs[-1].float(), reference, rtol=0.05, atol=0.05 * reference.abs().max().item())


def _conv_inputs(conv, policy, gens):
    """What the training forward gave the convolution, recomputed in float32."""
    seen = []
    handle = conv.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach().float()))
    batch = collate([(g.prompt_ids, g.completion_ids) for g in gens], policy.tokenizer.pad_token_id)
    with torch.no_grad():
        sequence_logprobs(policy.model, batch)
    handle.remove()
    return seen[-1:]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_an_sft_step_on_bfloat16_weights_trains_the_vision_tower_and_the_language_model(saved, family):
    policy = _policy(saved, family, dtype="bfloat16")
    prompts = _prompts(policy)
    answers = [policy.tokenizer("<answer>1</answer>", add_special_tokens=False).input_ids for _ in prompts]
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    params = [p for p in policy.model.parameters() if p.requires_grad]
    pad = policy.tokenizer.pad_token_id
    loss = sft_step(policy.model, torch.optim.SGD(params, lr=0.1), params, pad, list(zip(prompts, answers)), 64, HOST)
    assert loss is not None and loss > 0
    assert all(p.dtype == torch.bfloat16 for p in policy.model.parameters())
    changed = {n for n, p in policy.model.named_parameters() if not torch.equal(p, before[n])}
    assert any(PATCH_EMBEDDINGS[family] in n for n in changed) and "lm_head.weight" in changed


def _wide(family: str, width: int):
    """A one-layer model of ``family`` whose language model is ``width`` wide (built, not saved)."""
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
    )

    text = dict(hidden_size=width, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, vocab_size=64)
    if family == "idefics3":
        vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=32)
        return Idefics3ForConditionalGeneration(Idefics3Config(text_config=text, vision_config=vision))
    vision = dict(depth=1, embed_dim=32, hidden_size=width, num_heads=2, patch_size=4, mlp_ratio=2)
    return Qwen2VLForConditionalGeneration(Qwen2VLConfig(text_config=text, vision_config=vision))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_auto_reads_the_language_model_s_width_from_the_text_config(family, monkeypatch):
    """Fails before the text config was read: a vision-language config has no top-level ``hidden_size``, so ``auto``
    kept every Hugging Face VLM in fp32, however wide."""
    wide = _wide(family, precision_module.AUTO_BF16_MIN_WIDTH)
    monkeypatch.setattr(precision_module, "bf16_cpu_flags", lambda: frozenset({"amx_bf16"}))
    assert precision_module.model_width(wide) == precision_module.AUTO_BF16_MIN_WIDTH
    assert resolve_autocast("auto", wide, "cpu") == "bf16"
    assert resolve_autocast("auto", _wide(family, 32), "cpu") == "none", "the small ones stay in fp32"
    bf16_weights = _wide(family, precision_module.AUTO_BF16_MIN_WIDTH).to(torch.bfloat16)  # (`to` is in place)
    assert resolve_autocast("auto", bf16_weights, "cpu") == "none"
    monkeypatch.setattr(precision_module, "bf16_cpu_flags", lambda: frozenset())
    assert resolve_autocast("auto", wide, "cpu") == "none", "emulated bf16 is slower than fp32"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    assert resolve_autocast("auto", wide, "cuda") == "bf16", "what a lent GPU runs SmolVLM-256M and Qwen2-VL-2B in"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.autocast=fp16", "model.autocast=fp16 trains without a gradient scaler"),
        ("model.dtype=float16", "model.dtype=float16 trains fp16 weights without a gradient scaler"),
    ],
)
def test_fp16_training_of_a_vision_language_model_is_refused_in_one_line(saved, tmp_path, capsys, override, message):
    config = {
        "tasks": [{"name": "count_shapes", "difficulty": "easy"}],
        "model": {"path": str(saved["idefics3"])},
        "run_dir": str(tmp_path / "run"),
    }
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(config))
    assert run(["train", "--config", str(path), override]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "run").exists()
