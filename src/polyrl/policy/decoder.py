"""polyrl's own forward of Llama-family decoders, over the model's own modules: packed tokens, gathered attention.

transformers' forward takes a padded ``[rows, width]`` batch: every linear layer of every decoder layer runs on
the padding too, and rows that share a prompt (the G completions of a group) either recompute it or go through a
KV cache copied out to every row. This forward takes the tokens *packed* — one flat ``[T]`` sequence of real
tokens, each with its own position — so the linear layers, norms and MLPs (nearly all of the FLOPs) run on real
tokens only, and attention gathers, per block of query rows, the keys each row may see: a group's responses read
their shared prompt's keys directly, without a copy per row.

It calls the model's own modules (``q_proj`` … ``down_proj``, the norms, the rotary embedding, ``lm_head``), so
the parameters, their gradients, PEFT's LoRA layers and ``torch.autocast`` work as in transformers' forward, and
the numbers are that forward's up to float rounding (``tests/policy/test_decoder.py``: logits, gradients and
sampled tokens against transformers' eager attention). The architectures it knows are in
:data:`SUPPORTED_MODEL_TYPES`; any other model, a sharded one (FSDP) or ``model.forward: transformers`` keeps
transformers' forward.

Attention is the eager formula of transformers (``softmax(q kᵀ · scale + mask)`` in float32, then ``· v``) on
the gathered blocks; rotary embeddings are Su et al. 2021 ("RoFormer", eq. 34) in the rotate-half form that
Llama checkpoints use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")
"""Decoders whose layers are ``input_layernorm → self_attn (q/k/v/o_proj, rotary) → post_attention_layernorm →
mlp (gate/up/down_proj)`` with residuals around both, and no other transformation (SmolLM2 is a Llama)."""

_ATTRIBUTE = "polyrl_forward"

Linear = Callable[[nn.Module, Tensor], Tensor]
"""How a linear layer is applied: ``linear(module, x)``; by default the module itself."""


def set_forward(model: nn.Module, mode: str) -> None:
    """Which forward polyrl takes of ``model``: ``auto`` (this one where the architecture is supported) or
    ``transformers`` (always the model's own)."""
    setattr(model, _ATTRIBUTE, mode)


def call(module: nn.Module, x: Tensor) -> Tensor:
    return module(x)


@dataclass(frozen=True)
class Decoder:
    """The parts of a supported causal LM that the packed forward calls."""

    trunk: nn.Module
    """The decoder stack (``model.model``): ``embed_tokens``, ``layers``, ``norm``, ``rotary_emb``."""
    head: nn.Module
    """``lm_head``."""
    heads: int
    kv_heads: int
    head_dim: int
    sliding_window: int | None
    """Attention span of the layers, when the config limits it (the forward then refuses longer sequences)."""

    @classmethod
    def of(cls, model) -> Decoder | None:
        """The decoder of ``model`` (PEFT-wrapped too), or None when polyrl's forward does not apply: an
        architecture not in :data:`SUPPORTED_MODEL_TYPES`, ``model.forward: transformers``, attention dropout
        in training, or parameters sharded by FSDP."""
        if getattr(model, _ATTRIBUTE, "auto") != "auto":
            return None
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        config = getattr(base, "config", None)
        if getattr(config, "model_type", None) not in SUPPORTED_MODEL_TYPES:
            return None
        trunk, head = getattr(base, "model", None), getattr(base, "lm_head", None)
        if not all(hasattr(trunk, name) for name in ("embed_tokens", "layers", "norm", "rotary_emb")) or head is None:
            return None
        if getattr(config, "attention_dropout", 0.0) and base.training:
            return None
        if _sharded(base):
            return None
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        window = getattr(config, "sliding_window", None)
        if getattr(config, "use_sliding_window", True) is False:  # Qwen2 keeps a window it does not use
            window = None
        kv = getattr(config, "num_key_value_heads", None) or heads
        return cls(trunk, head, heads, kv, head_dim, window)

    @property
    def layers(self) -> nn.ModuleList:
        return self.trunk.layers

    def rotary(self, positions: Tensor, like: Tensor) -> tuple[Tensor, Tensor]:
        """``cos, sin`` ``[T, head_dim]`` of ``positions [T]`` (the model's own rotary module: its scaling)."""
        cos, sin = self.trunk.rotary_emb(like, positions.unsqueeze(0))
        return cos[0], sin[0]

    def fits(self, length: int) -> bool:
        """Whether sequences of ``length`` tokens stay within the attention span (no sliding window applies)."""
        return self.sliding_window is None or length <= self.sliding_window

    def checkpointing(self) -> bool:
        """Whether transformers' activation checkpointing is on for this model (the packed forward then
        recomputes each layer in the backward too)."""
        return bool(getattr(self.trunk, "gradient_checkpointing", False)) and torch.is_grad_enabled()


def _sharded(model: nn.Module) -> bool:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        return False
    return any(isinstance(m, FSDPModule) for m in model.modules())


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding of ``x [T, heads, D]`` with ``cos, sin [T, D]`` (rotate-half form)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)


