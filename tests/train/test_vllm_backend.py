"""The vLLM backend's glue, against a stand-in ``vllm`` module (the real one needs a CUDA GPU).

What is checked here: prompts go to vLLM as token ids with one seeded SamplingParams each, greedy maps to
temperature 0, stop tokens end up in the completion, ``sync_weights`` sends every tensor under its plain
Hugging Face name (LoRA merged) and clears the prefix cache, and configuration mistakes are one-line
UserErrors before a run starts. Whether vLLM itself samples correctly is checked on a GPU machine
(docs/scale-out.md, "vLLM").
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field

import pytest
import torch

from polyrl.errors import UserError
from polyrl.policy.tiny import build_tiny_policy


@dataclass
class FakeSample:
    token_ids: list[int]
    finish_reason: str
    stop_reason: int | str | None = None


@dataclass
class FakeOutput:
    prompt_token_ids: list[int]
    outputs: list[FakeSample]


class FakeModel:
    def __init__(self):
        self.loaded: list[tuple[str, torch.Tensor]] = []

    def load_weights(self, weights):
        self.loaded += list(weights)


@dataclass
class FakeLLM:
    """Records calls; ``script`` maps a prompt's last token to (token_ids, finish_reason, stop_reason)."""

    kwargs: dict
    script: dict = field(default_factory=dict)
    calls: list = field(default_factory=list)
    prefix_resets: int = 0

    def __post_init__(self):
        self.model = FakeModel()
        worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(model=self.model))
        self.llm_engine = types.SimpleNamespace(model_executor=types.SimpleNamespace(driver_worker=worker))

    def generate(self, prompts, sampling_params, use_tqdm=True):
        self.calls.append((prompts, sampling_params))
        out = []
        for p, params in zip(prompts, sampling_params):
            ids, reason, stop = self.script.get(p["prompt_token_ids"][-1], ([7] * params.max_tokens, "length", None))
            out.append(FakeOutput(p["prompt_token_ids"], [FakeSample(list(ids), reason, stop)]))
        return out

    def reset_prefix_cache(self):
        self.prefix_resets += 1


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    created = []

    def make_llm(**kwargs):
        llm = FakeLLM(kwargs)
        created.append(llm)
        return llm

    @dataclass
    class SamplingParams:
        n: int = 1
        max_tokens: int = 16
        temperature: float = 1.0
        top_p: float = 1.0
        stop_token_ids: list = field(default_factory=list)
        seed: int | None = None
        skip_special_tokens: bool = True

    module.LLM = make_llm
    module.SamplingParams = SamplingParams
    module.created = created
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    return module


@pytest.fixture
def backend(fake_vllm, tmp_path):
    from polyrl.policy.backends import GenerationConfig
    from polyrl.policy.vllm_backend import VLLMBackend, engine_options

    model, tok = build_tiny_policy()
    options = engine_options(GenerationConfig(vllm_gpu_memory_utilization=0.4))
    b = VLLMBackend(model, tok, **options, work_dir=str(tmp_path / "vllm"), seed=3)
    return b, fake_vllm.created[-1], model, tok


def test_the_policy_is_saved_for_vllm_to_load(backend, tmp_path):
    _, llm, _, _ = backend
    assert (tmp_path / "vllm" / "config.json").exists() and (tmp_path / "vllm" / "tokenizer.json").exists()
    assert llm.kwargs["model"] == str(tmp_path / "vllm") and llm.kwargs["gpu_memory_utilization"] == 0.4
    assert llm.kwargs["enable_prefix_caching"] is True and llm.kwargs["seed"] == 3


def test_generate_sends_token_ids_with_one_seed_per_completion(backend):
    b, llm, _, tok = backend
    eos = tok.eos_token_id
    llm.script = {11: ([20, 21, eos], "stop", eos), 12: ([22, 23], "stop", eos)}  # the second leaves EOS out
    torch.manual_seed(0)
    gens = b.generate([[5, 11], [5, 11], [6, 12], [9, 13]], max_new_tokens=4, temperature=0.7, top_p=0.9)
    prompts, params = llm.calls[-1]
    assert [p["prompt_token_ids"] for p in prompts] == [[5, 11], [5, 11], [6, 12], [9, 13]]
    assert len({p.seed for p in params}) == 4, "the G completions of a group must not share a seed"
    assert all(
        p.temperature == 0.7 and p.top_p == 0.9 and p.max_tokens == 4 and eos in p.stop_token_ids for p in params
    )
    assert [g.completion_ids for g in gens] == [[20, 21, eos], [20, 21, eos], [22, 23, eos], [7, 7, 7, 7]]
    assert [g.finished for g in gens] == [True, True, True, False]
    assert gens[0].text == tok.decode([20, 21], skip_special_tokens=True)
    torch.manual_seed(0)
    b.generate([[5, 11], [5, 11], [6, 12], [9, 13]], max_new_tokens=4)
    assert [p.seed for p in llm.calls[-1][1]] == [p.seed for p in params], "seeds follow torch's generator"


