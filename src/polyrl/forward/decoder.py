"""polyrl's own forward of Llama-family decoders, over the model's own modules: packed tokens, gathered attention.

transformers' forward takes a padded ``[rows, width]`` batch: every linear layer of every decoder layer runs on
the padding too, and rows that share a prompt (the G completions of a group) either recompute it or go through a
KV cache copied out to every row. This forward takes the tokens *packed* — one flat ``[T]`` sequence of real
tokens, each with its own position — so the linear layers, norms and MLPs (nearly all of the FLOPs) run on real
tokens only, and attention gathers, per block of query rows, the keys each row may see: a group's responses read
their shared prompt's keys directly, without a copy per row. :func:`pack` lays a padded ``TokenBatch`` out that way
(each distinct prompt once, then every row's continuation); generation (``policy/packed_decode.py``) packs its prompts
itself and decodes on the same layers.

It calls the model's own modules (``q_proj`` … ``down_proj``, the norms, the rotary embedding, ``lm_head``), so
the parameters, their gradients, PEFT's LoRA layers and ``torch.autocast`` work as in transformers' forward, and
the numbers are that forward's up to float rounding (``tests/forward/test_decoder.py``: logits, gradients and
sampled tokens against transformers' own forward). The architectures it knows are in
:data:`SUPPORTED_MODEL_TYPES`; any other model, a sharded one (FSDP) or ``model.forward: transformers`` keeps
transformers' forward.

Attention is the eager formula of transformers (``softmax(q kᵀ · scale + mask)`` in float32, then ``· v``) on
the gathered blocks; rotary embeddings are Su et al. 2021 ("RoFormer", eq. 34) in the rotate-half form that
Llama checkpoints use.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from polyrl.forward.batch import distinct

IMAGE_MODEL_TYPE = "polyrl_tiny_vlm"
"""The embedded tiny vision-language model (``policy/tiny_vision.py``): a Llama whose ``vision`` module turns pictures
into the embeddings of the prompt's image placeholder tokens; it takes pictures on this forward only."""
SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral", IMAGE_MODEL_TYPE)
"""Decoders whose layers are ``input_layernorm → self_attn (q/k/v/o_proj, rotary) → post_attention_layernorm →
mlp (gate/up/down_proj)`` with residuals around both, and no other transformation (SmolLM2 is a Llama)."""

_ATTRIBUTE = "polyrl_forward"
PICTURES_ATTRIBUTE = "polyrl_pictures"


FORWARD_MODES = ("auto", "packed", "transformers")


def set_forward(model: nn.Module, mode: str) -> None:
    """Which forward polyrl takes of ``model``: ``packed`` or ``auto`` (this one wherever the architecture is
    supported, on the CPU and on CUDA alike) or ``transformers`` (always the model's own)."""
    if mode not in FORWARD_MODES:
        raise ValueError(f"model forward must be one of {', '.join(FORWARD_MODES)}, got {mode!r}")
    setattr(model, _ATTRIBUTE, mode)


