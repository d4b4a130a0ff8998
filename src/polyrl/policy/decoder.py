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
sampled tokens against transformers' own forward). The architectures it knows are in
:data:`SUPPORTED_MODEL_TYPES`; any other model, a sharded one (FSDP) or ``model.forward: transformers`` keeps
transformers' forward.

Attention is the eager formula of transformers (``softmax(q kᵀ · scale + mask)`` in float32, then ``· v``) on
the gathered blocks; rotary embeddings are Su et al. 2021 ("RoFormer", eq. 34) in the rotate-half form that
Llama checkpoints use.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")
"""Decoders whose layers are ``input_layernorm → self_attn (q/k/v/o_proj, rotary) → post_attention_layernorm →
mlp (gate/up/down_proj)`` with residuals around both, and no other transformation (SmolLM2 is a Llama)."""

_ATTRIBUTE = "polyrl_forward"


def set_forward(model: nn.Module, mode: str) -> None:
    """Which forward polyrl takes of ``model``: ``auto`` (this one where the architecture is supported) or
    ``transformers`` (always the model's own)."""
    setattr(model, _ATTRIBUTE, mode)


class Linears:
    """How the decoder's linear layers are applied: here each module itself (so LoRA layers, autocast and
    gradients work as in transformers); :class:`PackedLinears` swaps in prepacked weights for generation."""

    def __call__(self, module: nn.Module, x: Tensor) -> Tensor:
        return module(x)

    def qkv(self, attn: nn.Module, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return attn.q_proj(h), attn.k_proj(h), attn.v_proj(h)

    def gate_up(self, mlp: nn.Module, h: Tensor) -> tuple[Tensor, Tensor]:
        return mlp.gate_proj(h), mlp.up_proj(h)


MODULES = Linears()


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


EAGER_ATTENTION_MAX_SCORES = 2**24
"""Largest attention block (rows × heads × queries × keys) computed with the eager formula, whose score matrix
(kept for the backward) costs 4 bytes an entry: 64 MiB. Above it :func:`attention` calls torch's
``scaled_dot_product_attention`` (a memory-efficient kernel that keeps no scores, slower for short sequences on
CPU: its backward took 15% of a SmolLM2 update's forward+backward at ≈ 150 tokens, the eager formula's 5%)."""


def attention(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, scale: float) -> Tensor:
    """Attention of ``q [S, Lq, H, D]`` over ``k, v [S, Lk, KV, D]`` (grouped-query: each KV head serves ``H / KV``
    query heads) where ``allowed [S, Lq, Lk]`` (every query must see at least one key); ``[S, Lq, H, D]``.
    transformers' eager formula — the scores and the softmax in float32 when the inputs are, the softmax cast
    back to the values' dtype — up to :data:`EAGER_ATTENTION_MAX_SCORES`, torch's fused kernel above."""
    s, lq, heads, d = q.shape
    kv_heads = k.shape[2]
    if s * heads * lq * k.shape[1] > EAGER_ATTENTION_MAX_SCORES:
        out = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            attn_mask=allowed.unsqueeze(1),
            scale=scale,
            enable_gqa=heads != kv_heads,
        )
        return out.transpose(1, 2)
    group = heads // kv_heads
    # query head h reads KV head h // group: the group's queries are one matrix against their KV head's keys
    qg = q.view(s, lq, kv_heads, group, d).permute(0, 2, 3, 1, 4).reshape(s, kv_heads, group * lq, d)
    scores = torch.matmul(qg, k.permute(0, 2, 3, 1)) * scale  # [S, KV, group * Lq, Lk]
    scores = scores.view(s, kv_heads, group, lq, -1).masked_fill(
        ~allowed[:, None, None], torch.finfo(scores.dtype).min
    )
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype).view(s, kv_heads, group * lq, -1)
    out = torch.matmul(probs, v.transpose(1, 2))  # [S, KV, group * Lq, D]
    return out.view(s, kv_heads, group, lq, d).permute(0, 3, 1, 2, 4).reshape(s, lq, heads, d)


