"""Generation on polyrl's packed forward (``forward/decoder.py``): prompts prefilled packed, a static KV cache, one
decode step per token, on a CPU with bf16 matmuls every weight reordered once per ``generate`` call, and on CUDA
each decode step replayed as one CUDA graph (``policy/decode_graphs.py``).

``TransformersBackend`` (``policy/generation.py``) drives the sampling loop; :class:`PackedDecode` is its state
for a chunk of prompts on a supported decoder: ``first_logits``, ``step(tokens)``, ``select(rows)``;
:class:`GraphedDecode` the same state with a fixed batch, whose steps run in buffers that ``DecodeGraphs`` keeps
across calls and replays as CUDA graphs.

Why graphs: a decode step of a small model is hundreds of small kernels (a 30-layer model: ~40 per layer), each
microseconds of work behind microseconds of launch overhead, so an eager step is bound by the CPU launching them
(~26 ms per step for SmolLM2-135M's shape on an H200, where the weights and cache it reads take well under 1 ms).
A graph launches the whole step at once. It needs fixed shapes and no host values inside the step: the cache
column is a device tensor written with ``index_copy_``, and finished rows keep their slots (their tokens are
discarded) instead of leaving the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from polyrl.forward.batch import ImageIds
from polyrl.forward.decoder import Decoder, Linears, causal_block, gather, layer_qkv, layer_rest, packed_hidden


class PackedLinears(Linears):
    """The decoder's plain ``nn.Linear`` layers as bf16 weights reordered once into oneDNN's blocked layout
    (what ``torch.compile``'s CPU freezing does), with each layer's q/k/v and gate/up projections fused into one
    matmul: a bf16 matmul with few rows — a decode step's — then skips the per-call reorder of its weight and
    two of every seven calls. Built per ``generate`` call (the weights change after every update); layers that
    are not plain ``nn.Linear`` (LoRA) are called as they are. Only on a CPU whose oneDNN runs bf16."""

    def __init__(self, dec: Decoder, rows: int):
        self.rows = rows
        self.weights: dict[nn.Module, tuple[Tensor, Tensor | None]] = {}
        self.fused: dict[nn.Module, tuple[tuple[Tensor, Tensor | None], list[int]]] = {}
        for layer in dec.layers:
            attn, mlp = layer.self_attn, layer.mlp
            self._fuse(attn, (attn.q_proj, attn.k_proj, attn.v_proj))
            self._fuse(mlp, (mlp.gate_proj, mlp.up_proj))
            self._pack(attn.o_proj)
            self._pack(mlp.down_proj)
        self._pack(dec.head)

    @staticmethod
    def available(dec: Decoder, device: torch.device) -> bool:
        """oneDNN with bf16 on this CPU, and the model (on ``device``) on the CPU."""
        mkldnn = getattr(torch.ops, "mkldnn", None)
        return (
            device.type == "cpu"
            and torch.backends.mkldnn.is_available()
            and hasattr(mkldnn, "_reorder_linear_weight")
            and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        )

    def _packed(self, modules) -> tuple[Tensor, Tensor | None]:
        weight = torch.cat([m.weight.detach().to(torch.bfloat16) for m in modules])
        biases = [m.bias for m in modules]
        bias = None
        if any(b is not None for b in biases):
            parts = [
                b.detach() if b is not None else m.weight.new_zeros(m.out_features) for b, m in zip(biases, modules)
            ]
            bias = torch.cat(parts).to(torch.bfloat16)
        return torch.ops.mkldnn._reorder_linear_weight(weight, self.rows), bias

    def _pack(self, module) -> None:
        if type(module) is nn.Linear and not module._forward_hooks:  # a hook (the tiny VLM's head) must run
            self.weights[module] = self._packed([module])

    def _fuse(self, owner, modules) -> None:
        if all(type(m) is nn.Linear for m in modules):
            self.fused[owner] = (self._packed(modules), [m.out_features for m in modules])

    @staticmethod
    def _apply(packed: tuple[Tensor, Tensor | None], x: Tensor) -> Tensor:
        weight, bias = packed
        return torch.ops.mkldnn._linear_pointwise(x.to(torch.bfloat16), weight, bias, "none", [], "")

    def __call__(self, module: nn.Module, x: Tensor) -> Tensor:
        packed = self.weights.get(module)
        return module(x) if packed is None else self._apply(packed, x)

    def qkv(self, attn, h):
        if attn not in self.fused:
            return super().qkv(attn, h)
        packed, sizes = self.fused[attn]
        return self._apply(packed, h).split(sizes, dim=-1)

    def gate_up(self, mlp, h):
        if mlp not in self.fused:
            return super().gate_up(mlp, h)
        packed, sizes = self.fused[mlp]
        return self._apply(packed, h).split(sizes, dim=-1)


class StaticCache:
    """Keys and values of ``rows`` sequences in preallocated ``[layers, rows, KV, width, D]`` buffers: prompts
    right-aligned at ``[prompt_width - len, prompt_width)``, decode step ``t`` written at column
    ``prompt_width + t`` for every row (no concatenation per step). Attention reads each row's whole width
    (contiguous, so the matmuls copy nothing) and ``allowed`` masks what is padding or not yet written."""

    def __init__(
        self, dec: Decoder, prompt_kv: list, prompt_index: Tensor, prompt_valid: Tensor, new_tokens: int, dtype
    ):
        rows, p = prompt_index.shape
        self._allocate(dec, rows, p + new_tokens, dtype, prompt_index.device)
        self.load(prompt_kv, prompt_index, prompt_valid, clear=False)

    @classmethod
    def empty(cls, dec: Decoder, rows: int, width: int, dtype, device) -> StaticCache:
        """A cache of ``rows`` × ``width`` columns to :meth:`load` prompts into, again and again (a CUDA graph
        captured on it reads these buffers)."""
        cache = cls.__new__(cls)
        cache._allocate(dec, rows, width, dtype, device)
        return cache

    def _allocate(self, dec: Decoder, rows: int, width: int, dtype, device) -> None:
        shape = (len(dec.layers), rows, dec.kv_heads, width, dec.head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros_like(self.keys)
        self.allowed = torch.zeros(rows, width, dtype=torch.bool, device=device)
        self.filled = 0

    def load(self, prompt_kv: list, prompt_index: Tensor, prompt_valid: Tensor, clear: bool = True) -> None:
        """The prompts of the first ``len(prompt_index)`` rows (``prompt_kv``: each layer's packed ``[T, KV, D]``
        keys and values, gathered at ``prompt_index [rows, P]``); every other column and row is empty (``clear``:
        a reused buffer, of which nothing of the last chunk stays)."""
        rows, p = prompt_index.shape
        if clear:
            self.keys.zero_()
            self.values.zero_()
            self.allowed.zero_()
        for i, (k, v) in enumerate(prompt_kv):  # [T, KV, D] packed -> [rows, KV, P, D]
            self.keys[i, :rows, :, :p] = gather(k, prompt_index).transpose(1, 2)
            self.values[i, :rows, :, :p] = gather(v, prompt_index).transpose(1, 2)
        self.allowed[:rows, :p] = prompt_valid
        self.allowed[:rows, p:] = False
        self.filled = p

    def select(self, rows: Tensor) -> None:
        """Keep only ``rows`` (finished sequences leave the batch)."""
        self.keys, self.values = self.keys[:, rows], self.values[:, rows]
        self.allowed = self.allowed[rows]


def decode_step(dec: Decoder, cache: StaticCache, ids: Tensor, positions: Tensor, linears: Linears) -> Tensor:
    """One token per row (``ids, positions [N]``) through the decoder against ``cache`` (written at its next
    column); the last hidden states ``[N, hidden]``."""
    col = torch.tensor([cache.filled], device=ids.device)
    hidden = static_decode_step(dec, cache, ids, positions, col, linears)
    cache.filled += 1
    return hidden


def write_column(cache: Tensor, col: Tensor, x: Tensor) -> None:
    """Write ``x [N, KV, D]`` at column ``col`` (a 1-element device tensor) of ``cache [N, KV, width, D]``. One column,
    so no element is written twice and the result cannot depend on an order; yet torch's deterministic mode (the
    ``deterministic: true`` default) sends CUDA's ``index_copy_`` down the sorted ``index_put_`` path, about ten
    kernels for each of a step's two writes per layer (issue #42). On CUDA it is off for the write: the same values,
    one kernel."""
    x = x.unsqueeze(2).to(cache.dtype)
    if not (cache.is_cuda and torch.are_deterministic_algorithms_enabled()):
        cache.index_copy_(2, col, x)
        return
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(False)
    try:
        cache.index_copy_(2, col, x)
    finally:
        torch.use_deterministic_algorithms(True, warn_only=warn_only)


def static_decode_step(
    dec: Decoder, cache: StaticCache, ids: Tensor, positions: Tensor, col: Tensor, linears: Linears
) -> Tensor:
    """:func:`decode_step` with the cache column a 1-element device tensor ``col``: every shape fixed and no host
    value read, so that a CUDA graph can replay it (the caller advances ``col`` and ``positions``)."""
    cache.allowed.index_fill_(1, col, True)
    x = dec.trunk.embed_tokens(ids)
    cos, sin = dec.rotary(positions, x)
    n, group = ids.shape[0], dec.heads // dec.kv_heads
    hidden = torch.finfo(torch.float32).min
    blocked = ~cache.allowed.view(n, 1, 1, -1)
    for i, layer in enumerate(dec.layers):
        q, k, v = layer_qkv(dec, layer, x, cos, sin, linears)
        keys, values = cache.keys[i], cache.values[i]  # [N, KV, width, D]
        write_column(keys, col, k)
        write_column(values, col, v)
        qg = q.view(n, dec.kv_heads, group, dec.head_dim).to(keys.dtype)
        scores = torch.matmul(qg, keys.transpose(-1, -2)) * layer.self_attn.scaling  # [N, KV, group, width]
        probs = torch.softmax(scores.float().masked_fill_(blocked, hidden), dim=-1).to(values.dtype)
        x = layer_rest(layer, x, torch.matmul(probs, values).reshape(n, -1), linears)
    return dec.trunk.norm(x)


@dataclass
class Prompts:
    """The distinct prompts of a chunk prefilled once as packed tokens, laid out for a row per completion."""

    first_logits: Tensor
    """``[N, V]`` logits of each row's first new token."""
    kv: list
    """Each layer's packed keys and values ``[T, KV, D]`` (after the rotary embedding)."""
    index: Tensor
    """``[N, P]`` packed index of each row's prompt token at each column (right-aligned)."""
    valid: Tensor
    """``[N, P]`` bool: the columns that hold a prompt token."""
    lengths: Tensor
    """``[N]`` each row's prompt length: the position of its first new token."""


