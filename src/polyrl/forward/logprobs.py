"""Per-token log-probs (and entropies) of a model on a :class:`~polyrl.forward.batch.TokenBatch`.

Every scoring pass polyrl takes of a model goes through :func:`sequence_logprobs`: the update's forward with
gradients, the frozen old and reference log-probs, the SFT step, the logged log-probs of harness requests and of
the Ray workers' samples. The batch is already on the model's device (moved by its caller, once); what this module
makes, it makes on ``batch.device``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from polyrl.forward.batch import TokenBatch, distinct
from polyrl.forward.decoder import IMAGE_MODEL_TYPE, Decoder, pack, packed_hidden, picture_forward_of
from polyrl.forward.pictures import picture_hidden
from polyrl.forward.precision import forward_precision
from polyrl.forward.prefill import forward_args, prefill
from polyrl.forward.token_scores import entropy_from_logits, scores_from_hidden, split_lm, token_logprobs

DEFAULT_TEMPERATURE = 1.0
"""Sampling temperature wherever none is given: ``rl.temperature``, ``eval.temperature``, an eval suite's, a
library call of ``generate``, and the temperature log-probs are taken at (1: the policy's own distribution)."""
DEFAULT_SHARE_PROMPTS = True
"""``rl.share_prompts``, and what ``TransformersBackend`` and :func:`sequence_logprobs` do when not told: each
distinct prompt runs through the model once per group."""


def sequence_logprobs(
    model,
    batch: TokenBatch,
    temperature: float = DEFAULT_TEMPERATURE,
    entropy: bool = False,
    entropy_grad: bool = False,
    share_prompts: bool = DEFAULT_SHARE_PROMPTS,
):
    """Per-token log-probs ``[N, L-1]`` of each next token (and the entropies if asked; detached unless
    ``entropy_grad``, for an entropy bonus); 0 at padding.

    When rows share prompts (the G completions of a group) and ``share_prompts`` is on, each distinct prompt
    goes through the model once and its KV cache is reused by every row that continues it: the same numbers
    as one forward over the padded batch (up to float rounding), for a fraction of the compute (prompt
    positions are then 0). Full-vocabulary logits are never materialized for the batch: the trunk's hidden
    states go through ``lm_head`` a chunk at a time (:mod:`polyrl.forward.token_scores`). The forward runs
    under the model's autocast setting (:func:`polyrl.forward.precision.forward_precision`) on ``batch.device``,
    where the model's weights are.
    """
    with forward_precision(model, batch.device):
        dec = Decoder.of(model)
        if dec is not None and dec.fits(batch.input_ids.shape[1]) and len(batch):
            return packed_logprobs(dec, batch, temperature, entropy, entropy_grad, share_prompts)
        pictures = picture_forward_of(model)
        if pictures is not None and len(batch):
            return _picture_logprobs(pictures, model, batch, temperature, entropy, entropy_grad)
        if batch.images is not None:
            if not _takes_pictures(model):
                raise ValueError(
                    "prompts with pictures are scored on polyrl's packed forward only (model.forward: auto)"
                )
            return _plain_logprobs(model, batch, temperature, entropy, entropy_grad)  # FSDP's shards
        if share_prompts and batch.prompt_lengths is not None and not _checkpointing(model):
            shared = _shared_prompt_logprobs(model, batch, temperature, entropy, entropy_grad)
            if shared is not None:
                return shared
        return _plain_logprobs(model, batch, temperature, entropy, entropy_grad)


def _plain_logprobs(model, batch: TokenBatch, temperature: float, entropy: bool, entropy_grad: bool):
    """One forward over the padded batch; scores at every real target position."""
    ids, attention = batch.input_ids, batch.attention_mask
    split = split_lm(model)
    if split is None:  # a model whose logits are not lm_head(hidden): its own forward, full logits
        pictures = _reading_order_pictures(batch, ids.device)
        shown = {"images": pictures} if pictures is not None else {}
        logits = model(input_ids=ids, attention_mask=attention, use_cache=False, **shown).logits[:, :-1]
        logp = token_logprobs(logits, ids[:, 1:], temperature=temperature)
        logits = logits if entropy_grad else logits.detach()
        return logp, entropy_from_logits(logits, temperature=temperature) if entropy else None
    hidden = split.backbone(input_ids=ids, attention_mask=attention, use_cache=False).last_hidden_state
    keep = attention[:, 1:].bool()
    logp, ent = scores_from_hidden(
        hidden[:, :-1][keep], ids[:, 1:][keep], split.head, temperature, entropy, entropy_grad=entropy_grad
    )
    return _unflatten(logp, keep), _unflatten(ent, keep) if ent is not None else None


def _picture_logprobs(pictures, model, batch: TokenBatch, temperature: float, entropy: bool, entropy_grad: bool):
    """A vision-language model's own forward over the padded batch with its rows' pictures: scores at every real
    target position, the full-vocabulary logits never materialized for the batch."""
    hidden = picture_hidden(pictures, model, batch)
    ids, keep = batch.input_ids, batch.attention_mask[:, 1:].bool()
    head = (model.get_base_model() if hasattr(model, "get_base_model") else model).get_output_embeddings()
    logp, ent = scores_from_hidden(
        hidden[:, :-1][keep], ids[:, 1:][keep], head, temperature, entropy, entropy_grad=entropy_grad
    )
    return _unflatten(logp, keep), _unflatten(ent, keep) if ent is not None else None


def _takes_pictures(model) -> bool:
    """Whether ``model``'s own forward embeds pictures (the tiny vision-language model's, which FSDP shards take)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(getattr(base, "config", None), "model_type", None) == IMAGE_MODEL_TYPE and split_lm(model) is None


def _reading_order_pictures(batch: TokenBatch, device) -> Tensor | None:
    """The batch's pictures in the order its placeholders are read, row by row: each row's prompt's, then its
    response's (an episode's observations); None when its rows show none."""
    rows = [row for row in batch.images or () if row is not None]
    parts = [p for row in rows for p in (row[0], row[2]) if p is not None]
    return torch.cat(parts).to(device) if parts else None


def _unflatten(values: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Scores of the kept positions back to ``keep``'s shape, 0 elsewhere."""
    return values.new_zeros(keep.shape).masked_scatter(keep, values)