def picture_forward_of(model):
    """The picture forward (``forward/pictures.py``) a Hugging Face vision-language model was given when it loaded
    (PEFT-wrapped too): such a model takes its pictures on its own forward, never on this one. None for any other
    model."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(base, PICTURES_ATTRIBUTE, None)


class Linears:
    """How the decoder's linear layers are applied: here each module itself (so LoRA layers, autocast and
    gradients work as in transformers); ``polyrl.policy.packed_decode.PackedLinears`` swaps in prepacked weights for generation."""

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
    vision: nn.Module | None = None
    """A vision-language model's picture encoder: ``uint8 [images, S, S, 3]`` to ``[images, K, hidden]``, the
    embeddings of each picture's ``K`` placeholder tokens (None: the model takes text only)."""
    image_token_id: int | None = None
    """The placeholder token whose embeddings :attr:`vision` replaces."""

    @classmethod
    def of(cls, model) -> Decoder | None:
        """The decoder of ``model`` (PEFT-wrapped too), or None when polyrl's forward does not apply: an
        architecture not in :data:`SUPPORTED_MODEL_TYPES`, ``model.forward: transformers``, attention dropout in
        training, or parameters sharded by FSDP."""
        mode = getattr(model, _ATTRIBUTE, "auto")
        if mode == "transformers":
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
        if config.model_type == IMAGE_MODEL_TYPE:
            return cls(trunk, head, heads, kv, head_dim, window, base.vision, config.image_token_id)
        return cls(trunk, head, heads, kv, head_dim, window)

    @property
    def layers(self) -> nn.ModuleList:
        return self.trunk.layers

    def embed(self, ids: Tensor, images: Tensor | None = None) -> Tensor:
        """Input embeddings ``[T, hidden]`` of ``ids [T]``; with ``images [n, S, S, 3]``, the ``n · K`` image
        placeholder tokens of ``ids`` (in order) take the pictures' embeddings instead. A placeholder without its
        picture, or a picture without its placeholders, is a ValueError: never a prompt that silently lost it."""
        x = self.trunk.embed_tokens(ids)
        if self.vision is None:
            if images is not None:
                raise ValueError("pictures given to a model that takes text only")
            return x
        where = (ids == self.image_token_id).nonzero().squeeze(1)
        if images is None:
            if len(where):
                raise ValueError(f"{len(where)} image placeholder tokens without their pictures")
            return x
        pictures = self.vision(images)
        if pictures.shape[0] * pictures.shape[1] != len(where):
            raise ValueError(
                f"{len(where)} image placeholder tokens for {pictures.shape[0]} pictures of {pictures.shape[1]} each"
            )
        return x.index_put((where,), pictures.reshape(-1, x.shape[-1]).to(x.dtype))

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
    kernel_mask: object = field(default=None, init=False, repr=False, compare=False)
    """On CUDA, FlexAttention's block mask of ``allowed`` (``forward/attention_kernels.py``), made at the first layer
    and read by every other."""


def causal_block(starts: list[int], lengths: list[int], device=None) -> AttentionBlock:
    """A block of independent causal sequences: sequence ``s`` is packed tokens ``starts[s] .. + lengths[s]``."""
    cols = torch.arange(max(lengths), device=device)
    start = torch.tensor(starts, device=device).unsqueeze(1)
    valid = cols < torch.tensor(lengths, device=device).unsqueeze(1)
    index = torch.where(valid, start + cols, start)
    allowed = (cols.unsqueeze(1) >= cols.unsqueeze(0)).unsqueeze(0) & valid.unsqueeze(1)
    return AttentionBlock(index, index, allowed, valid)


# ---------------------------------------------------------------------------------------------------------
# The packed layout of a padded batch: each distinct prompt once, then every row's continuation
#
# Two attention blocks cover it: the prompts, each causal over itself, and the continuations, each reading its own
# prompt's tokens and, causally, its own continuation. The hidden state that predicts token ``t + 1`` of a row is
# the prompt's last one for the first continuation token and the previous continuation token's after that, so the
# prompt's forward (and its backward) is done once per group, and no row computes a padded position in any linear
# layer (multi-turn continuations hold the environment's tokens between turns too).


@dataclass
class PackedBatch:
    """Packed tokens, their attention blocks, and where each scored position goes in the padded layout."""

    ids: Tensor
    """``[T]`` token ids: distinct prompts, then each row's continuation."""
    positions: Tensor
    """``[T]`` position of each token in its row."""
    blocks: list[AttentionBlock]
    predictors: Tensor
    """``[M]`` packed index of the hidden state that predicts each scored token."""
    targets: Tensor
    """``[M]`` the scored tokens."""
    rows: Tensor
    """``[M]`` row of each scored token in the padded batch."""
    cols: Tensor
    """``[M]`` column of its score in the ``[N, width - 1]`` output (the position that predicts it)."""
    images: Tensor | None = None
    """``[n, S, S, 3]`` the pictures of the packed tokens' image placeholders, in their order (None: text only)."""


