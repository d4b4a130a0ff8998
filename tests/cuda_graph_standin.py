"""A CPU stand-in for CUDA graphs: what a captured decode step would do on a GPU, made visible where there is none.

``with cuda_graphs() as graphs:`` replaces ``torch.cuda.Stream``, ``torch.cuda.stream``, ``current_stream``,
``synchronize``, ``empty_cache``, ``graph_pool_handle`` and ``CUDAGraph`` with CPU stand-ins; ``torch.cuda.graph``
stays torch's own context manager, now over the stand-ins, so that its order of calls (synchronize, empty_cache, the
capture stream entered, ``capture_begin``; ``capture_end``, the stream left) is the one a GPU sees.

Between ``capture_begin`` and ``capture_end`` the step runs under a dispatch mode that records every aten op and
raises :class:`HostSync` where a CUDA capture fails or silently goes wrong: a read of a device value on the host
(``.item()``, ``.tolist()``, ``bool(t)``, ``_local_scalar_dense``), ``nonzero``, boolean-mask indexing (a hidden
``nonzero``), copies to the host and host data copied in (``torch.tensor(...)``). A capture on a GPU runs no kernel:
so when it ends, every tensor the step wrote that existed before is put back as it was, and every tensor the step
made is filled with garbage (NaN, or -1 for integers) until a replay computes it. A refused op invalidates the
capture, whose ``capture_end`` then raises too, as CUDA's does: ``torch.cuda.graph``'s exit leaves the thread on the
capture stream then. Copies to the host are seen
where the device guard runs too (``with second_device(model), cuda_graphs(monkeypatch):``), which knows what is on
the device. :meth:`StandInGraph.replay`
re-runs the recorded ops on the same tensors — what existed before capture at its current contents (weights updated
in place, the static inputs), what the capture made in place — so the numbers a replay gives are those a GPU's
replay would, and a step that changed Python state (a counter, a tensor rebound) instead of device state replays
wrong here as it would there.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from device_guard import on_device
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

aten = torch.ops.aten


class HostSync(RuntimeError):
    """What a capture raises where CUDA's would fail (``cudaErrorStreamCaptureUnsupported``) or read a value the
    graph cannot hold."""


_SYNC_OPS = {
    aten._local_scalar_dense.default,
    aten.item.default,
    aten.is_nonzero.default,
    aten.equal.default,
    aten.allclose.default,
    aten.nonzero.default,
    aten.nonzero_numpy.default,
    aten.where.default,
    aten.masked_select.default,
    aten._unique2.default,
    aten.unique_consecutive.default,
    aten.unique_dim.default,
    aten.repeat_interleave.Tensor,
    aten.bincount.default,
}
"""Ops whose result's size or value the host must read (a device → host copy and a sync on a GPU)."""

_HOST_READS = {
    torch.Tensor.item,
    torch.Tensor.tolist,
    torch.Tensor.numpy,
    torch.Tensor.__bool__,
    torch.Tensor.__int__,
    torch.Tensor.__float__,
    torch.Tensor.__index__,
    torch.Tensor.__array__,
    torch.Tensor.__repr__,
    torch.Tensor.__format__,
}
_HOST_DATA = {torch.tensor, torch.as_tensor, torch.Tensor.new_tensor}


def _bool_index(func, args) -> bool:
    if func not in (aten.index.Tensor, aten.index_put_.default, aten.index_put.default, aten._index_put_impl_.default):
        return False
    indices = args[1] if len(args) > 1 else []
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices)


def _to_host(func, args, kwargs) -> bool:
    """A copy of a device tensor to the host. Which tensors are on the device the device guard knows
    (``tests/device_guard.py``: run the step under both to see these); without it every tensor is a host one."""
    if func is torch.Tensor.cpu:
        return bool(on_device(args[0]))
    if func is not torch.Tensor.to or not on_device(args[0]):
        return False
    targets = [a for a in args[1:] if isinstance(a, (str, torch.device))] + [kwargs.get("device")]
    return any(t is not None and torch.device(t).type == "cpu" for t in targets)


class _NoHostValues(TorchFunctionMode):
    """The Python-level half of the capture's refusals (reads of a value, host data copied in)."""

    def __init__(self, recorder: _Recorder):
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _HOST_READS or _to_host(func, args, kwargs):
            self.recorder.refuse(f"{getattr(func, '__name__', func)} reads a device value on the host")
        if func in _HOST_DATA:
            self.recorder.refuse(f"{func.__name__} copies host data to the device")
        return func(*args, **kwargs)


@dataclass
class _Op:
    func: object
    args: tuple
    kwargs: dict
    out: object