def packed_logprobs(
    dec: Decoder, batch, temperature: float, entropy: bool, entropy_grad: bool, share_prompts: bool
) -> tuple[Tensor, Tensor | None]:
    """``sequence_logprobs`` on the packed forward: ``[N, width - 1]`` log-probs (and entropies) on
    ``batch.device``, 0 at prompt and padding positions."""
    packed = pack(batch, batch.device, share_prompts=share_prompts)
    hidden = packed_hidden(dec, packed.ids, packed.positions, packed.blocks, images=packed.images)
    logp, ent = scores_from_hidden(
        hidden[packed.predictors], packed.targets, dec.head, temperature, entropy, entropy_grad=entropy_grad
    )
    shape = (batch.input_ids.shape[0], batch.input_ids.shape[1] - 1)

    def spread(values: Tensor) -> Tensor:
        return values.new_zeros(shape).index_put((packed.rows, packed.cols), values)

    return spread(logp), spread(ent) if ent is not None else None


def _checkpointing(model) -> bool:
    """Activation checkpointing recomputes layers without a cache, so a backward pass can't reuse a shared
    prompt's KV cache: under checkpointing, forwards that build a graph take the plain path (checkpointing
    wins); no-grad passes (old and reference log-probs) still share prompts."""
    if not torch.is_grad_enabled():
        return False
    model = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # renamed in transformers 5
        if hasattr(type(model), name):
            return bool(getattr(model, name))
    return False


def _shared_prompt_logprobs(model, batch: TokenBatch, temperature: float, entropy: bool, entropy_grad: bool):
    """``sequence_logprobs`` with one forward per distinct prompt, or None when too few rows share one (or
    the model's cache can't be indexed by row, or its logits are not a projection of the trunk)."""
    split = split_lm(model)
    if split is None:
        return None
    host = batch.on_host()
    rows = [row[:n] for row, n in zip(host.input_ids.tolist(), host.prompt_lengths.tolist())]
    unique, source_list = distinct(rows)
    if len(unique) > 0.75 * len(rows):
        return None
    device = batch.device
    pre = prefill(model, unique, source_list, device, last_logits_only=True)
    if pre is None:
        return None
    n_rows, width = batch.input_ids.shape
    source, prompt_mask = pre.source, pre.attention
    # the continuations (responses), right-padded
    lengths_t = batch.prompt_lengths.to(device)
    total = batch.attention_mask.sum(1)
    r_width = int((host.attention_mask.sum(1) - host.prompt_lengths).max())  # from the host copy: no device read
    cols = torch.arange(r_width, device=device)
    gather_cols = (lengths_t.unsqueeze(1) + cols).clamp(max=width - 1)
    resp_mask = (cols < (total - lengths_t).unsqueeze(1)).long()
    resp_ids = batch.input_ids.gather(1, gather_cols) * resp_mask
    # each response's first token is predicted by its prompt's last position (one [N, V] row of logits)
    first_logits = pre.logits[source, -1]
    logp = token_logprobs(first_logits, resp_ids[:, 0], temperature=temperature).unsqueeze(1)
    ent = None
    if entropy:
        ent = entropy_from_logits(first_logits if entropy_grad else first_logits.detach(), temperature=temperature)
        ent = ent.unsqueeze(1)
    if r_width > 1:
        hidden = split.backbone(
            input_ids=resp_ids[:, :-1],
            attention_mask=torch.cat([prompt_mask[source], resp_mask[:, :-1]], 1),
            position_ids=lengths_t.unsqueeze(1) + cols[:-1],
            use_cache=True,
            **{forward_args(split.backbone)["cache"]: pre.cache},
        ).last_hidden_state
        keep = resp_mask[:, 1:].bool()
        rest, rest_ent = scores_from_hidden(
            hidden[keep], resp_ids[:, 1:][keep], split.head, temperature, entropy, entropy_grad=entropy_grad
        )
        logp = torch.cat([logp, _unflatten(rest, keep)], 1)
        ent = torch.cat([ent, _unflatten(rest_ent, keep)], 1) if entropy else None

    def scatter(values: torch.Tensor) -> torch.Tensor:
        """Response positions back to the padded layout: token j of row i is predicted at column len(p_i)-1+j."""
        target = (lengths_t - 1).unsqueeze(1) + cols
        full = values.new_zeros(n_rows, width - 1 + r_width)
        full = full.scatter(1, target, values * resp_mask)
        return full[:, : width - 1]

    return scatter(logp), scatter(ent) if ent is not None else None
