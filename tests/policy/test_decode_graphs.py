"""Decode graphs (``policy/decode_graphs.py``), checked on the CPU with the stand-in for CUDA graphs
(``tests/cuda_graph_standin.py``) under the device guard: a capture holds no host sync, a replay decodes what the
eager step decodes, a graph is captured once per bucket and stays valid across weight updates, and a capture that
fails leaves the step as it was and decodes eagerly, saying so (issue #42)."""

from __future__ import annotations

import copy
import random
import warnings

import pytest
import torch
from cuda_graph_standin import HostSync, cuda_graphs
from device_guard import second_device
from small_llama import SHAPE, ConfigTokenizer
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

import polyrl.policy.decode_graphs as decode_graphs
from polyrl.device import HOST
from polyrl.forward.precision import set_autocast
from polyrl.policy import TransformersBackend
from polyrl.policy.decode_graphs import DecodeGraphs, rows_bucket, width_bucket
from polyrl.policy.fused_decode import RotaryTables


def _model(kind: str = "llama"):
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**SHAPE)) if kind == "qwen2" else LlamaForCausalLM(LlamaConfig(**SHAPE))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # large weights: varied tokens, far-from-uniform distributions
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (0.3 if p.dim() > 1 else 0.1) + (1.0 if p.dim() == 1 else 0))
    return model.eval()


