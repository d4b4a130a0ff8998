"""Generation backends behind one interface. The first: batched transformers ``generate``.

A backend turns prompt token ids into completions. The trainer never calls ``model.generate`` itself,
so a different engine (vLLM, a Ray worker pool) can be dropped in by implementing the same protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from polyrl.forward.batch import ImageIds, distinct
from polyrl.forward.decoder import MODULES, Decoder, picture_forward_of
from polyrl.forward.logprobs import DEFAULT_SHARE_PROMPTS, DEFAULT_TEMPERATURE
from polyrl.forward.pictures import PictureDecode
from polyrl.forward.precision import AUTOCAST_DTYPES, autocast_mode, forward_precision
from polyrl.forward.prefill import Prefill, forward_args, left_pad, prefill
from polyrl.policy.decode_graphs import DecodeGraphs
from polyrl.policy.packed_decode import GraphedDecode, PackedDecode, PackedLinears, prefill_prompts

DEFAULT_TOP_P = 1.0
"""Nucleus wherever none is given: ``rl.top_p``, an eval suite's, and a library call of ``generate`` (1: the
whole distribution)."""
GENERATION_BATCH_SIZE = 256
"""``generation.batch_size``, and :class:`TransformersBackend`'s when not told: sequences generated together."""
CUDA_GRAPHS = True
"""``generation.cuda_graphs``, and :class:`TransformersBackend`'s when not told (CUDA only)."""


@dataclass
class Generation:
    """One completion of one prompt."""

    prompt_ids: list[int]
    completion_ids: list[int]
    """Generated tokens, including the final EOS when the model stopped by itself."""
    text: str
    """The completion decoded without special tokens."""
    finished: bool
    """True when the model emitted EOS; False when it hit ``max_new_tokens``."""
    logprobs: list[float] | None = None
    """Log-prob of each completion token under the distribution that sampled it (the softmax at the sampling
    temperature, renormalized over the top-p nucleus), as the engine computed it (its precision); None from
    engines that don't report them."""


class GenerationBackend(Protocol):
    def generate(
        self,
        prompts: Sequence[list[int]],
        *,
        max_new_tokens: int,
        temperature: float = DEFAULT_TEMPERATURE,
        top_p: float = DEFAULT_TOP_P,
        greedy: bool = False,
    ) -> list[Generation]: ...

    def sync_weights(self, model: torch.nn.Module, version: int) -> None:
        """Make the backend generate with ``model``'s current weights (a no-op when it shares them)."""
        ...


def eos_ids(model, tokenizer) -> list[int]:
    ids = model.generation_config.eos_token_id
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


