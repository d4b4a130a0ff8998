"""polyrl's packed forward of Llama-family decoders (``forward/decoder.py``: the packed layout and the layers)
computes what transformers' own forward computes: the same log-probs, entropies and gradients in the update, the
same tokens and log-probs in generation — for each supported architecture, grouped-query attention, LoRA and
activation checkpointing — and steps aside for what it does not support."""

from __future__ import annotations

import copy
import random
from collections import Counter

import pytest
import torch
from small_llama import SHAPE, ConfigTokenizer
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from polyrl.device import HOST
from polyrl.forward import collate, sequence_logprobs
from polyrl.forward.decoder import Decoder, pack, set_forward
from polyrl.policy import TransformersBackend
from polyrl.policy.decode_graphs import DecodeGraphs
from polyrl.policy.packed_decode import GraphedDecode, PackedLinears
from polyrl.policy.tiny import build_tiny_policy


def _sharp(model):
    """Large random weights: varied tokens and far-from-uniform distributions, which exercise every position."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (0.3 if p.dim() > 1 else 0.1) + (1.0 if p.dim() == 1 else 0))
    return model


def _model(kind: str):
    torch.manual_seed(0)
    if kind == "llama":
        return _sharp(LlamaForCausalLM(LlamaConfig(**SHAPE, tie_word_embeddings=True)))
    if kind == "llama-mha":
        return _sharp(LlamaForCausalLM(LlamaConfig(**{**SHAPE, "num_key_value_heads": 4})))
    if kind == "qwen2":  # biases on q, k and v
        return _sharp(Qwen2ForCausalLM(Qwen2Config(**SHAPE)))
    if kind == "mistral":
        return _sharp(MistralForCausalLM(MistralConfig(**SHAPE, sliding_window=None)))
    raise ValueError(kind)


ARCHITECTURES = ["llama", "llama-mha", "qwen2", "mistral"]


def _batch(group_size=4, masks=False, seed=5, n_groups=5):
    rnd = random.Random(seed)
    prompts = [[rnd.randrange(3, 72) for _ in range(rnd.randint(2, 20))] for _ in range(n_groups)]
    seqs = [(p, [rnd.randrange(3, 72) for _ in range(rnd.randint(1, 12))]) for p in prompts for _ in range(group_size)]
    policy = [[int(rnd.random() < 0.7) for _ in r] for _, r in seqs] if masks else None
    return collate(seqs, 0, policy)


def _scores(model, batch, forward: str, share=True):
    set_forward(model, forward)
    model.zero_grad(set_to_none=True)
    logp, ent = sequence_logprobs(model, batch, temperature=0.8, entropy=True, share_prompts=share)
    ((logp * batch.loss_mask).sum() / batch.loss_mask.sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp.detach() * batch.loss_mask, ent.detach() * batch.loss_mask, grads


def _assert_same(packed, reference, grad_rtol=1e-4):
    torch.testing.assert_close(packed[0], reference[0], atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(packed[1], reference[1], atol=2e-5, rtol=1e-5)
    assert packed[2].keys() == reference[2].keys()
    for name, g in reference[2].items():
        assert float((packed[2][name] - g).abs().max()) <= grad_rtol * float(g.abs().max()) + 1e-7, name


@pytest.mark.parametrize("kind", ARCHITECTURES)
@pytest.mark.parametrize("masks", [False, True], ids=["single-turn", "multi-turn masks"])
def test_packed_update_forward_gives_transformers_logprobs_entropies_and_gradients(kind, masks):
    model = _model(kind)
    assert Decoder.of(model) is not None
    batch = _batch(masks=masks)
    _assert_same(_scores(model, batch, "auto"), _scores(model, batch, "transformers"))


def test_large_attention_blocks_take_the_fused_kernel_with_the_same_numbers(monkeypatch):
    """Above EAGER_ATTENTION_MAX_SCORES attention runs in torch's memory-efficient kernel (no score matrix kept)."""
    import polyrl.forward.decoder as decoder

    model = _model("llama")
    batch = _batch(masks=True)
    reference = _scores(model, batch, "transformers")
    monkeypatch.setattr(decoder, "EAGER_ATTENTION_MAX_SCORES", 0)
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(
        torch.nn.functional, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    _assert_same(_scores(model, batch, "auto"), reference)
    assert calls


def test_without_prompt_sharing_or_prompt_lengths_the_numbers_are_the_same():
    model = _model("llama")
    batch = _batch()
    reference = _scores(model, batch, "transformers")
    _assert_same(_scores(model, batch, "auto", share=False), reference)
    whole = copy.copy(batch)
    whole.prompt_lengths = None  # every position after the first is scored, as transformers' plain forward does
    plain = _scores(model, whole, "transformers")
    packed = _scores(model, whole, "auto")
    _assert_same(packed, plain)
    with torch.no_grad():
        raw = sequence_logprobs(model, whole)[0]
    assert int((raw != 0).sum()) == int((whole.attention_mask.sum(1) - 1).sum()), "prompt positions are scored too"


def test_a_shuffled_minibatch_that_cuts_groups_apart():
    model = _model("qwen2")
    batch = _batch()
    mb = batch.select(torch.randperm(len(batch), generator=torch.Generator().manual_seed(0))[:13])
    _assert_same(_scores(model, mb, "auto"), _scores(model, mb, "transformers"))


def test_the_layout_holds_each_distinct_prompt_once_and_no_padding():
    batch = _batch(group_size=4, n_groups=3)
    packed = pack(batch, share_prompts=True)
    lengths = batch.attention_mask.sum(1)
    prompt_tokens = sum(int(p) for p in batch.prompt_lengths[::4])
    assert len(packed.ids) == prompt_tokens + int((lengths - batch.prompt_lengths).sum())
    assert len(packed.targets) == int(batch.loss_mask.sum()), "one score per response token"
    assert torch.equal(batch.input_ids[packed.rows, packed.cols + 1], packed.targets)


def test_activation_checkpointing_recomputes_the_same_gradients():
    model = _model("llama")
    batch = _batch()
    reference = _scores(model, batch, "auto")
    model.train()
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    assert Decoder.of(model).checkpointing() or not torch.is_grad_enabled()
    _assert_same(_scores(model, batch, "auto"), reference)


def test_lora_layers_run_inside_the_packed_forward():
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(_model("llama"), peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():  # non-zero adapters, so that they change the numbers
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2)
    assert Decoder.of(model) is not None
    batch = _batch()
    packed, reference = _scores(model, batch, "auto"), _scores(model, batch, "transformers")
    _assert_same(packed, reference)
    assert all("lora" in name for name in packed[2]), "only the adapters are trained"


def _prompts(n_groups=5, group=3, seed=1):
    rnd = random.Random(seed)
    prompts = [[rnd.randrange(3, 72) for _ in range(rnd.randint(2, 18))] for _ in range(n_groups)]
    return [p for p in prompts for _ in range(group)]


@pytest.mark.parametrize("kind", ARCHITECTURES)
def test_packed_generation_greedy_is_model_generate(kind):
    model = _model(kind).eval()
    flat = _prompts()
    first = TransformersBackend(model, ConfigTokenizer(), device=HOST).generate(flat, max_new_tokens=16, greedy=True)
    frequent = Counter(t for g in first for t in g.completion_ids[2:]).most_common(3)
    model.generation_config.eos_token_id = [1] + [t for t, _ in frequent]  # rows leave the batch at varied steps
    packed = TransformersBackend(model, ConfigTokenizer(), device=HOST).generate(flat, max_new_tokens=16, greedy=True)
    set_forward(model, "transformers")
    plain = TransformersBackend(model, ConfigTokenizer(), shared_prefill=False, device=HOST).generate(
        flat, max_new_tokens=16, greedy=True
    )
    assert [g.completion_ids for g in packed] == [g.completion_ids for g in plain]
    assert len({len(g.completion_ids) for g in packed}) > 2, "rows end at different steps"


@pytest.mark.parametrize("kind", ARCHITECTURES)
def test_the_fixed_batch_decode_step_a_cuda_graph_replays_is_model_generate_greedy(kind):
    """The step CUDA graphs replay (``static_decode_step``: the cache column a device tensor, finished rows kept in
    the batch) decodes, eagerly on this CPU, the tokens of transformers' greedy decode."""
    model = _model(kind).eval()
    flat = _prompts(seed=4)
    graphed = TransformersBackend(model, ConfigTokenizer(), device=HOST)
    graphed.graphs = DecodeGraphs(capture=False, fused=False)  # on a CPU: the fixed-batch state, eagerly
    assert isinstance(graphed.decode_state(flat, 8), GraphedDecode)
    first = graphed.generate(flat, max_new_tokens=16, greedy=True)
    frequent = Counter(t for g in first for t in g.completion_ids[2:]).most_common(3)
    model.generation_config.eos_token_id = [1] + [t for t, _ in frequent]  # rows finish early and keep their slots
    graphed = TransformersBackend(model, ConfigTokenizer(), device=HOST)
    graphed.graphs = DecodeGraphs(capture=False, fused=False)
    out = graphed.generate(flat, max_new_tokens=16, greedy=True)
    set_forward(model, "transformers")
    plain = TransformersBackend(model, ConfigTokenizer(), shared_prefill=False, device=HOST).generate(
        flat, max_new_tokens=16, greedy=True
    )
    assert [g.completion_ids for g in out] == [g.completion_ids for g in plain]
    assert len({len(g.completion_ids) for g in out}) > 2, "rows end at different steps"


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_packed_generation_samples_and_log_probs_are_the_cached_forwards(kind):
    """Same seed, same draws and the same log-probs as the sampling loop on transformers' forward."""
    model = _model(kind).eval()
    flat = _prompts(seed=2)
    runs = []
    for forward in ("auto", "transformers"):
        set_forward(model, forward)
        torch.manual_seed(3)
        runs.append(
            TransformersBackend(model, ConfigTokenizer(), device=HOST).generate(
                flat, max_new_tokens=12, temperature=0.9
            )
        )
    assert [g.completion_ids for g in runs[0]] == [g.completion_ids for g in runs[1]]
    for a, b in zip(*runs):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=1e-5)


