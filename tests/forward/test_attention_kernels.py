"""Attention of the packed forward on CUDA (``forward/attention_kernels.py``), checked on the CPU where its kernels
run there: FlexAttention's forward (unfused on a CPU) and the SDPA fallback compute what the eager formula computes,
block by block and through a whole forward; and the forward reads no device value on the host in any layer."""

from __future__ import annotations

import random

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import LlamaConfig, LlamaForCausalLM

import polyrl.forward.attention_kernels as kernels
import polyrl.forward.decoder as decoder
from polyrl.forward import collate, sequence_logprobs
from polyrl.forward.decoder import attention, causal_block, pack

SHAPE = dict(
    vocab_size=72,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    pad_token_id=0,
)


def _batch(seed: int = 5):
    rnd = random.Random(seed)
    prompts = [[rnd.randrange(3, 72) for _ in range(rnd.randint(2, 20))] for _ in range(4)]
    return collate(
        [(p, [rnd.randrange(3, 72) for _ in range(rnd.randint(1, 12))]) for p in prompts for _ in range(3)], 0
    )


def _blocks():
    batch = _batch()
    return pack(batch, share_prompts=True).blocks


@pytest.mark.parametrize("which", [0, 1], ids=["prompts", "continuations"])
@pytest.mark.parametrize("path", ["flex", "sdpa"])
def test_the_device_kernels_compute_the_eager_formula_on_a_block(which, path, monkeypatch):
    block = _blocks()[which]
    s, lq = block.queries.shape
    lk = block.keys.shape[1]
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(s, lq, 4, 8, generator=gen)
    k, v = torch.randn(s, lk, 2, 8, generator=gen), torch.randn(s, lk, 2, 8, generator=gen)
    if path == "sdpa":
        monkeypatch.setattr(kernels, "FALLBACKS", ["(forced)"])
    eager = attention(q, k, v, block.allowed, 0.35)
    with torch.no_grad():
        out = kernels.device_attention(q, k, v, block.allowed, 0.35)
    valid = block.query_valid
    torch.testing.assert_close(out[valid], eager[valid], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("path", ["flex", "sdpa"])
def test_a_forward_on_the_device_kernels_gives_the_eager_formulas_log_probs(path, monkeypatch):
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SHAPE)).eval()
    batch = _batch(seed=7)
    with torch.no_grad():
        eager, _ = sequence_logprobs(model, batch, 1.0)
        monkeypatch.setattr(decoder, "device_kernels", lambda x: True)
        if path == "sdpa":
            monkeypatch.setattr(kernels, "FALLBACKS", ["(forced)"])
        fused, _ = sequence_logprobs(model, batch, 1.0)
    torch.testing.assert_close(fused * batch.loss_mask, eager * batch.loss_mask, atol=1e-5, rtol=1e-5)


class _Syncs(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.nonzero = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.nonzero += func is torch.ops.aten.nonzero.default
        if func is torch.ops.aten.index.Tensor and any(
            i is not None and i.dtype == torch.bool for i in args[1]
        ):  # a boolean mask: a hidden nonzero
            self.nonzero += 1
        return func(*args, **(kwargs or {}))


def test_the_packed_forward_reads_the_layout_once_not_in_every_layer():
    """A host sync per block per forward (where its real queries are), none per layer (issue #42: the boolean mask
    in every layer synced ~60 times a forward)."""
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SHAPE)).eval()
    batch = _batch()
    with torch.no_grad(), _Syncs() as syncs:
        sequence_logprobs(model, batch, 1.0)
    blocks = len(pack(batch, share_prompts=True).blocks)
    assert syncs.nonzero <= blocks + 1 < SHAPE["num_hidden_layers"] * blocks  # + the final scatter's


def test_flex_attentions_block_mask_skips_wholly_masked_tiles():
    block = causal_block([0, 300], [300, 20])
    mask = kernels.block_mask(block.allowed)
    assert mask.sparsity() > 0  # the causal upper triangle of the long sequence, and the short one's padding