@dataclass
class AttentionBlock:
    """Query rows and the keys each may attend to, as indices into the packed tokens.

    Row ``s`` of the block holds queries ``queries[s]`` and keys ``keys[s]`` (padded to the block's widths with
    any valid index); ``allowed[s, i, j]`` says whether query ``i`` sees key ``j`` (causality and padding)."""

    queries: Tensor
    """``[S, Lq]`` packed index of each query (padding: any index, ``query_valid`` False)."""
    keys: Tensor
    """``[S, Lk]`` packed index of each key."""
    allowed: Tensor
    """``[S, Lq, Lk]`` bool."""
    query_valid: Tensor
    """``[S, Lq]`` bool: real queries (their outputs are kept)."""


def causal_block(starts: list[int], lengths: list[int], device=None) -> AttentionBlock:
    """A block of independent causal sequences: sequence ``s`` is packed tokens ``starts[s] .. + lengths[s]``."""
    cols = torch.arange(max(lengths), device=device)
    start = torch.tensor(starts, device=device).unsqueeze(1)
    valid = cols < torch.tensor(lengths, device=device).unsqueeze(1)
    index = torch.where(valid, start + cols, start)
    allowed = (cols.unsqueeze(1) >= cols.unsqueeze(0)).unsqueeze(0) & valid.unsqueeze(1)
    return AttentionBlock(index, index, allowed, valid)


def attention(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, scale: float) -> Tensor:
    """Eager attention of ``q [S, Lq, H, D]`` over ``k, v [S, Lk, KV, D]`` (grouped-query: each KV head serves
    ``H / KV`` query heads) where ``allowed [S, Lq, Lk]``; ``[S, Lq, H, D]``. transformers' eager formula: the
    scores and the softmax in float32 when the inputs are, the softmax cast back to the values' dtype."""
    s, lq, heads, d = q.shape
    kv_heads = k.shape[2]
    group = heads // kv_heads
    # query head h reads KV head h // group: the group's queries are one matrix against their KV head's keys
    qg = q.view(s, lq, kv_heads, group, d).permute(0, 2, 3, 1, 4).reshape(s, kv_heads, group * lq, d)
    scores = torch.matmul(qg, k.permute(0, 2, 3, 1)) * scale  # [S, KV, group * Lq, Lk]
    scores = scores.view(s, kv_heads, group, lq, -1).masked_fill(~allowed[:, None, None], torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype).view(s, kv_heads, group * lq, -1)
    out = torch.matmul(probs, v.transpose(1, 2))  # [S, KV, group * Lq, D]
    return out.view(s, kv_heads, group, lq, d).permute(0, 3, 1, 2, 4).reshape(s, lq, heads, d)


def packed_hidden(
    dec: Decoder,
    ids: Tensor,
    positions: Tensor,
    blocks: list[AttentionBlock],
    linear: Linear = call,
    keep_kv: list | None = None,
) -> Tensor:
    """Final hidden states ``[T, hidden]`` (after the last norm) of the packed tokens ``ids [T]`` at
    ``positions [T]``; every token is a query of exactly one block. With ``keep_kv``, each layer's keys and
    values ``[T, KV, D]`` (after the rotary embedding) are appended to it, for a KV cache."""
    x = dec.trunk.embed_tokens(ids)
    cos, sin = dec.rotary(positions, x)
    # the blocks' real queries, concatenated, are a permutation of the tokens: its inverse puts them back
    order = torch.argsort(torch.cat([b.queries[b.query_valid] for b in blocks]))
    for layer in dec.layers:
        if dec.checkpointing():
            x = checkpoint(_layer, dec, layer, x, cos, sin, blocks, order, linear, None, use_reentrant=False)
        else:
            x = _layer(dec, layer, x, cos, sin, blocks, order, linear, keep_kv)
    return dec.trunk.norm(x)


