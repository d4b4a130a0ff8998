"""``--nproc`` (FSDP2 on CPU with gloo) with the embedded tiny vision-language model: its patch encoder sharded with
the LM, in full and under LoRA, 2 processes train what 1 process trains (the contract and tolerances of
``test_fsdp.py``), on a mix of visual and text tasks, so that some passes show no picture on some rank."""

import pytest
import torch
from test_fsdp import (
    TINY_FSDP,
    WEIGHT_ATOL,
    _assert_losses_of_one,
    _finish,
    _launch,
    _losses,
    _one_and_two,
    _records,
    _weights,
)

TINY_VLM_FSDP = {
    **TINY_FSDP,
    "model": {"path": "tiny", "tiny": {**TINY_FSDP["model"]["tiny"], "vision": {"enabled": True, "image_size": 16}}},
    # two visual tasks and a text one: micro-batches with pictures and without (the encoder unused on a rank)
    "tasks": [{"name": n, "difficulty": "easy"} for n in ("count_shapes", "bar_tallest", "addition")],
    "sft": {**TINY_FSDP["sft"], "micro_batch_tokens": 96},
    "rl": {**TINY_FSDP["rl"], "micro_batch_tokens": 128},
}
"""The tiny vision-language model (a patch encoder in front of the tiny LM), sharded with its encoder."""


@pytest.fixture(scope="module")
def vision_runs(tmp_path_factory):
    """A 1-process and a 2-process run of the tiny vision-language model, started together."""
    return _one_and_two(tmp_path_factory.mktemp("fsdp_vision"), TINY_VLM_FSDP)


def test_the_tiny_vlm_on_two_processes_reaches_the_losses_of_one(vision_runs):
    one, two = _records(vision_runs / "one"), _losses(vision_runs / "two")
    assert [(r["stage"], r["step"]) for r in one] == [r[:2] for r in two]
    assert all(r["loss"] != 0 for r in one if r["stage"] == "rl")
    _assert_losses_of_one(one, two)


def test_the_tiny_vlm_on_two_processes_trains_its_encoder_to_the_weights_of_one(vision_runs):
    from safetensors.torch import load_file

    one, two = _weights(vision_runs / "one"), _weights(vision_runs / "two")
    assert one.keys() == two.keys()
    assert max(float((one[k] - two[k]).abs().max()) for k in one) < WEIGHT_ATOL
    after_sft = load_file(str(vision_runs / "two" / "sft_model" / "model.safetensors"))
    encoder = [k for k in two if k.startswith("vision.")]
    assert encoder and all(not torch.equal(two[k], after_sft[k]) for k in encoder)  # RL moved the sharded encoder


TINY_VLM_LORA = {**TINY_VLM_FSDP, "model": {**TINY_VLM_FSDP["model"], "lora": {"enabled": True, "r": 4, "alpha": 8}}}
"""The same under LoRA: the embeddings frozen, adapters on every linear layer, the encoder's too."""


@pytest.fixture(scope="module")
def vision_lora_runs(tmp_path_factory):
    """A 1-process and a 2-process LoRA run of the tiny vision-language model, started together."""
    return _one_and_two(tmp_path_factory.mktemp("fsdp_vision_lora"), TINY_VLM_LORA)


def test_the_tiny_vlm_under_lora_on_two_processes_trains_the_adapters_of_one(vision_lora_runs):
    from safetensors.torch import load_file

    one, two = _records(vision_lora_runs / "one"), _losses(vision_lora_runs / "two")
    assert [(r["stage"], r["step"]) for r in one] == [r[:2] for r in two]
    _assert_losses_of_one(one, two)
    adapters = [
        load_file(str(vision_lora_runs / n / "final_model" / "adapter" / "adapter_model.safetensors"))
        for n in ("one", "two")
    ]
    assert adapters[0].keys() == adapters[1].keys() and any(".vision." in k for k in adapters[0])
    assert max(float((adapters[0][k] - adapters[1][k]).abs().max()) for k in adapters[0]) < WEIGHT_ATOL


def test_a_two_process_vlm_run_resumes_from_its_sharded_checkpoint(vision_runs, tmp_path):
    _finish(_launch(tmp_path, "halted", 2, config=TINY_VLM_FSDP, overrides=("rl.steps=2",)))
    _finish(_launch(tmp_path, "halted", 2, resume=True, overrides=(f"rl.steps={TINY_VLM_FSDP['rl']['steps']}",)))
    assert _losses(tmp_path / "halted") == _losses(vision_runs / "two")
    done, resumed = _weights(vision_runs / "two"), _weights(tmp_path / "halted")
    assert done.keys() == resumed.keys() and all(torch.equal(done[k], resumed[k]) for k in done)
