"""The Trainer is built by composition: where the policy lives is an injected placement, the generation
engine a registered backend, and the multi-process trainer is the same Trainer with another placement."""

import json

import pytest

from polyrl.device import HOST
from polyrl.policy.backends import BACKENDS, check_engine, get_backend, register_backend
from polyrl.policy.generation import TransformersBackend
from polyrl.train.placement import LocalPlacement
from polyrl.train.trainer import Trainer


class RecordingPlacement(LocalPlacement):
    """The one-process placement, noting every call the Trainer and its stages make."""

    def __init__(self):
        super().__init__(HOST)
        self.calls = []

    def _note(self, name, *detail):
        self.calls.append((name, *detail))


for _name in (
    "open_run_dir",
    "make_backend",
    "rollouts",
    "sync_backend",
    "evaluate",
    "reference_model",
    "save_model",
    "save_checkpoint",
    "load_checkpoint",
    "close",
):

    def _recorded(self, *args, _name=_name, **kwargs):
        detail = {"save_model": lambda: (args[1].name,), "save_checkpoint": lambda: (args[1], args[2])}
        self._note(_name, *detail.get(_name, tuple)())
        return getattr(LocalPlacement, _name)(self, *args, **kwargs)

    setattr(RecordingPlacement, _name, _recorded)


def test_the_trainer_hands_every_placement_job_to_the_injected_placement(tiny_train_config):
    config = tiny_train_config(sft__steps=2, rl__steps=2, rl__kl_coef=0.05, checkpoint_every=1)
    placement = RecordingPlacement()
    trainer = Trainer(config, placement=placement)
    assert placement.calls[:3] == [("open_run_dir",), ("make_backend",), ("rollouts",)]
    assert isinstance(trainer.parts.backend, TransformersBackend)
    trainer.run()
    calls = placement.calls
    assert [c for c in calls if c[0] == "save_model"] == [("save_model", "sft_model"), ("save_model", "final_model")]
    assert [c[1:] for c in calls if c[0] == "save_checkpoint"] == [("sft", 1), ("sft", 2), ("rl", 1), ("rl", 2)]
    assert calls.count(("evaluate",)) == 2 and calls.count(("reference_model",)) == 1
    assert ("sync_backend",) in calls and calls[-1] == ("close",)
    records = [json.loads(line) for line in open(f"{config.run_dir}/metrics.jsonl")]
    assert [r["stage"] for r in records].count("sft") == 2 and [r["stage"] for r in records].count("rl") == 2


def test_a_resumed_run_reads_its_checkpoint_through_the_placement(tiny_train_config):
    config = tiny_train_config(sft__steps=2, rl__steps=2, checkpoint_every=1)
    Trainer(config).run()
    placement = RecordingPlacement()
    Trainer(config, resume=True, placement=placement).run()
    assert ("load_checkpoint",) in placement.calls and ("save_model", "sft_model") not in placement.calls


def test_the_multi_process_trainer_is_the_trainer_with_another_placement():
    from polyrl.train.fsdp_trainer import FSDPPlacement, FSDPTrainer

    assert set(vars(FSDPTrainer)) - {"__module__", "__doc__", "__qualname__", "__firstlineno__"} == {"__init__"}
    assert issubclass(FSDPPlacement, LocalPlacement)


def test_a_backend_is_one_registration(tiny_train_config, monkeypatch):
    made = []

    def make(model, tokenizer, context):
        made.append(context)
        return TransformersBackend(model, tokenizer, batch_size=context.generation.batch_size, device=HOST)

    monkeypatch.setattr(BACKENDS, "_entries", dict(BACKENDS._entries))
    register_backend("recorded")(make)
    trainer = Trainer(tiny_train_config(generation={"engine": "recorded", "batch_size": 7}))
    assert isinstance(trainer.parts.backend, TransformersBackend) and trainer.parts.backend.batch_size == 7
    assert [c.seed for c in made] == [trainer.config.seed]


@pytest.mark.parametrize(
    "engine, device, rollouts, message",
    [
        ("vllm", "cpu", "local", "generation.engine=vllm needs a CUDA device"),
        ("vllm", "cuda", "ray", "cannot be combined with backend=ray"),
    ],
)
def test_an_engine_is_refused_where_it_cannot_run(engine, device, rollouts, message):
    from polyrl.policy.backends import GenerationConfig

    with pytest.raises(ValueError, match=message):
        check_engine(GenerationConfig(engine=engine), device, rollouts)
    assert get_backend("transformers").shares_weights and not get_backend("vllm").shares_weights