def _gather(x: Tensor, index: Tensor) -> Tensor:
    """``x[index]`` as an ``index_select`` (its backward is an ``index_add``, faster on CPU than the
    accumulating ``index_put`` of advanced indexing)."""
    return x.index_select(0, index.reshape(-1)).view(*index.shape, *x.shape[1:])


def _layer(dec: Decoder, layer, x, cos, sin, blocks, order: Tensor, linear: Linear, keep_kv) -> Tensor:
    attn, mlp = layer.self_attn, layer.mlp
    h = layer.input_layernorm(x)
    n = x.shape[0]
    q = rotate(linear(attn.q_proj, h).view(n, dec.heads, dec.head_dim), cos, sin)
    k = rotate(linear(attn.k_proj, h).view(n, dec.kv_heads, dec.head_dim), cos, sin)
    v = linear(attn.v_proj, h).view(n, dec.kv_heads, dec.head_dim)
    if keep_kv is not None:
        keep_kv.append((k, v))
    outs = [
        attention(_gather(q, b.queries), _gather(k, b.keys), _gather(v, b.keys), b.allowed, attn.scaling)[
            b.query_valid
        ]
        for b in blocks
    ]
    out = _gather(torch.cat(outs) if len(outs) > 1 else outs[0], order)
    x = x + linear(attn.o_proj, out.reshape(n, -1))
    h = layer.post_attention_layernorm(x)
    return x + linear(mlp.down_proj, mlp.act_fn(linear(mlp.gate_proj, h)) * linear(mlp.up_proj, h))


# ---------------------------------------------------------------------------------------------------------
# Generation: prepacked bf16 weights and a static KV cache


class PackedLinears:
    """Each plain ``nn.Linear`` of the decoder as a bf16 weight reordered once into oneDNN's blocked layout (what
    ``torch.compile``'s CPU freezing does): a bf16 matmul with few rows — a decode step's — then skips the
    per-call reorder of the weight. Built per ``generate`` call (the weights change after every update); layers
    that are not plain ``nn.Linear`` (LoRA) are called as they are. Only on a CPU whose oneDNN runs bf16."""

    def __init__(self, dec: Decoder, rows: int):
        self.weights: dict[nn.Module, tuple[Tensor, Tensor | None]] = {}
        reorder = torch.ops.mkldnn._reorder_linear_weight
        for module in _linear_modules(dec):
            if type(module) is nn.Linear:
                bias = module.bias.detach().to(torch.bfloat16) if module.bias is not None else None
                self.weights[module] = (reorder(module.weight.detach().to(torch.bfloat16), rows), bias)

    @staticmethod
    def available(dec: Decoder) -> bool:
        """oneDNN with bf16 on this CPU, and the model on the CPU."""
        mkldnn = getattr(torch.ops, "mkldnn", None)
        return (
            dec.head.weight.device.type == "cpu"
            and torch.backends.mkldnn.is_available()
            and hasattr(mkldnn, "_reorder_linear_weight")
            and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        )

    def __call__(self, module: nn.Module, x: Tensor) -> Tensor:
        packed = self.weights.get(module)
        if packed is None:
            return module(x)
        weight, bias = packed
        return torch.ops.mkldnn._linear_pointwise(x.to(torch.bfloat16), weight, bias, "none", [], "")


def _linear_modules(dec: Decoder):
    for layer in dec.layers:
        attn, mlp = layer.self_attn, layer.mlp
        yield from (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)
    yield dec.head


class StaticCache:
    """Keys and values of ``rows`` sequences in preallocated ``[layers, rows, KV, width, D]`` buffers: prompts
    right-aligned at ``[prompt_width - len, prompt_width)``, decode step ``t`` written at column
    ``prompt_width + t`` for every row (no concatenation per step)."""

    def __init__(self, dec: Decoder, prompt_kv: list, prompt_index: Tensor, prompt_valid: Tensor, new_tokens: int, dtype):
        layers, rows, width = len(dec.layers), prompt_index.shape[0], prompt_index.shape[1] + new_tokens
        shape = (layers, rows, dec.kv_heads, width, dec.head_dim)
        self.keys = prompt_valid.new_zeros(shape, dtype=dtype, device=prompt_index.device)
        self.values = torch.zeros_like(self.keys)
        p = prompt_index.shape[1]
        for i, (k, v) in enumerate(prompt_kv):  # [T, KV, D] packed -> [rows, KV, P, D]
            self.keys[i, :, :, :p] = k[prompt_index].transpose(1, 2).to(dtype)
            self.values[i, :, :, :p] = v[prompt_index].transpose(1, 2).to(dtype)
        self.allowed = torch.zeros(rows, width, dtype=torch.bool, device=prompt_index.device)
        self.allowed[:, :p] = prompt_valid
        self.filled = p

    def select(self, rows: Tensor) -> None:
        """Keep only ``rows`` (finished sequences leave the batch)."""
        self.keys, self.values = self.keys[:, rows], self.values[:, rows]
        self.allowed = self.allowed[rows]