def test_the_tiny_default_takes_the_packed_forward():
    assert Decoder.of(build_tiny_policy()[0]) is not None


def test_other_architectures_and_the_transformers_setting_keep_transformers_forward():
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=72, n_embd=32, n_layer=1, n_head=2, n_positions=64))
    assert Decoder.of(gpt2) is None
    llama = _model("llama")
    set_forward(llama, "transformers")
    assert Decoder.of(llama) is None
    batch = _batch()
    logp, _ = sequence_logprobs(gpt2, batch)  # an unsupported model still scores, on its own forward
    assert logp.shape == batch.loss_mask.shape


def test_auto_and_packed_take_the_packed_forward_wherever_the_model_is():
    """The packed forward runs on the CPU and on CUDA alike (issue #34: ``auto`` kept it off GPUs): where the
    weights are (here the meta device) does not decide which forward is taken; only ``transformers`` does."""
    model = _model("llama").to("meta")
    for mode in ("auto", "packed"):
        set_forward(model, mode)
        assert Decoder.of(model) is not None
    set_forward(model, "transformers")
    assert Decoder.of(model) is None
    with pytest.raises(ValueError, match="one of auto, packed, transformers"):
        set_forward(model, "fast")


def test_a_sliding_window_shorter_than_the_sequence_keeps_transformers_forward():
    model = _model("mistral")
    model.config.sliding_window = 8
    dec = Decoder.of(model)
    assert dec.fits(8) and not dec.fits(9)
    batch = _batch()  # sequences up to 32 tokens: the window applies, so transformers computes them
    set_forward(model, "auto")
    auto = sequence_logprobs(model, batch)[0]
    set_forward(model, "transformers")
    torch.testing.assert_close(auto, sequence_logprobs(model, batch)[0])


@pytest.mark.skipif(
    not (torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()),
    reason="this CPU's oneDNN has no bf16",
)
def test_prepacked_bf16_weights_compute_the_bf16_matmul():
    """The fused, reordered q/k/v weights give torch's bf16 ``linear`` of each projection (bias included)."""
    model = _model("qwen2")
    dec = Decoder.of(model)
    packed = PackedLinears(dec, rows=4)
    attn = dec.layers[0].self_attn
    x = torch.randn(4, 32)
    for got, module in zip(packed.qkv(attn, x), (attn.q_proj, attn.k_proj, attn.v_proj)):
        want = torch.nn.functional.linear(x.bfloat16(), module.weight.bfloat16(), module.bias.bfloat16())
        torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)
    head = packed(dec.head, x)
    torch.testing.assert_close(
        head.float(), (x.bfloat16() @ dec.head.weight.bfloat16().T).float(), atol=5e-2, rtol=2e-2
    )
