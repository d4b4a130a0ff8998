"""Decode steps captured as CUDA graphs once per (rows bucket, cache width bucket) and replayed from then on.

A graph replays kernels on fixed memory, so what a step reads and writes lives in buffers that outlast a
``generate`` call (:class:`StepBuffers`: the KV cache, the step's tokens, positions and column, the logits it writes).
A chunk of ``n`` rows whose prompts and new tokens need ``w`` columns runs in the buffers of the smallest bucket
holding it (rows padded up to :func:`rows_bucket`, columns to :func:`width_bucket`, as vLLM and SGLang pad a batch
up to a captured size); the padding rows decode a pad token and are never read. The first step a bucket takes is
captured (after two eager warm-up steps on a side stream), every later one — in this call and in the calls after it
— is a replay. Every graph allocates from one shared memory pool: a graph's output is read before the next graph
replays, which is what sharing needs. ``torch.cuda.graph`` empties the allocator's cache before each capture, so
captures are few (one per bucket) and no ``generate`` call pays one after the first.

The weights are read where they are: an optimizer updates them in place, so a captured graph stays valid across
updates; a weight moved to other memory (``param.data = ...``) is seen (:meth:`DecodeGraphs.prepare` compares where
every parameter lives) and the graphs are captured again. The fused step's weight copies are refreshed in place
before every call. Under autocast the capture runs with autocast's cast cache off, so that the graph casts the
current weights rather than reading copies cast before it (which the next update leaves stale).

What happened is counted (:class:`GraphStats`: captures, replays, fallbacks): a capture that fails warns once with
its reason, leaves the step's state (positions, column, cache mask, the current stream) as it was, and the bucket
decodes eagerly from then on; ``benchmarks/gpu_throughput.py`` records the counts and fails on a fallback.
"""

from __future__ import annotations

import contextlib
import warnings
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

import torch
from torch import Tensor

from polyrl.forward.decoder import MODULES, Decoder
from polyrl.policy.fused_decode import FusedWeights, RotaryTables, fusable, fused_decode_step
from polyrl.policy.packed_decode import Prompts, StaticCache, static_decode_step

GRAPH_WARMUP_STEPS = 2
"""Eager runs of the step on a side stream before capture (cuBLAS picks its kernels and workspaces there)."""
ROW_STEP = 32
"""Rows buckets: powers of two up to this, then its multiples (1, 2, 4, 8, 16, 32, 64, 96, 128, ...)."""
WIDTH_STEP = 64
"""Cache width buckets: multiples of this many columns."""
MAX_BUCKETS = 4
"""Buckets kept at once (the least recently used is dropped, its cache and graph freed): each holds a KV cache."""