def prefill_prompts(dec: Decoder, unique: list, source: list[int], linears: Linears, device) -> Prompts:
    """Each distinct prompt of ``unique`` through the decoder once, packed; ``source`` names each row's."""
    lengths = torch.tensor([len(u) for u in unique], device=device)
    starts = torch.cumsum(lengths, 0) - lengths
    ids = torch.tensor([t for u in unique for t in u], device=device)
    positions = torch.cat([torch.arange(int(n), device=device) for n in lengths])
    kv: list = []
    block = causal_block(starts.tolist(), lengths.tolist(), device)
    pictures = [u.pixels for u in unique if isinstance(u, ImageIds)]
    images = torch.cat(pictures).to(device) if pictures else None
    hidden = packed_hidden(dec, ids, positions, [block], linears, keep_kv=kv, images=images)
    src = torch.tensor(source, device=device)
    first_logits = linears(dec.head, hidden[(starts + lengths - 1)[src]])
    width = int(lengths.max())
    cols = torch.arange(width, device=device)
    pad = (width - lengths[src]).unsqueeze(1)  # each row's prompt right-aligned
    valid = cols >= pad
    index = torch.where(valid, starts[src].unsqueeze(1) + cols - pad, starts[src].unsqueeze(1))
    return Prompts(first_logits, kv, index, valid, lengths[src].clone())