class TransformersBackend:
    """Batched sampling with a transformers causal LM, in chunks of ``batch_size`` sequences.

    Prompts that occur several times in a chunk (the G completions of a group) are prefilled once and their
    keys and values serve each row; rows that have finished are dropped from the batch as decoding goes on.
    Llama-family decoders run on polyrl's packed forward with a static KV cache (``policy/packed_decode.py``),
    other models on their own forward and cache. Sampling (temperature, top-p, greedy) draws from the
    distribution ``model.generate`` draws from (greedy: the same tokens); models whose cache can't be indexed
    by batch row fall back to ``model.generate`` itself (``shared_prefill=False`` forces that).
    """

    def __init__(
        self,
        model,
        tokenizer,
        batch_size: int = GENERATION_BATCH_SIZE,
        shared_prefill: bool = DEFAULT_SHARE_PROMPTS,
        *,
        device: torch.device | str,
        cuda_graphs: bool = CUDA_GRAPHS,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        """Where the model's weights are (its owner put them there); every tensor of a generation is made here."""
        on_cuda = self.device.type == "cuda"
        self.graphs = DecodeGraphs(capture=True, fused=True) if cuda_graphs and on_cuda else None
        """The decode steps' buffers and CUDA graphs, kept across calls (``generation.cuda_graphs``; CUDA only;
        ``policy/decode_graphs.py``). A test may give one on the CPU (with capture off, or the CPU stand-in of
        ``tests/cuda_graph_standin.py``)."""
        self.batch_size = batch_size
        self.shared_prefill = shared_prefill
        self.version = 0
        self._eos = eos_ids(model, tokenizer)

    def sync_weights(self, model, version: int) -> None:
        self.model = model  # same process, same tensors
        self.version = version

    def graph_stats(self) -> dict | None:
        """What the decode graphs did (captures, replays, eager steps, fallbacks); None without graphs."""
        return self.graphs.stats.as_dict() if self.graphs is not None else None

    @property
    def behaviour_logprobs(self) -> bool:
        """Whether rollouts should keep this backend's log-probs as the behaviour log-probs: under autocast,
        whose rounding differs between the cached decode and the trainer's forward (the update then logs the
        mismatch and corrects it with truncated importance sampling); in fp32 they agree to ~1e-6."""
        return autocast_mode(self.model) != "none"

    @torch.no_grad()
    def generate(self, prompts, *, max_new_tokens, temperature=DEFAULT_TEMPERATURE, top_p=DEFAULT_TOP_P, greedy=False):
        out: list[Generation] = []
        was_training = self.model.training
        self.model.eval()
        try:
            # one autocast context for the whole call: its cast cache keeps the bf16 copy of each weight for
            # every decode step instead of casting the weights again per token
            with forward_precision(self.model, self.device):
                for start in range(0, len(prompts), self.batch_size):
                    chunk = prompts[start : start + self.batch_size]
                    out += self._generate_chunk(chunk, max_new_tokens, temperature, top_p, greedy)
        finally:
            self.model.train(was_training)
        return out

    def _generate_chunk(self, chunk, max_new_tokens, temperature, top_p, greedy) -> list[Generation]:
        decoded = None
        # prompts with pictures take the decode that embeds them (packed, or a vision-language model's own), whether
        # or not prompts are shared; a Hugging Face vision-language model always takes its own
        shared = self.shared_prefill or any(isinstance(p, ImageIds) for p in chunk)
        if shared or picture_forward_of(self.model) is not None:
            decoded = self._decode_chunk(chunk, max_new_tokens, temperature, top_p, greedy)
        if decoded is None:
            rows = self._hf_generate_chunk(chunk, max_new_tokens, temperature, top_p, greedy)
            return [self._generation(p, row, None) for p, row in zip(chunk, rows)]
        return [self._generation(p, row, lp) for p, row, lp in zip(chunk, *decoded)]

    def _generation(self, prompt, row: list[int], logprobs: list[float] | None) -> Generation:
        completion, finished = [], False
        for tok in row:
            completion.append(tok)
            if tok in self._eos:
                finished = True
                break
        text = self.tokenizer.decode(completion, skip_special_tokens=True)
        ids = prompt.copy() if isinstance(prompt, ImageIds) else list(prompt)  # its pictures stay with it
        return Generation(ids, completion, text, finished, logprobs[: len(completion)] if logprobs else None)

    def _hf_generate_chunk(self, prompts, max_new_tokens, temperature, top_p, greedy) -> list[list[int]]:
        input_ids, attention = left_pad(prompts, self.tokenizer.pad_token_id)
        device = self.device
        sampling = {} if greedy else {"temperature": temperature, "top_p": top_p, "top_k": 0}
        seqs = self.model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention.to(device),
            max_new_tokens=max_new_tokens,
            do_sample=not greedy,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self._eos,
            **sampling,
        )
        return seqs[:, input_ids.shape[1] :].tolist()

    def _decode_chunk(self, prompts, max_new_tokens, temperature, top_p, greedy):
        """Prefill each distinct prompt once, then sample token by token: ``(tokens, log-probs)`` per prompt,
        or None if the model's cache can't be indexed by row (the caller then uses ``model.generate``)."""
        state = self.decode_state(prompts, max_new_tokens)
        if state is None:
            return None
        logits = state.first_logits
        device = logits.device
        n = len(prompts)
        tokens = torch.full((n, max_new_tokens), self.tokenizer.pad_token_id, dtype=torch.long, device=device)
        logprobs = torch.zeros((n, max_new_tokens), dtype=torch.float32, device=device)
        rows = torch.arange(n, device=device)  # which completion each batch row is, in cache order
        running = torch.ones(n, dtype=torch.bool, device=device)
        eos = torch.tensor(self._eos, device=device)
        fixed = getattr(state, "fixed_rows", False)
        for step in range(max_new_tokens):
            nxt, nxt_logp = sample_tokens(logits, temperature, top_p, greedy)
            if fixed:  # every row in its slot: no boolean index (a host sync on CUDA) to write the step
                tokens[:, step] = torch.where(running, nxt, tokens[:, step])
                logprobs[:, step] = torch.where(running, nxt_logp, logprobs[:, step])
            else:
                tokens[rows[running], step] = nxt[running]
                logprobs[rows[running], step] = nxt_logp[running]
            running &= ~torch.isin(nxt, eos)
            alive = int(running.sum())
            if step == max_new_tokens - 1 or alive == 0:
                break
            if alive <= 0.75 * len(rows) and not fixed:
                # drop finished rows from the batch and the cache (a copy, so not each step)
                keep = torch.nonzero(running).flatten()
                rows, nxt, running = rows[keep], nxt[keep], running[keep]
                state.select(keep)
            logits = state.step(nxt)
        return tokens.tolist(), logprobs.tolist()

    def decode_state(self, prompts, max_new_tokens):
        """The sampling state of one chunk after its prefill: polyrl's packed forward (``policy/packed_decode.py``)
        for the decoders it supports, transformers' forward with its KV cache otherwise; None when neither can
        share a prefill."""
        unique, source = distinct(prompts)
        pictures = picture_forward_of(self.model)
        if pictures is not None:
            return PictureDecode.of(pictures, self.model, unique, source, self.tokenizer.pad_token_id, self.device)
        dec = Decoder.of(self.model)
        if dec is not None and dec.fits(max(map(len, unique)) + max_new_tokens):
            mode = autocast_mode(self.model)
            dtype = AUTOCAST_DTYPES.get(mode) or next(self.model.parameters()).dtype
            linears = MODULES
            if dtype == torch.bfloat16 and self.graphs is None and PackedLinears.available(dec, self.device):
                linears = PackedLinears(dec, len(prompts))
            prefilled = prefill_prompts(dec, unique, source, linears, self.device)
            if self.graphs is not None:
                return GraphedDecode(dec, prefilled, max_new_tokens, dtype, self.graphs)
            return PackedDecode(dec, prefilled, max_new_tokens, linears, dtype)
        return _CachedDecode.of(self.model, unique, source, self.tokenizer.pad_token_id, self.device)


