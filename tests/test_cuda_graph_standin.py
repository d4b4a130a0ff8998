"""The CPU stand-in for CUDA graphs (``tests/cuda_graph_standin.py``) refuses in a capture what a GPU's capture cannot
hold, runs nothing while capturing, and replays what a GPU would: the recorded ops on the same tensors."""

from __future__ import annotations

import pytest
import torch
from cuda_graph_standin import HostSync, cuda_graphs
from device_guard import second_device

SYNCS = {
    "item": lambda x: x.sum().item(),
    "tolist": lambda x: x.tolist(),
    "bool": lambda x: bool(x.sum() > 0),
    "int": lambda x: int(x[0, 0]),
    "nonzero": lambda x: x.nonzero(),
    "where-one-argument": lambda x: torch.where(x > 0),
    "boolean-index": lambda x: x[x > 0],
    "boolean-index-assignment": lambda x: x.__setitem__(x > 0, 0.0),
    "masked-select": lambda x: x.masked_select(x > 0),
    "to-host": lambda x: x.to("cpu"),
    "cpu": lambda x: x.cpu(),
    "host-data": lambda x: x + torch.tensor([1.0], device=x.device),
}


@pytest.mark.parametrize("sync", SYNCS.values(), ids=SYNCS.keys())
def test_a_capture_refuses_each_host_sync(sync, monkeypatch):
    weight = torch.nn.Linear(3, 3)
    with second_device(weight) as guard, cuda_graphs(monkeypatch):
        x = weight(torch.randn(2, 3).to(guard.device)).detach()
        sync(x)  # eagerly: fine
        with pytest.raises(HostSync, match="invalidated") as raised, torch.cuda.graph(torch.cuda.CUDAGraph()):
            sync(x)
        assert isinstance(raised.value.__context__, HostSync)  # the op's own refusal, then capture_end's


def test_a_capture_runs_nothing_and_a_replay_computes_from_the_inputs_current_values(monkeypatch):
    """The static input and the weight are read at replay (a weight updated in place keeps the graph valid); what
    the capture wrote is put back, what it made holds garbage until the first replay."""
    linear = torch.nn.Linear(3, 2)
    with torch.no_grad(), cuda_graphs(monkeypatch) as graphs:
        static = torch.ones(4, 3)
        step = torch.zeros(1)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = linear(static).relu()
            step.add_(1)
        assert out.isnan().all() and step.item() == 0
        static.copy_(torch.full((4, 3), 2.0))
        linear.weight.mul_(3)  # an optimizer step, in place
        graph.replay()
        torch.testing.assert_close(out, linear(static).relu(), rtol=0, atol=0)
        graph.replay()
        assert step.item() == 2 and graphs.captures == 1 and graphs.replays == 2


def test_a_replay_runs_no_python(monkeypatch):
    """A counter kept in Python, or a tensor rebound instead of written in place, does not advance on replay: on a
    GPU the graph holds the kernels, not the code that launched them."""
    with torch.no_grad(), cuda_graphs(monkeypatch):
        state = {"calls": 0, "position": torch.zeros(1)}

        def step():
            state["calls"] += 1
            state["position"] = state["position"] + 1  # rebound: the graph writes the first result's memory

        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        for _ in range(3):
            graph.replay()
        assert state["calls"] == 1 and state["position"].item() == 1


def test_torch_cuda_graph_over_the_stand_in_syncs_empties_the_cache_and_leaves_the_capture_stream(monkeypatch):
    with cuda_graphs(monkeypatch) as graphs:
        before = torch.cuda.current_stream()
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            assert torch.cuda.current_stream() is not before  # captures run on a side stream
            torch.ones(2).mul_(2)
        assert torch.cuda.current_stream() is before
        assert graphs.empty_caches == 1 and graphs.synchronizes == 1 and graphs.captures == 1


def test_a_capture_end_that_fails_leaves_the_thread_on_the_capture_stream_as_torch_does(monkeypatch):
    """torch.cuda.graph's exit ends the capture before it leaves the stream: a failed capture_end leaves the thread
    on the capture stream, which a caller must put back (issue #42)."""
    with cuda_graphs(monkeypatch) as graphs:
        graphs.fail_capture_end = RuntimeError("operation not permitted when stream is capturing")
        before = torch.cuda.current_stream()
        with pytest.raises(RuntimeError), torch.cuda.graph(torch.cuda.CUDAGraph()):
            torch.ones(2).mul_(2)
        assert torch.cuda.current_stream() is not before