class PackedDecode:
    """Sampling state of one generation chunk on the packed forward: the distinct prompts prefilled once
    (:func:`prefill_prompts`), their keys and values copied into a :class:`StaticCache` row per completion, then one
    :func:`decode_step` per token. ``first_logits``, ``step(tokens)`` and ``select(rows)`` are what
    ``TransformersBackend``'s sampling loop calls."""

    def __init__(self, dec: Decoder, prompts: Prompts, new_tokens: int, linears: Linears, dtype):
        self.dec, self.linears = dec, linears
        self.first_logits = prompts.first_logits
        self.cache = StaticCache(dec, prompts.kv, prompts.index, prompts.valid, new_tokens, dtype)
        self.positions = prompts.lengths

    def step(self, tokens: Tensor) -> Tensor:
        """Logits ``[N, V]`` of the next token after ``tokens [N]``."""
        hidden = decode_step(self.dec, self.cache, tokens, self.positions, self.linears)
        self.positions = self.positions + 1
        return self.linears(self.dec.head, hidden)

    def select(self, rows: Tensor) -> None:
        self.cache.select(rows)
        self.positions = self.positions[rows]


class GraphedDecode:
    """Sampling state of one generation chunk whose batch stays fixed (finished rows keep their slots;
    ``fixed_rows``) and whose steps run in buffers a :class:`~polyrl.policy.decode_graphs.DecodeGraphs` keeps across
    calls, padded up to a bucket of rows: on CUDA one graph per bucket, captured once and replayed; without capture
    the same buffers and step, eagerly (the CPU tests check its tokens against transformers' greedy decode)."""

    fixed_rows = True

    def __init__(self, dec: Decoder, prompts: Prompts, new_tokens: int, dtype, graphs):
        self.rows = prompts.index.shape[0]
        self.graphs = graphs
        self.buffers = graphs.load(dec, prompts, new_tokens, dtype)
        self.first_logits = prompts.first_logits

    def step(self, tokens: Tensor) -> Tensor:
        """Logits ``[N, V]`` of the next token after ``tokens [N]`` (one per row, finished rows included)."""
        return self.graphs.step(self.buffers, tokens)[: self.rows]

    def select(self, rows: Tensor) -> None:
        raise RuntimeError("a GraphedDecode keeps its rows (fixed_rows): the sampling loop never drops them")