class _Recorder(TorchDispatchMode):
    """Records the aten ops of a capture, refuses host syncs, and keeps what each in-place op overwrote."""

    def __init__(self):
        super().__init__()
        self.ops: list[_Op] = []
        self.overwritten: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.failure: str | None = None

    def refuse(self, why: str):
        """Raise where the GPU would; the capture is invalid from here on (its ``capture_end`` raises too)."""
        self.failure = self.failure or why
        raise HostSync(f"{why} inside a CUDA graph capture")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _SYNC_OPS or _bool_index(func, args):
            self.refuse(f"{func} needs the host to read a device value")
        for arg, value in zip(func._schema.arguments, itertools.chain(args, itertools.repeat(None))):
            value = kwargs.get(arg.name, value)
            if arg.alias_info is not None and arg.alias_info.is_write and isinstance(value, torch.Tensor):
                self.overwritten.append((value, value.clone()))
        out = func(*args, **kwargs)
        self.ops.append(_Op(func, args, kwargs, out))
        return out


def _aliases(func) -> bool:
    """The op returns (a view of) one of its inputs: a view op, or an in-place one."""
    return any(r.alias_info is not None for r in func._schema.returns)


def _writes(func) -> bool:
    return any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments)


def _tensors(x) -> list[torch.Tensor]:
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


@dataclass
class StandInGraph:
    """``torch.cuda.CUDAGraph`` on a CPU (see the module docstring)."""

    owner: CudaGraphs
    ops: list[_Op] | None = None
    pool_handle: object = None
    _modes: list = field(default_factory=list)

    def capture_begin(self, pool=None, capture_error_mode: str = "global", **_):
        self.pool_handle = pool if pool is not None else object()
        self.owner.pools.append(self.pool_handle)
        if self.owner.fail_capture_begin is not None:
            raise self.owner.fail_capture_begin
        recorder = _Recorder()
        host = _NoHostValues(recorder)
        self._modes = [recorder, host]
        host.__enter__()
        recorder.__enter__()

    def capture_end(self):
        recorder, host = self._modes
        recorder.__exit__(None, None, None)
        host.__exit__(None, None, None)
        self._modes = []
        with torch.no_grad():
            for tensor, before in reversed(recorder.overwritten):  # a capture runs no kernel
                tensor.copy_(before)
            for op in recorder.ops:  # what the capture made holds garbage until a replay
                if not _aliases(op.func):
                    for t in _tensors(op.out):
                        t.fill_(float("nan") if t.is_floating_point() else -1)
        if recorder.failure is not None:  # as cudaStreamEndCapture after an error: the capture is invalidated
            raise HostSync(f"the capture was invalidated by an earlier error ({recorder.failure})")
        if self.owner.fail_capture_end is not None:
            raise self.owner.fail_capture_end
        self.ops = recorder.ops
        self.owner.captures += 1

    def replay(self):
        if self.ops is None:
            raise RuntimeError("replay of a graph that was not captured")
        with torch.no_grad():
            for op in self.ops:
                if _aliases(op.func) and not _writes(op.func):
                    continue  # a view: it sees its base, which the replay refreshes
                new = op.func(*op.args, **op.kwargs)
                if not _writes(op.func):
                    for old, fresh in zip(_tensors(op.out), _tensors(new)):
                        old.copy_(fresh)
        self.owner.replays += 1

    def pool(self):
        return self.pool_handle

    def reset(self):
        self.ops = None


class _Stream:
    def __init__(self, *args, **kwargs):
        pass

    def wait_stream(self, other) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True


class CudaGraphs:
    """The stand-ins and what they saw: captures, replays, ``empty_cache`` calls, the pools captures used, and the
    current stream (``current_stream()``). ``fail_capture_begin`` / ``fail_capture_end``: an exception the next
    captures raise there (a capture that fails on a GPU)."""

    def __init__(self):
        self.default_stream = _Stream()
        self.current = self.default_stream
        self.captures = self.replays = self.empty_caches = self.synchronizes = 0
        self.pools: list = []
        self.fail_capture_begin: Exception | None = None
        self.fail_capture_end: Exception | None = None

    @contextlib.contextmanager
    def stream(self, s) -> Iterator[None]:
        before, self.current = self.current, s
        try:
            yield
        finally:
            self.current = before

    def current_stream(self, device=None):
        return self.current

    def empty_cache(self) -> None:
        self.empty_caches += 1

    def synchronize(self, device=None) -> None:
        self.synchronizes += 1


@contextlib.contextmanager
def cuda_graphs(monkeypatch) -> Iterator[CudaGraphs]:
    """``torch.cuda``'s stream and graph primitives replaced by CPU stand-ins until the test ends."""
    graphs = CudaGraphs()
    monkeypatch.setattr(torch.cuda, "Stream", _Stream)
    monkeypatch.setattr(torch.cuda, "stream", graphs.stream)
    monkeypatch.setattr(torch.cuda, "current_stream", graphs.current_stream)
    monkeypatch.setattr(torch.cuda, "synchronize", graphs.synchronize)
    monkeypatch.setattr(torch.cuda, "empty_cache", graphs.empty_cache)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: object())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda *a, **k: StandInGraph(graphs))
    monkeypatch.setattr(torch._C, "_host_emptyCache", lambda: None, raising=False)
    monkeypatch.setattr(torch.cuda.graph, "default_capture_stream", None)
    yield graphs