def decode_step(dec: Decoder, cache: StaticCache, ids: Tensor, positions: Tensor, linear: Linear) -> Tensor:
    """One token per row (``ids, positions [N]``) through the decoder against ``cache`` (written at its next
    column); the last hidden states ``[N, hidden]``."""
    col = cache.filled
    cache.allowed[:, col] = True
    x = dec.trunk.embed_tokens(ids)
    cos, sin = dec.rotary(positions, x)
    n, group = ids.shape[0], dec.heads // dec.kv_heads
    allowed = cache.allowed[:, : col + 1].view(n, 1, 1, col + 1)
    for i, layer in enumerate(dec.layers):
        attn, mlp = layer.self_attn, layer.mlp
        h = layer.input_layernorm(x)
        q = rotate(linear(attn.q_proj, h).view(n, dec.heads, dec.head_dim), cos, sin)
        k = rotate(linear(attn.k_proj, h).view(n, dec.kv_heads, dec.head_dim), cos, sin)
        cache.keys[i, :, :, col] = k.to(cache.keys.dtype)
        cache.values[i, :, :, col] = linear(attn.v_proj, h).view(n, dec.kv_heads, dec.head_dim).to(cache.values.dtype)
        keys, values = cache.keys[i, :, :, : col + 1], cache.values[i, :, :, : col + 1]
        qg = q.view(n, dec.kv_heads, group, dec.head_dim).to(keys.dtype)
        scores = torch.matmul(qg, keys.transpose(-1, -2)) * attn.scaling  # [N, KV, group, cols]
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(values.dtype)
        out = torch.matmul(probs, values).reshape(n, -1)
        x = x + linear(attn.o_proj, out)
        h = layer.post_attention_layernorm(x)
        x = x + linear(mlp.down_proj, mlp.act_fn(linear(mlp.gate_proj, h)) * linear(mlp.up_proj, h))
    cache.filled = col + 1
    return dec.trunk.norm(x)


class PackedDecode:
    """Sampling state of one generation chunk on the packed forward: the distinct prompts prefilled once as
    packed tokens, their keys and values copied into a :class:`StaticCache` row per completion, then one
    :func:`decode_step` per token. ``first_logits``, ``step(tokens)`` and ``select(rows)`` are what
    ``TransformersBackend``'s sampling loop calls."""

    def __init__(self, dec: Decoder, unique: list, source: list[int], new_tokens: int, linear: Linear, dtype):
        device = dec.head.weight.device
        self.dec, self.linear = dec, linear
        lengths = torch.tensor([len(u) for u in unique], device=device)
        starts = torch.cumsum(lengths, 0) - lengths
        ids = torch.tensor([t for u in unique for t in u], device=device)
        positions = torch.cat([torch.arange(int(n), device=device) for n in lengths])
        kv: list = []
        block = causal_block(starts.tolist(), lengths.tolist(), device)
        hidden = packed_hidden(dec, ids, positions, [block], linear, keep_kv=kv)
        src = torch.tensor(source, device=device)
        self.first_logits = linear(dec.head, hidden[(starts + lengths - 1)[src]])
        width = int(lengths.max())
        cols = torch.arange(width, device=device)
        pad = (width - lengths[src]).unsqueeze(1)  # each row's prompt right-aligned
        valid = cols >= pad
        index = torch.where(valid, starts[src].unsqueeze(1) + cols - pad, starts[src].unsqueeze(1))
        self.cache = StaticCache(dec, kv, index, valid, new_tokens, dtype)
        self.positions = lengths[src].clone()

    def step(self, tokens: Tensor) -> Tensor:
        """Logits ``[N, V]`` of the next token after ``tokens [N]``."""
        hidden = decode_step(self.dec, self.cache, tokens, self.positions, self.linear)
        self.positions = self.positions + 1
        return self.linear(self.dec.head, hidden)

    def select(self, rows: Tensor) -> None:
        self.cache.select(rows)
        self.positions = self.positions[rows]