def rows_bucket(rows: int) -> int:
    return 1 << (rows - 1).bit_length() if rows <= ROW_STEP else -(-rows // ROW_STEP) * ROW_STEP


def width_bucket(width: int) -> int:
    return -(-width // WIDTH_STEP) * WIDTH_STEP


@dataclass
class GraphStats:
    """What the decode graphs did: captures, replays, eager steps, and each fallback's reason."""

    captures: int = 0
    replays: int = 0
    eager_steps: int = 0
    fallbacks: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "captures": self.captures,
            "replays": self.replays,
            "eager_steps": self.eager_steps,
            "fallbacks": list(self.fallbacks),
        }


class StepBuffers:
    """Everything one bucket's step reads and writes, allocated once: the KV cache of ``rows`` × ``width`` columns,
    the tokens, positions and column of the step, and (once captured) its graph and the logits it writes."""

    def __init__(self, dec: Decoder, rows: int, width: int, dtype, device, weights: FusedWeights | None):
        self.dec, self.weights = dec, weights
        self.cache = StaticCache.empty(dec, rows, width, dtype, device)
        self.tokens = torch.zeros(rows, dtype=torch.long, device=device)
        self.positions = torch.zeros(rows, dtype=torch.long, device=device)
        self.col = torch.zeros(1, dtype=torch.long, device=device)
        self.tables = None
        if weights is not None and RotaryTables.apply(dec):
            self.tables = RotaryTables(dec, width, dec.trunk.embed_tokens.weight)
        self.graph = None
        self.logits: Tensor | None = None
        self.failed = False

    def load(self, prompts: Prompts) -> None:
        """A chunk's prompts into the first rows; the other rows decode a pad token at position 0."""
        n = prompts.index.shape[0]
        self.cache.load(prompts.kv, prompts.index, prompts.valid)
        self.positions.zero_()
        self.positions[:n] = prompts.lengths
        self.tokens.zero_()
        self.col.fill_(prompts.index.shape[1])

    def run(self) -> Tensor:
        """One step, eagerly (or while captured): logits ``[rows, V]``, positions and column advanced."""
        if self.tables is not None:
            hidden = fused_decode_step(
                self.dec, self.cache, self.tokens, self.positions, self.col, self.weights, self.tables
            )
            logits = self.weights.linear(self.dec.head, hidden)
        else:  # a LoRA model, or a rotary embedding whose tables change with the length: the modules' step
            hidden = static_decode_step(self.dec, self.cache, self.tokens, self.positions, self.col, MODULES)
            logits = self.dec.head(hidden)
        self.positions.add_(1)
        self.col.add_(1)
        return logits

    def snapshot(self) -> tuple[Tensor, Tensor, Tensor]:
        return self.positions.clone(), self.col.clone(), self.cache.allowed.clone()

    def restore(self, saved: tuple[Tensor, Tensor, Tensor]) -> None:
        """Positions, column and mask as they were (the keys a warm-up wrote at the column are rewritten by the
        real step)."""
        for tensor, before in zip((self.positions, self.col, self.cache.allowed), saved):
            tensor.copy_(before)


class DecodeGraphs:
    """The buffers and graphs of a backend's decode steps, kept across ``generate`` calls (see the module
    docstring). ``capture``: replay steps as CUDA graphs (on CUDA; a test gives the CPU stand-in of
    ``tests/cuda_graph_standin.py``); without it the same buffers run eagerly. ``fused``: the fused step
    (``policy/fused_decode.py``) where the model allows it."""

    def __init__(self, capture: bool, fused: bool):
        self.capture, self.fused = capture, fused
        self.stats = GraphStats()
        self.buckets: OrderedDict[tuple, StepBuffers] = OrderedDict()
        self.pool = None
        self._weights: FusedWeights | None = None
        self._model: tuple | None = None

    def prepare(self, dec: Decoder, dtype) -> None:
        """Before a chunk: the graphs dropped if the model or where its weights live changed, the fused step's
        weight copies refreshed (the optimizer changed the weights since the last call)."""
        parameters = [*dec.trunk.parameters(), *dec.head.parameters()]
        model = (weakref.ref(dec.trunk), dtype, tuple(p.data_ptr() for p in parameters))
        if self._model is None or self._model[0]() is not dec.trunk or self._model[1:] != model[1:]:
            self.reset()
            self._model = model
            if self.fused and fusable(dec):
                self._weights = FusedWeights(dec, dtype)
        elif self._weights is not None:
            self._weights.refresh()

    def reset(self) -> None:
        """Drop every bucket, graph and weight copy (their memory returns to the allocator)."""
        self.buckets.clear()
        self._weights = None
        self._model = None

    def load(self, dec: Decoder, prompts: Prompts, new_tokens: int, dtype) -> StepBuffers:
        """The buffers of the bucket that holds this chunk, with its prompts loaded."""
        self.prepare(dec, dtype)
        rows, width = prompts.index.shape[0], prompts.index.shape[1] + new_tokens
        key = (rows_bucket(rows), width_bucket(width))
        buffers = self.buckets.pop(key, None)
        if buffers is None:
            while len(self.buckets) >= MAX_BUCKETS:
                self.buckets.popitem(last=False)
            buffers = StepBuffers(dec, *key, dtype, prompts.index.device, self._weights)
        self.buckets[key] = buffers  # the most recently used last
        buffers.load(prompts)
        return buffers

    def step(self, buffers: StepBuffers, tokens: Tensor) -> Tensor:
        """Logits ``[bucket rows, V]`` after ``tokens`` (the chunk's rows first): a replay of the bucket's graph,
        captured at its first step; the eager step where capture is off or failed."""
        buffers.tokens[: tokens.shape[0]].copy_(tokens)
        if self.capture and buffers.graph is None and not buffers.failed:
            self._capture(buffers)
        if buffers.graph is not None:
            buffers.graph.replay()
            self.stats.replays += 1
            return buffers.logits
        self.stats.eager_steps += 1
        return buffers.run()

    def _capture(self, buffers: StepBuffers) -> None:
        saved = buffers.snapshot()
        stream = torch.cuda.current_stream()
        try:
            # whatever fails inside (torch.cuda.graph's exit leaves the capture stream current when capture_end
            # raises), the thread ends on the stream it began on
            with torch.cuda.stream(stream):
                side = torch.cuda.Stream()
                side.wait_stream(stream)
                with torch.cuda.stream(side):
                    for _ in range(GRAPH_WARMUP_STEPS):
                        buffers.run()
                        buffers.restore(saved)
                stream.wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                if self.pool is None:
                    self.pool = torch.cuda.graph_pool_handle()
                with _uncached_autocast(buffers.tokens), torch.cuda.graph(graph, pool=self.pool):
                    logits = buffers.run()
            buffers.graph, buffers.logits = graph, logits
            self.stats.captures += 1
        except Exception as exc:  # an op the graph cannot hold: this bucket decodes eagerly
            buffers.failed = True
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            if reason not in self.stats.fallbacks:
                warnings.warn(
                    f"CUDA graph capture of the decode step failed ({reason}); decoding eagerly", stacklevel=3
                )
            self.stats.fallbacks.append(reason)
        finally:
            buffers.restore(saved)


def _uncached_autocast(like: Tensor):
    """Autocast as it is, with its cast cache off (the graph must cast the weights it reads, not read a cast copy
    the next update makes stale); nothing when autocast is off."""
    kind = "cuda" if like.is_cuda else "cpu"
    if not torch.is_autocast_enabled(kind):
        return contextlib.nullcontext()
    return torch.autocast(kind, dtype=torch.get_autocast_dtype(kind), cache_enabled=False)