def packed_hidden(
    dec: Decoder,
    ids: Tensor,
    positions: Tensor,
    blocks: list[AttentionBlock],
    linears: Linears = MODULES,
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
            x = checkpoint(_layer, dec, layer, x, cos, sin, blocks, order, linears, None, use_reentrant=False)
        else:
            x = _layer(dec, layer, x, cos, sin, blocks, order, linears, keep_kv)
    return dec.trunk.norm(x)


def _gather(x: Tensor, index: Tensor) -> Tensor:
    """``x[index]`` as an ``index_select`` (its backward is an ``index_add``, faster on CPU than the
    accumulating ``index_put`` of advanced indexing)."""
    return x.index_select(0, index.reshape(-1)).view(*index.shape, *x.shape[1:])


def _qkv(dec: Decoder, layer, x: Tensor, cos: Tensor, sin: Tensor, linears: Linears):
    """The layer's queries ``[T, H, D]``, keys and values ``[T, KV, D]`` of ``x [T, hidden]`` (rotary applied)."""
    q, k, v = linears.qkv(layer.self_attn, layer.input_layernorm(x))
    n = x.shape[0]
    q = rotate(q.view(n, dec.heads, dec.head_dim), cos, sin)
    k = rotate(k.view(n, dec.kv_heads, dec.head_dim), cos, sin)
    return q, k, v.view(n, dec.kv_heads, dec.head_dim)


def _finish(layer, x: Tensor, attended: Tensor, linears: Linears) -> Tensor:
    """The rest of a decoder layer after attention: output projection and residual, then the MLP and residual."""
    x = x + linears(layer.self_attn.o_proj, attended)
    mlp = layer.mlp
    gate, up = linears.gate_up(mlp, layer.post_attention_layernorm(x))
    return x + linears(mlp.down_proj, mlp.act_fn(gate) * up)


def _layer(dec: Decoder, layer, x, cos, sin, blocks, order: Tensor, linears: Linears, keep_kv) -> Tensor:
    q, k, v = _qkv(dec, layer, x, cos, sin, linears)
    if keep_kv is not None:
        keep_kv.append((k, v))
    scale = layer.self_attn.scaling
    outs = [
        attention(_gather(q, b.queries), _gather(k, b.keys), _gather(v, b.keys), b.allowed, scale)[b.query_valid]
        for b in blocks
    ]
    out = _gather(torch.cat(outs) if len(outs) > 1 else outs[0], order)
    return _finish(layer, x, out.reshape(x.shape[0], -1), linears)


# ---------------------------------------------------------------------------------------------------------
# Generation: prepacked bf16 weights and a static KV cache


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
    def available(dec: Decoder) -> bool:
        """oneDNN with bf16 on this CPU, and the model on the CPU."""
        mkldnn = getattr(torch.ops, "mkldnn", None)
        return (
            dec.head.weight.device.type == "cpu"
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
        if type(module) is nn.Linear:
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
            self.keys[i, :, :, :p] = _gather(k, prompt_index).transpose(1, 2)
            self.values[i, :, :, :p] = _gather(v, prompt_index).transpose(1, 2)
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
    col = cache.filled
    cache.allowed[:, col] = True
    x = dec.trunk.embed_tokens(ids)
    cos, sin = dec.rotary(positions, x)
    n, group = ids.shape[0], dec.heads // dec.kv_heads
    hidden = torch.finfo(torch.float32).min
    blocked = ~cache.allowed.view(n, 1, 1, -1)
    for i, layer in enumerate(dec.layers):
        q, k, v = _qkv(dec, layer, x, cos, sin, linears)
        keys, values = cache.keys[i], cache.values[i]  # [N, KV, width, D]
        keys[:, :, col] = k
        values[:, :, col] = v
        qg = q.view(n, dec.kv_heads, group, dec.head_dim).to(keys.dtype)
        scores = torch.matmul(qg, keys.transpose(-1, -2)) * layer.self_attn.scaling  # [N, KV, group, width]
        probs = torch.softmax(scores.float().masked_fill_(blocked, hidden), dim=-1).to(values.dtype)
        x = _finish(layer, x, torch.matmul(probs, values).reshape(n, -1), linears)
    cache.filled = col + 1
    return dec.trunk.norm(x)


class PackedDecode:
    """Sampling state of one generation chunk on the packed forward: the distinct prompts prefilled once as
    packed tokens, their keys and values copied into a :class:`StaticCache` row per completion, then one
    :func:`decode_step` per token. ``first_logits``, ``step(tokens)`` and ``select(rows)`` are what
    ``TransformersBackend``'s sampling loop calls."""

    def __init__(self, dec: Decoder, unique: list, source: list[int], new_tokens: int, linears: Linears, dtype):
        device = dec.head.weight.device
        self.dec, self.linears = dec, linears
        lengths = torch.tensor([len(u) for u in unique], device=device)
        starts = torch.cumsum(lengths, 0) - lengths
        ids = torch.tensor([t for u in unique for t in u], device=device)
        positions = torch.cat([torch.arange(int(n), device=device) for n in lengths])
        kv: list = []
        block = causal_block(starts.tolist(), lengths.tolist(), device)
        hidden = packed_hidden(dec, ids, positions, [block], linears, keep_kv=kv)
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