def pack(batch, device=None, *, share_prompts: bool) -> PackedBatch:
    """The packed layout of ``batch`` (a ``TokenBatch``), its tensors made on ``device``. Rows split into prompt
    and continuation at ``batch.prompt_lengths`` (rows with equal prompts share one, unless ``share_prompts`` is
    off); without prompt lengths every row's first token is its prompt, so every later token is scored. The
    layout is planned from the host batch (:meth:`~polyrl.forward.batch.TokenBatch.on_host`)."""
    batch = batch.on_host()
    if batch.images is not None and batch.prompt_lengths is None:
        raise ValueError("a batch with pictures needs its prompt lengths (collate's): they order the pictures")
    lengths = batch.attention_mask.sum(1).tolist()
    if min(lengths) < 1:
        raise ValueError("a TokenBatch row without tokens cannot be packed")
    ids = batch.input_ids.tolist()
    prompt_lengths = batch.prompt_lengths.tolist() if batch.prompt_lengths is not None else [1] * len(ids)
    # a row's first token is always context: nothing predicts it
    prompt_lengths = [min(max(p, 1), n) for p, n in zip(prompt_lengths, lengths)]
    prompts = [row[:p] for row, p in zip(ids, prompt_lengths)]
    keys = [rows[1] if rows is not None else None for rows in batch.images] if batch.images is not None else None
    unique, source = distinct(prompts, keys) if share_prompts else (prompts, list(range(len(prompts))))
    p_len = [len(u) for u in unique]
    p_start = _starts(p_len, 0)
    r_len = [n - p for n, p in zip(lengths, prompt_lengths)]
    r_start = _starts(r_len, sum(p_len))
    flat = [t for u in unique for t in u] + [t for row, p, n in zip(ids, prompt_lengths, lengths) for t in row[p:n]]
    positions = [j for n in p_len for j in range(n)] + [p + j for p, r in zip(prompt_lengths, r_len) for j in range(r)]
    blocks = [causal_block(p_start, p_len, device)]
    if any(r_len):
        blocks.append(_continuation_block(p_start, p_len, source, r_start, r_len, device))
    predictors, targets, rows, cols = [], [], [], []
    for i, (p, r) in enumerate(zip(prompt_lengths, r_len)):
        u = source[i]
        predictors += [p_start[u] + p_len[u] - 1] + [r_start[i] + j for j in range(r - 1)] if r else []
        targets += ids[i][p : p + r]
        rows += [i] * r
        cols += range(p - 1, p - 1 + r)
    as_tensor = lambda values: torch.tensor(values, dtype=torch.long, device=device)
    return PackedBatch(
        as_tensor(flat),
        as_tensor(positions),
        blocks,
        *(as_tensor(v) for v in (predictors, targets, rows, cols)),
        _packed_images(batch.images, source, len(unique), device),
    )


def _packed_images(images: list | None, source: list[int], count: int, device) -> Tensor | None:
    """The pictures of the packed tokens on ``device``, in packed order: each distinct prompt's once, then each
    row's continuation's (an episode's observations)."""
    if images is None:
        return None
    first = {}
    for row, u in enumerate(source):
        first.setdefault(u, row)
    shown = [images[first[u]] for u in range(count)]
    parts = [row[0] for row in shown if row is not None and row[0] is not None]
    parts += [row[2] for row in images if row is not None and row[2] is not None]
    return torch.cat(parts).to(device) if parts else None


def _starts(lengths: list[int], offset: int) -> list[int]:
    out, at = [], offset
    for n in lengths:
        out.append(at)
        at += n
    return out


def _continuation_block(p_start, p_len, source, r_start, r_len, device) -> AttentionBlock:
    """Each row's continuation tokens as queries over ``[its prompt, padded to the longest | its continuation]``."""
    width_p, width_r = max(p_len), max(r_len)
    src = torch.tensor(source, device=device)
    prompt_start, prompt_len = torch.tensor(p_start, device=device)[src], torch.tensor(p_len, device=device)[src]
    start, length = torch.tensor(r_start, device=device), torch.tensor(r_len, device=device)
    pc, rc = torch.arange(width_p, device=device), torch.arange(width_r, device=device)
    prompt_ok = pc < prompt_len.unsqueeze(1)
    resp_ok = rc < length.unsqueeze(1)
    prompt_keys = torch.where(prompt_ok, prompt_start.unsqueeze(1) + pc, prompt_start.unsqueeze(1))
    queries = torch.where(resp_ok, start.unsqueeze(1) + rc, prompt_start.unsqueeze(1))
    causal = rc.unsqueeze(1) >= rc.unsqueeze(0)  # [Lq, Lr]
    # a padding query sees its prompt too (never no key at all); its output is dropped
    allowed = torch.cat(
        [prompt_ok.unsqueeze(1).expand(-1, width_r, -1), causal.unsqueeze(0) & resp_ok.unsqueeze(1)], dim=2
    )
    return AttentionBlock(queries, torch.cat([prompt_keys, queries], 1), allowed, resp_ok)


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
    images: Tensor | None = None,
) -> Tensor:
    """Final hidden states ``[T, hidden]`` (after the last norm) of the packed tokens ``ids [T]`` at
    ``positions [T]``; every token is a query of exactly one block. With ``keep_kv``, each layer's keys and
    values ``[T, KV, D]`` (after the rotary embedding) are appended to it, for a KV cache. ``images``: the
    pictures of the tokens' image placeholders (:meth:`Decoder.embed`)."""
    x = dec.embed(ids, images)
    cos, sin = dec.rotary(positions, x)
    # where each block's real queries are among its [S·Lq] rows: found once here (a host sync on CUDA), not in every
    # layer by a boolean mask (issue #42: one sync per layer and block)
    valid = [b.query_valid.reshape(-1).nonzero().squeeze(1) for b in blocks]
    # the blocks' real queries, concatenated, are a permutation of the tokens: its inverse puts them back
    order = torch.argsort(torch.cat([b.queries.reshape(-1).index_select(0, i) for b, i in zip(blocks, valid)]))
    for layer in dec.layers:
        if dec.checkpointing():
            x = checkpoint(_layer, dec, layer, x, cos, sin, blocks, valid, order, linears, None, use_reentrant=False)
        else:
            x = _layer(dec, layer, x, cos, sin, blocks, valid, order, linears, keep_kv)
    return dec.trunk.norm(x)