def _prompts(rows: int = 7, seed: int = 1) -> list[list[int]]:
    rnd = random.Random(seed)
    groups = [[rnd.randrange(3, 72) for _ in range(rnd.randint(2, 18))] for _ in range(-(-rows // 2))]
    return [p for p in groups for _ in range(2)][:rows]


def _generate(model, graphs: DecodeGraphs, prompts, **sampling):
    backend = TransformersBackend(model, ConfigTokenizer(), device=HOST)
    backend.graphs = graphs
    torch.manual_seed(3)
    gens = backend.generate(prompts, max_new_tokens=10, **sampling)
    return [g.completion_ids for g in gens], [g.logprobs for g in gens]


def _captured(model, graphs: DecodeGraphs, prompts, monkeypatch, **sampling):
    """``_generate`` on the pretend device, with the stand-in capturing: (tokens, log-probs), what the stand-in saw."""
    with cuda_graphs(monkeypatch) as standin, second_device(model) as guard, warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback warns: here it fails the test
        backend = TransformersBackend(model, ConfigTokenizer(), device=guard.device)
        backend.graphs = graphs
        torch.manual_seed(3)
        gens = backend.generate(prompts, max_new_tokens=10, **sampling)
    return ([g.completion_ids for g in gens], [g.logprobs for g in gens]), standin


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("sampling", [{"greedy": True}, {"temperature": 0.9, "top_p": 0.8}], ids=["greedy", "top-p"])
def test_a_replayed_graph_decodes_the_eager_steps_tokens_and_buffers(kind, sampling, monkeypatch):
    """Same kernels replayed or run eagerly: the same tokens, log-probs and KV cache, to the bit."""
    model, prompts = _model(kind), _prompts()
    eager_graphs = DecodeGraphs(capture=False, fused=True)
    eager = _generate(model, eager_graphs, prompts, **sampling)
    graphs = DecodeGraphs(capture=True, fused=True)
    replayed, standin = _captured(model, graphs, prompts, monkeypatch, **sampling)
    assert replayed == eager
    assert standin.captures == 1 and graphs.stats.replays == 9 and graphs.stats.fallbacks == []
    (ours,), (theirs,) = graphs.buckets.values(), eager_graphs.buckets.values()
    for name in ("keys", "values", "allowed"):
        assert torch.equal(getattr(ours.cache, name), getattr(theirs.cache, name)), name


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_the_fused_step_decodes_the_modules_greedy_tokens(kind):
    """The fused step (q/k/v and gate/up as one matmul each, fused RMSNorm, rotary tables) computes the modules'
    step up to float rounding: the same greedy tokens, log-probs within 1e-5."""
    model, prompts = _model(kind), _prompts()
    fused = _generate(model, DecodeGraphs(capture=False, fused=True), prompts, greedy=True)
    modules = _generate(model, DecodeGraphs(capture=False, fused=False), prompts, greedy=True)
    assert fused[0] == modules[0]
    for ours, theirs in zip(fused[1], modules[1]):
        torch.testing.assert_close(torch.tensor(ours), torch.tensor(theirs), atol=1e-5, rtol=1e-5)


def test_the_rotary_tables_hold_the_models_own_rotary_values():
    from polyrl.forward.decoder import Decoder

    dec = Decoder.of(_model())
    like = dec.trunk.embed_tokens.weight
    tables = RotaryTables(dec, 64, like)
    positions = torch.tensor([0, 5, 63, 17])
    cos, sin = dec.rotary(positions, like)
    assert torch.equal(tables.cos[positions], cos)
    x = torch.randn(4, 3, cos.shape[-1])
    half = x.shape[-1] // 2
    expected = x * cos.unsqueeze(1) + torch.cat([-x[..., half:], x[..., :half]], -1) * sin.unsqueeze(1)
    torch.testing.assert_close(tables.rotate(x, *tables.at(positions)), expected, atol=1e-6, rtol=1e-6)


def test_a_graph_is_captured_once_per_bucket_and_replayed_across_calls_from_one_pool(monkeypatch):
    """No capture, synchronize or empty_cache after a bucket's first call; another bucket is another capture,
    in the same memory pool."""
    model, graphs = _model(), DecodeGraphs(capture=True, fused=True)
    with cuda_graphs(monkeypatch) as standin, second_device(model) as guard:
        backend = TransformersBackend(model, ConfigTokenizer(), device=guard.device)
        backend.graphs = graphs
        for _ in range(3):
            backend.generate(_prompts(7), max_new_tokens=10, greedy=True)
        assert standin.captures == 1 and standin.empty_caches == 1 and standin.synchronizes == 1
        backend.generate(_prompts(3), max_new_tokens=10, greedy=True)  # 4 rows, not 8: another bucket
    assert standin.captures == 2 and len(set(map(id, standin.pools))) == 1
    assert sorted(graphs.buckets) == [(4, 64), (8, 64)]


def test_weights_updated_in_place_keep_a_captured_graph_valid(monkeypatch):
    """An optimizer step writes the weights in place: the graph captured before it decodes with the new ones."""
    model, graphs = _model(), DecodeGraphs(capture=True, fused=True)
    first, _ = _captured(model, graphs, _prompts(), monkeypatch, greedy=True)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    after, standin = _captured(model, graphs, _prompts(), monkeypatch, greedy=True)
    fresh = _generate(model, DecodeGraphs(capture=False, fused=True), _prompts(), greedy=True)
    assert after == fresh and after != first
    assert standin.captures == 0 and graphs.stats.captures == 1  # the second call only replayed


def test_under_autocast_the_graph_casts_the_current_weights(monkeypatch):
    """bf16 autocast and a LoRA-like model (its projections not plain nn.Linear: the modules' step): the capture
    runs with autocast's cast cache off, so an update's new weights are what the replay casts."""
    model = _model()
    for layer in model.model.layers:  # a subclass: not fused, called as a module, as a LoRA layer is
        layer.mlp.down_proj.__class__ = type("Adapted", (torch.nn.Linear,), {})
    set_autocast(model, "bf16")
    graphs = DecodeGraphs(capture=True, fused=True)
    _captured(model, graphs, _prompts(), monkeypatch, greedy=True)
    assert graphs._weights is None  # the modules' step
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight.mul_(-2.0)
    after, _ = _captured(model, graphs, _prompts(), monkeypatch, greedy=True)
    assert after == _generate(model, DecodeGraphs(capture=False, fused=True), _prompts(), greedy=True)
    assert graphs.stats.captures == 1


def test_a_weight_moved_to_other_memory_is_seen_and_the_graph_captured_again(monkeypatch):
    model, graphs = _model(), DecodeGraphs(capture=True, fused=True)
    _captured(model, graphs, _prompts(), monkeypatch, greedy=True)
    layer = model.model.layers[1].self_attn.q_proj
    layer.weight.data = layer.weight.data.clone() * 2  # not in place: a graph would read the old memory
    after, _ = _captured(model, graphs, _prompts(), monkeypatch, greedy=True)
    assert after == _generate(model, DecodeGraphs(capture=False, fused=True), _prompts(), greedy=True)
    assert graphs.stats.captures == 2


def _fail_in_warm_up(monkeypatch):
    """The first run of the step advances the positions, then fails (as an op the warm-up meets would)."""
    real = decode_graphs.StepBuffers.run
    calls = []

    def run(self):
        out = real(self)
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return out

    monkeypatch.setattr(decode_graphs.StepBuffers, "run", run)


def _sync_in_step(monkeypatch):
    real = RotaryTables.at
    monkeypatch.setattr(RotaryTables, "at", lambda self, p: real(self, p * int(p.max() >= 0)))


FAILURES = {
    "capture_begin": lambda standin, mp: setattr(standin, "fail_capture_begin", RuntimeError("out of memory")),
    "capture_end": lambda standin, mp: setattr(standin, "fail_capture_end", RuntimeError("capture invalidated")),
    "warm-up": lambda standin, mp: _fail_in_warm_up(mp),
    "host-sync": lambda standin, mp: _sync_in_step(mp),
}


@pytest.mark.parametrize("failure", FAILURES.values(), ids=FAILURES.keys())
def test_a_failed_capture_restores_the_step_and_decodes_eagerly_saying_why(failure, monkeypatch):
    """Whatever fails — beginning or ending the capture, a warm-up step after it advanced the positions, a host sync
    in the step — the fallback decodes the eager tokens from the state the step had, the thread is back on its
    stream, one warning says why, and the stats record it (issue #42: the fallback hid itself)."""
    model, prompts = _model(), _prompts()
    eager = _generate(model, DecodeGraphs(capture=False, fused=True), prompts, greedy=True)
    graphs = DecodeGraphs(capture=True, fused=True)
    with cuda_graphs(monkeypatch) as standin, second_device(model) as guard:
        failure(standin, monkeypatch)
        backend = TransformersBackend(model, ConfigTokenizer(), device=guard.device)
        backend.graphs = graphs
        torch.manual_seed(3)
        with pytest.warns(UserWarning, match="CUDA graph capture of the decode step failed") as warned:
            gens = backend.generate(prompts, max_new_tokens=10, greedy=True)
        assert standin.current is standin.default_stream
    assert [g.completion_ids for g in gens] == eager[0]
    assert len(warned) == 1 and len(graphs.stats.fallbacks) == 1 and graphs.stats.captures == 0
    assert graphs.stats.eager_steps == 9 and backend.graph_stats()["fallbacks"] == graphs.stats.fallbacks
    if failure is FAILURES["host-sync"]:
        assert graphs.stats.fallbacks[0].startswith(HostSync.__name__)


@pytest.mark.parametrize(("rows", "bucket"), [(1, 1), (3, 4), (32, 32), (33, 64), (65, 96), (256, 256), (257, 288)])
def test_rows_are_padded_up_to_a_bucket(rows, bucket):
    assert rows_bucket(rows) == bucket


@pytest.mark.parametrize(("width", "bucket"), [(1, 64), (64, 64), (65, 128), (200, 256)])
def test_cache_widths_are_padded_up_to_a_bucket(width, bucket):
    assert width_bucket(width) == bucket


def test_padding_rows_change_nothing_in_the_real_rows():
    """Five rows decode in a bucket of eight: the same tokens as five rows in a bucket of five would be."""
    model = _model()
    padded = _generate(model, DecodeGraphs(capture=False, fused=False), _prompts(5), greedy=True)
    plain = _generate(copy.deepcopy(model), None, _prompts(5), greedy=True)
    assert padded[0] == plain[0]


def test_the_fused_step_launches_about_half_the_kernels_of_the_modules_step():
    """``benchmarks/decode_kernels.py``'s count on a small Llama: views and metadata left out, torch's rms_norm one
    kernel (as on CUDA). 30 layers of SmolLM2-135M at 256 rows: 1,280 → 614 in float32 (docs/gpu.md)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "decode_kernels.py"
    spec = importlib.util.spec_from_file_location("decode_kernels", path)
    kernels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernels)
    model = _model()
    modules = sum(kernels.step_kernels(model, 0, rows=8, prompt=6, new=4, fused=False).values())
    fused = sum(kernels.step_kernels(model, 0, rows=8, prompt=6, new=4, fused=True).values())
    per_layer = lambda total: total / SHAPE["num_hidden_layers"]
    assert per_layer(fused) <= 0.6 * per_layer(modules), (modules, fused)