class _CachedDecode:
    """Sampling state on transformers' forward: the distinct prompts prefilled left-padded, their KV cache
    indexed out to one row per completion, one forward per token."""

    def __init__(self, model, pre: Prefill):
        self.model, self.cache, self.args = model, pre.cache, forward_args(model)
        self.first_logits = pre.logits[pre.source, -1]
        self.attention, self.positions = pre.attention[pre.source], pre.positions[pre.source, -1:] + 1

    @classmethod
    def of(cls, model, unique, source, pad_id, device) -> _CachedDecode | None:
        pre = prefill(model, unique, source, device, pad_id, last_logits_only=True)
        return cls(model, pre) if pre is not None else None

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        self.attention = torch.cat([self.attention, self.attention.new_ones(len(tokens), 1)], 1)
        out = self.model(
            input_ids=tokens.unsqueeze(1),
            attention_mask=self.attention,
            position_ids=self.positions,
            use_cache=True,
            **{self.args["cache"]: self.cache},
        )
        self.positions = self.positions + 1
        return out.logits[:, -1]

    def select(self, rows: torch.Tensor) -> None:
        self.attention, self.positions = self.attention[rows], self.positions[rows]
        self.cache.batch_select_indices(rows)


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """``probs [N, V]`` with every token outside the top-p nucleus set to 0 (not renormalized): the smallest set
    of most likely tokens whose mass reaches ``top_p``, as ``model.generate``'s top-p filter keeps."""
    sorted_probs, order = probs.sort(-1, descending=True)
    before = sorted_probs.cumsum(-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(before >= top_p, 0.0)
    return torch.zeros_like(probs).scatter_(-1, order, sorted_probs)


def nucleus_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Log-prob of each ``targets [N]`` under the distribution :func:`sample_tokens` draws from for ``logits
    [N, V]``: the softmax at ``temperature``, cut to the top-p nucleus and renormalized (-inf outside it)."""
    probs = torch.softmax(logits.float() / (temperature if temperature > 0 else 1.0), -1)
    if top_p < 1.0:
        probs = nucleus(probs, top_p)
    return (probs.gather(1, targets.unsqueeze(1)).squeeze(1) / probs.sum(-1)).log()


def sample_tokens(
    logits: torch.Tensor, temperature: float, top_p: float, greedy: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row of ``logits [N, V]`` and its log-prob under the distribution it was drawn from: the
    softmax at ``temperature``, truncated to the top-p nucleus and renormalized (greedy: the argmax, scored
    under the untruncated softmax).

    A draw is by inversion of the cumulative distribution (one uniform number per row, the first token whose
    cumulative probability exceeds it): the distribution of ``torch.multinomial``, which ``model.generate``
    uses, for a fifteenth of its cost on a 49k-token vocabulary (it draws an exponential per token;
    docs/benchmarks.md), so not the same tokens at the same seed. A token of probability 0 is never drawn."""
    probs = torch.softmax(logits.float() / (temperature if temperature > 0 else 1.0), -1)
    if greedy:
        nxt = logits.argmax(-1)
        return nxt, probs.gather(1, nxt.unsqueeze(1)).squeeze(1).log()
    if top_p < 1.0:
        probs = nucleus(probs, top_p)
    cumulative = probs.cumsum(-1)
    total = cumulative[:, -1:]
    draw = torch.rand(total.shape, dtype=total.dtype, device=total.device) * total
    nxt = torch.searchsorted(cumulative, draw, right=True).clamp_(max=probs.shape[-1] - 1)
    return nxt.squeeze(1), (probs.gather(1, nxt) / total).log().squeeze(1)