def gather(x: Tensor, index: Tensor) -> Tensor:
    """``x[index]`` as an ``index_select`` (its backward is an ``index_add``, faster on CPU than the
    accumulating ``index_put`` of advanced indexing)."""
    return x.index_select(0, index.reshape(-1)).view(*index.shape, *x.shape[1:])


def layer_qkv(dec: Decoder, layer, x: Tensor, cos: Tensor, sin: Tensor, linears: Linears):
    """A decoder layer's queries ``[T, H, D]``, keys and values ``[T, KV, D]`` of ``x [T, hidden]`` (its input norm,
    projections and rotary embedding)."""
    q, k, v = linears.qkv(layer.self_attn, layer.input_layernorm(x))
    n = x.shape[0]
    q = rotate(q.view(n, dec.heads, dec.head_dim), cos, sin)
    k = rotate(k.view(n, dec.kv_heads, dec.head_dim), cos, sin)
    return q, k, v.view(n, dec.kv_heads, dec.head_dim)


def layer_rest(layer, x: Tensor, attended: Tensor, linears: Linears) -> Tensor:
    """The rest of a decoder layer once attention has read ``attended [T, H·D]``: the output projection and its
    residual, then the MLP and its residual."""
    x = x + linears(layer.self_attn.o_proj, attended)
    mlp = layer.mlp
    gate, up = linears.gate_up(mlp, layer.post_attention_layernorm(x))
    return x + linears(mlp.down_proj, mlp.act_fn(gate) * up)


def device_kernels(x: Tensor) -> bool:
    """Whether attention takes the CUDA kernels of ``forward/attention_kernels.py`` (the CPU keeps the eager
    formula, and its numbers)."""
    return x.is_cuda


def _attend(q: Tensor, k: Tensor, v: Tensor, block: AttentionBlock, scale: float) -> Tensor:
    if not device_kernels(q):
        return attention(q, k, v, block.allowed, scale)
    from polyrl.forward.attention_kernels import block_mask, device_attention

    if block.kernel_mask is None:
        block.kernel_mask = block_mask(block.allowed)
    return device_attention(q, k, v, block.allowed, scale, block.kernel_mask)


def _layer(dec: Decoder, layer, x, cos, sin, blocks, valid, order: Tensor, linears: Linears, keep_kv) -> Tensor:
    q, k, v = layer_qkv(dec, layer, x, cos, sin, linears)
    if keep_kv is not None:
        keep_kv.append((k, v))
    scale = layer.self_attn.scaling
    outs = []
    for b, rows in zip(blocks, valid):
        out = _attend(gather(q, b.queries), gather(k, b.keys), gather(v, b.keys), b, scale)
        outs.append(out.reshape(-1, *out.shape[2:]).index_select(0, rows))
    out = gather(torch.cat(outs) if len(outs) > 1 else outs[0], order)
    return layer_rest(layer, x, out.reshape(x.shape[0], -1), linears)