def test_greedy_is_temperature_zero(backend):
    b, llm, _, _ = backend
    b.generate([[5, 6]], max_new_tokens=3, temperature=0.9, top_p=0.5, greedy=True)
    (params,) = llm.calls[-1][1]
    assert params.temperature == 0.0 and params.top_p == 1.0
    assert b.generate([], max_new_tokens=3) == []


def test_sync_weights_sends_every_tensor_by_hf_name_and_clears_the_prefix_cache(backend):
    b, llm, model, _ = backend
    with torch.no_grad():
        model.model.embed_tokens.weight.add_(1.0)
    b.sync_weights(model, 5)
    names = [n for n, _ in llm.model.loaded]
    assert set(names) == set(model.state_dict())
    sent = dict(llm.model.loaded)["model.embed_tokens.weight"]
    assert torch.equal(sent, model.model.embed_tokens.weight)
    assert llm.prefix_resets == 1 and b.version == 5


def test_lora_weights_are_merged_before_sync(fake_vllm, tmp_path):
    from peft import LoraConfig, get_peft_model

    from polyrl.policy.backends import GenerationConfig
    from polyrl.policy.vllm_backend import VLLMBackend, engine_options

    base, tok = build_tiny_policy()
    plain_names = set(base.state_dict())
    model = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False))
    b = VLLMBackend(model, tok, **engine_options(GenerationConfig()), seed=0, work_dir=str(tmp_path / "v"))
    llm = fake_vllm.created[-1]
    b.sync_weights(model, 1)
    loaded = dict(llm.model.loaded)
    assert set(loaded) == plain_names  # no lora_A / base_layer names reach vLLM
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(loaded[q], base.get_submodule("model.layers.0.self_attn.q_proj").base_layer.weight)


def test_collective_rpc_is_used_when_the_engine_is_in_another_process():
    from polyrl.policy.vllm_backend import _load_weights_on_worker, load_weights

    calls = []
    llm = types.SimpleNamespace(collective_rpc=lambda fn, args: calls.append((fn, args)))
    n = load_weights(llm, [("a", torch.ones(2)), ("b", torch.zeros(1))])
    assert n == 2 and calls[0][0] is _load_weights_on_worker and [k for k, _ in calls[0][1][0]] == ["a", "b"]
    worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(model=FakeModel()))
    assert _load_weights_on_worker(worker, calls[0][1][0]) == 2 and len(worker.model_runner.model.loaded) == 2
    with pytest.raises(RuntimeError, match="weights can't be synced"):
        load_weights(types.SimpleNamespace(), [])


def test_missing_vllm_is_a_user_error(monkeypatch, tiny_train_config):
    from polyrl.train.trainer import Trainer

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(UserError, match=r"needs vLLM: pip install 'polyrl\[vllm\]'"):
        Trainer(tiny_train_config(device="cuda", generation={"engine": "vllm"}))


@pytest.mark.parametrize(
    ("updates", "message"),
    [
        ({"generation": {"engine": "vllm"}, "device": "cpu"}, "needs a CUDA device"),
        ({"generation": {"engine": "vllm"}, "backend": "ray"}, "rollout workers generate with transformers"),
    ],
)
def test_vllm_configuration_errors_are_config_errors(fake_vllm, tiny_train_config, updates, message):
    from polyrl.train.config import load_config

    data = {**tiny_train_config().model_dump(mode="json"), **updates}
    with pytest.raises(UserError, match=message):
        load_config(None, base=data)


def test_cli_reports_a_vllm_config_error_in_one_line(capsys, tmp_path):
    from polyrl.cli import run

    assert run(["train", "--run-dir", str(tmp_path / "r"), "generation.engine=vllm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "generation.engine=vllm needs a CUDA device" in err[0]


def test_the_vllm_engine_is_built_by_name_from_the_generation_section(fake_vllm):
    """``generation.engine: vllm`` is one registration: the registry builds the backend with the section's
    vllm_* fields and the run seed."""
    from polyrl.policy.backends import GenerationConfig, get_backend, make_backend
    from polyrl.policy.vllm_backend import VLLMBackend

    model, tok = build_tiny_policy()
    generation = GenerationConfig(
        engine="vllm", vllm_gpu_memory_utilization=0.45, vllm_max_model_len=64, vllm_enforce_eager=True
    )
    backend = make_backend(generation, model, tok, seed=11, share_prompts=True, device=torch.device("cpu"))
    assert isinstance(backend, VLLMBackend)
    kwargs = fake_vllm.created[-1].kwargs
    assert (kwargs["gpu_memory_utilization"], kwargs["max_model_len"], kwargs["enforce_eager"]) == (0.45, 64, True)
    assert kwargs["seed"] == 11 and kwargs["dtype"] == "auto"
    spec = get_backend("vllm")
    assert spec.cuda_only and not spec.shares_weights and spec.check is not None
