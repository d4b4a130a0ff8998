"""The decode step with fewer kernels, for CUDA: what a captured graph replays.

A decode step of a small model is launch-bound: on a GPU each kernel costs 2-4 µs even inside a CUDA graph, and
the step of ``policy/packed_decode.py`` (the model's own modules, one call each) is about 40 kernels per layer —
1,219 for a 30-layer Llama at 256 rows (issue #42). This step computes the same function in about half as many
(``benchmarks/decode_kernels.py`` counts them on the CPU with a dispatch mode):

- each layer's q/k/v projections are one matmul, gate/up another (:class:`FusedWeights`: their weights copied into
  one matrix, in the dtype the step computes in, so that autocast casts no weight inside the step either);
- RMSNorm is torch's fused ``rms_norm`` (transformers' module is seven kernels);
- the rotary tables are looked up (``index_select``) instead of recomputed, and queries and keys are rotated in one
  pass (``x·cos + roll(x)·sin±``, the rotate-half form with the sign folded into the table);
- the attention scores, their scale and the mask are one ``baddbmm`` over a bias made once per step, and the
  softmax runs in the cache's dtype (CUDA's bf16 softmax accumulates in float32: one kernel, not a float32 softmax
  and a cast).

The numbers are the modules' up to float rounding (fused kernels sum in another order), so the CPU keeps the
modules' step, and its numbers, bit for bit; this one runs on CUDA (``policy/decode_graphs.py``), and on the CPU in
the tests that check it against the modules' step (``tests/policy/test_decode_graphs.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from polyrl.forward.decoder import Decoder
from polyrl.policy.packed_decode import write_column

DYNAMIC_ROPE = ("dynamic", "longrope")
"""Rotary types whose frequencies change with the sequence length (transformers' ``dynamic_rope_update``): their
tables cannot be made once, and their update reads a length on the host, which a graph cannot hold."""


def fusable(dec: Decoder) -> bool:
    """Whether every projection is a plain ``nn.Linear`` (not a LoRA layer: its adapters are called as they are)."""
    layers = [(layer.self_attn, layer.mlp) for layer in dec.layers]
    modules = [dec.head] + [
        m for attn, mlp in layers for m in (*_qkv(attn), attn.o_proj, *_gate_up(mlp), mlp.down_proj)
    ]
    return all(type(m) is nn.Linear for m in modules)


def _qkv(attn) -> tuple[nn.Linear, nn.Linear, nn.Linear]:
    return attn.q_proj, attn.k_proj, attn.v_proj


def _gate_up(mlp) -> tuple[nn.Linear, nn.Linear]:
    return mlp.gate_proj, mlp.up_proj


class FusedWeights:
    """The decoder's linear weights as the fused step reads them: per layer q/k/v as one ``[(H + 2·KV)·D, hidden]``
    matrix and gate/up as one, and, where ``dtype`` is not the weights' (autocast), every other projection's weight
    cast too. They are copies: :meth:`refresh` copies the modules' current weights into them in place (every
    ``generate`` call: the optimizer has changed them), so a graph captured on them stays valid. What it holds: the
    q/k/v and gate/up weights (about two thirds of a model's) in ``dtype``, and the rest when ``dtype`` differs."""

    def __init__(self, dec: Decoder, dtype: torch.dtype):
        self.dec, self.dtype = dec, dtype
        self.qkv: list[tuple[Tensor, Tensor | None]] = []
        self.gate_up: list[tuple[Tensor, Tensor | None]] = []
        self.other: dict[nn.Linear, tuple[Tensor, Tensor | None]] = {}
        for layer in dec.layers:
            self.qkv.append(self._joined(_qkv(layer.self_attn)))
            self.gate_up.append(self._joined(_gate_up(layer.mlp)))
            for module in (layer.self_attn.o_proj, layer.mlp.down_proj):
                self._cast(module)
        self._cast(dec.head)
        self.refresh()

    def _joined(self, modules) -> tuple[Tensor, Tensor | None]:
        rows = sum(m.out_features for m in modules)
        weight = modules[0].weight.new_empty((rows, modules[0].in_features), dtype=self.dtype)
        bias = None
        if any(m.bias is not None for m in modules):
            bias = modules[0].weight.new_zeros(rows, dtype=self.dtype)
        return weight, bias

    def _cast(self, module: nn.Linear) -> None:
        if module.weight.dtype != self.dtype:
            bias = None if module.bias is None else module.bias.new_empty(module.bias.shape, dtype=self.dtype)
            self.other[module] = (module.weight.new_empty(module.weight.shape, dtype=self.dtype), bias)

    @torch.no_grad()
    def refresh(self) -> None:
        """Copy the modules' weights in (in place: what a captured graph reads stays where it was)."""
        for layer, qkv, gate_up in zip(self.dec.layers, self.qkv, self.gate_up):
            for (weight, bias), modules in ((qkv, _qkv(layer.self_attn)), (gate_up, _gate_up(layer.mlp))):
                at = 0
                for m in modules:
                    weight[at : at + m.out_features].copy_(m.weight)
                    if bias is not None and m.bias is not None:
                        bias[at : at + m.out_features].copy_(m.bias)
                    at += m.out_features
        for module, (weight, bias) in self.other.items():
            weight.copy_(module.weight)
            if bias is not None:
                bias.copy_(module.bias)

    def linear(self, module: nn.Linear, x: Tensor) -> Tensor:
        weight, bias = self.other.get(module, (module.weight, module.bias))
        return F.linear(x, weight, bias)


class RotaryTables:
    """``cos`` and ``sin`` of every position below ``width`` for the decoder's rotary embedding (its own module:
    its scaling), ``sin`` with the rotate-half sign folded in: ``rotate_half(x)·sin = roll(x, D/2)·sin±``."""

    def __init__(self, dec: Decoder, width: int, like: Tensor):
        cos, sin = dec.rotary(torch.arange(width, device=like.device), like)
        half = cos.shape[-1] // 2
        self.cos = cos
        self.sin = torch.cat([-sin[:, :half], sin[:, half:]], dim=-1)

    @staticmethod
    def apply(dec: Decoder) -> bool:
        rope = getattr(dec.trunk.rotary_emb, "rope_type", "default")
        return not any(kind in str(rope) for kind in DYNAMIC_ROPE)

    def at(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """``cos, sin±`` ``[N, 1, D]`` at ``positions [N]`` (looked up once a step, read by every layer)."""
        return self.cos.index_select(0, positions).unsqueeze(1), self.sin.index_select(0, positions).unsqueeze(1)

    @staticmethod
    def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """``x [N, heads, D]`` rotated by ``cos, sin±`` of :meth:`at`."""
        return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, dims=-1), sin)


