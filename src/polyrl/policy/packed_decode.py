"""Generation on polyrl's packed forward (``forward/decoder.py``): prompts prefilled packed, a static KV cache, one
decode step per token, on a CPU with bf16 matmuls every weight reordered once per ``generate`` call, and on CUDA
each decode step replayed as one CUDA graph.

``TransformersBackend`` (``policy/generation.py``) drives the sampling loop; :class:`PackedDecode` is its state
for a chunk of prompts on a supported decoder: ``first_logits``, ``step(tokens)``, ``select(rows)``;
:class:`GraphedDecode` the same state with a fixed batch, whose step is a CUDA graph.

Why graphs: a decode step of a small model is hundreds of small kernels (a 30-layer model: ~20 per layer), each
microseconds of work behind microseconds of launch overhead, so an eager step is bound by the CPU launching them
(~26 ms per step for SmolLM2-135M's shape on an H200, where the weights and cache it reads take well under 1 ms).
A graph launches the whole step at once. It needs fixed shapes and no host values inside the step: the cache
column is a device tensor written with ``index_copy_``, and finished rows keep their slots (their tokens are
discarded) instead of leaving the batch.
"""

from __future__ import annotations

import warnings

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
        layers, rows, p = len(dec.layers), prompt_index.shape[0], prompt_index.shape[1]
        shape = (layers, rows, dec.kv_heads, p + new_tokens, dec.head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=prompt_index.device)
        self.values = torch.zeros_like(self.keys)
        for i, (k, v) in enumerate(prompt_kv):  # [T, KV, D] packed -> [rows, KV, P, D]
            self.keys[i, :, :, :p] = gather(k, prompt_index).transpose(1, 2)
            self.values[i, :, :, :p] = gather(v, prompt_index).transpose(1, 2)
        self.allowed = torch.zeros(rows, p + new_tokens, dtype=torch.bool, device=prompt_index.device)
        self.allowed[:, :p] = prompt_valid
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
        keys.index_copy_(2, col, k.unsqueeze(2).to(keys.dtype))
        values.index_copy_(2, col, v.unsqueeze(2).to(values.dtype))
        qg = q.view(n, dec.kv_heads, group, dec.head_dim).to(keys.dtype)
        scores = torch.matmul(qg, keys.transpose(-1, -2)) * layer.self_attn.scaling  # [N, KV, group, width]
        probs = torch.softmax(scores.float().masked_fill_(blocked, hidden), dim=-1).to(values.dtype)
        x = layer_rest(layer, x, torch.matmul(probs, values).reshape(n, -1), linears)
    return dec.trunk.norm(x)


class PackedDecode:
    """Sampling state of one generation chunk on the packed forward: the distinct prompts prefilled once as
    packed tokens, their keys and values copied into a :class:`StaticCache` row per completion, then one
    :func:`decode_step` per token. ``first_logits``, ``step(tokens)`` and ``select(rows)`` are what
    ``TransformersBackend``'s sampling loop calls."""

    def __init__(
        self, dec: Decoder, unique: list, source: list[int], new_tokens: int, linears: Linears, dtype, device
    ):
        self.dec, self.linears = dec, linears
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
        self.first_logits = linears(dec.head, hidden[(starts + lengths - 1)[src]])
        width = int(lengths.max())
        cols = torch.arange(width, device=device)
        pad = (width - lengths[src]).unsqueeze(1)  # each row's prompt right-aligned
        valid = cols >= pad
        index = torch.where(valid, starts[src].unsqueeze(1) + cols - pad, starts[src].unsqueeze(1))
        self.cache = StaticCache(dec, kv, index, valid, new_tokens, dtype)
        self.positions = lengths[src].clone()

    def step(self, tokens: Tensor) -> Tensor:
        """Logits ``[N, V]`` of the next token after ``tokens [N]``."""
        hidden = decode_step(self.dec, self.cache, tokens, self.positions, self.linears)
        self.positions = self.positions + 1
        return self.linears(self.dec.head, hidden)

    def select(self, rows: Tensor) -> None:
        self.cache.select(rows)
        self.positions = self.positions[rows]


GRAPH_WARMUP_STEPS = 2
"""Eager runs of the step on a side stream before capture (cuBLAS picks its kernels and workspaces there)."""


class GraphedDecode:
    """A :class:`PackedDecode` whose batch stays fixed (finished rows keep their slots; ``fixed_rows``) and whose
    step is :func:`static_decode_step`, replayed as one CUDA graph when ``capture`` (on CUDA). Without ``capture``
    (or where capture fails, with one warning) the same step runs eagerly: the CPU tests check its tokens against
    transformers' greedy decode.

    The graph reads the step's tokens from a static buffer and writes the logits to another, so :meth:`step` copies
    the tokens in, replays, and returns that buffer (valid until the next step)."""

    fixed_rows = True

    def __init__(self, state: PackedDecode, capture: bool):
        self.dec, self.linears, self.cache = state.dec, state.linears, state.cache
        self.first_logits = state.first_logits
        device = state.positions.device
        self.tokens = torch.zeros_like(state.positions)
        self.positions = state.positions.clone()
        self.col = torch.tensor([state.cache.filled], device=device)
        self.capture = capture
        self.graph = None
        self.logits: Tensor | None = None

    def _run(self) -> Tensor:
        hidden = static_decode_step(self.dec, self.cache, self.tokens, self.positions, self.col, self.linears)
        self.positions.add_(1)
        self.col.add_(1)
        return self.linears(self.dec.head, hidden)

    def _capture(self) -> None:
        """Warm up on a side stream, put the state back as it was, capture one step."""
        saved = (self.positions.clone(), self.col.clone(), self.cache.allowed.clone())
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(GRAPH_WARMUP_STEPS):
                self._run()
                self.positions.copy_(saved[0])
                self.col.copy_(saved[1])
        torch.cuda.current_stream().wait_stream(side)
        self.cache.allowed.copy_(saved[2])  # the keys written at the column are rewritten by the real step
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.logits = self._run()
        self.positions.copy_(saved[0])
        self.col.copy_(saved[1])
        self.graph = graph

    def step(self, tokens: Tensor) -> Tensor:
        """Logits ``[N, V]`` of the next token after ``tokens [N]`` (one per row, finished rows included)."""
        self.tokens.copy_(tokens)
        if self.capture and self.graph is None:
            try:
                self._capture()
            except RuntimeError as exc:  # an op the graph cannot hold: the same step, eagerly
                warnings.warn(f"CUDA graph capture of the decode step failed ({exc}); decoding eagerly", stacklevel=2)
                self.capture = False
        if self.graph is not None:
            self.graph.replay()
            return self.logits
        return self._run()

    def select(self, rows: Tensor) -> None:
        raise RuntimeError("a GraphedDecode keeps its rows (fixed_rows): the sampling loop never drops them")