def rms_norm(norm: nn.Module, x: Tensor) -> Tensor:
    """transformers' RMSNorm (Llama, Qwen2, Mistral: ``weight · x / sqrt(mean(x²) + eps)``) as one fused kernel."""
    return F.rms_norm(x, (x.shape[-1],), norm.weight, norm.variance_epsilon)


def fused_decode_step(
    dec: Decoder,
    cache,
    ids: Tensor,
    positions: Tensor,
    col: Tensor,
    weights: FusedWeights,
    tables: RotaryTables,
) -> Tensor:
    """:func:`~polyrl.policy.packed_decode.static_decode_step` with fused kernels: the last hidden states
    ``[N, hidden]`` of one token per row, written into ``cache`` at column ``col`` (a device tensor: no host value
    read, every shape fixed)."""
    n, kv, d = ids.shape[0], dec.kv_heads, dec.head_dim
    group = dec.heads // kv
    cache.allowed.index_fill_(1, col, True)
    x = dec.trunk.embed_tokens(ids)
    cos, sin = tables.at(positions)
    compute = cache.keys.dtype
    # the mask as an additive bias, made once for every layer: [N·KV, group, width]
    bias = torch.zeros(cache.allowed.shape, dtype=compute, device=ids.device)
    bias.masked_fill_(~cache.allowed, torch.finfo(compute).min)
    bias = bias[:, None, None, :].expand(n, kv, group, -1).reshape(n * kv, group, -1)
    for i, layer in enumerate(dec.layers):
        attn = layer.self_attn
        out = F.linear(rms_norm(layer.input_layernorm, x), *weights.qkv[i])
        rotated = tables.rotate(out[:, : (dec.heads + kv) * d].view(n, dec.heads + kv, d), cos, sin)
        keys, values = cache.keys[i], cache.values[i]  # [N, KV, width, D]
        write_column(keys, col, rotated[:, dec.heads :])
        write_column(values, col, out[:, (dec.heads + kv) * d :].view(n, kv, d))
        q = rotated[:, : dec.heads].to(compute).reshape(n * kv, group, d)  # one copy: the cast, or the reshape
        scores = torch.baddbmm(bias, q, keys.reshape(n * kv, -1, d).transpose(1, 2), alpha=attn.scaling)
        probs = torch.softmax(scores, dim=-1)  # in bf16 CUDA's softmax sums in float32 and rounds once
        attended = torch.bmm(probs, values.reshape(n * kv, -1, d)).reshape(n, -1)
        x = x + weights.linear(attn.o_proj, attended)
        gate, up = F.linear(rms_norm(layer.post_attention_layernorm, x), *weights.gate_up[i]).chunk(2, dim=-1)
        x = x + weights.linear(layer.mlp.down_proj, layer.mlp.act_fn(gate) * up)
    return rms_norm(dec.trunk.norm, x)
