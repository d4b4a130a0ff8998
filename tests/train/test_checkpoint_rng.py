"""A checkpoint carries every generator a run draws from — Python's, numpy's, torch's CPU one and each CUDA
device's — and a resume puts each back (issue #42: only the CPU's was saved, so a resume on a GPU sampled from
another stream). CUDA's generators are stood in for on a CPU: the functions torch offers for them, replaced."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from polyrl.device import HOST
from polyrl.policy.loading import ModelConfig, load_policy
from polyrl.train.checkpoint import latest_checkpoint, load_training_state, restore_rng, rng_states, save_checkpoint

TINY = {"hidden_size": 32, "intermediate_size": 64, "num_layers": 1, "num_heads": 2}


class FakeCuda:
    """Two CUDA devices' generator states, as ``torch.cuda`` gives and takes them."""

    def __init__(self, monkeypatch, devices: int = 2):
        self.states = [torch.tensor([7, i], dtype=torch.uint8) for i in range(devices)]
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: devices)
        monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [s.clone() for s in self.states])
        monkeypatch.setattr(torch.cuda, "set_rng_state", self.set_state)

    def set_state(self, state, device):
        self.states[device] = state.clone()


@pytest.fixture(scope="module")
def policy():
    return load_policy(ModelConfig(path="tiny", tiny=TINY), seed=0, device=HOST)


def _save_and_load(tmp_path, policy):
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    save_checkpoint(tmp_path, "rl", 3, policy.model, optimizer, scheduler, {}, keep=1)
    return lambda: load_training_state(latest_checkpoint(tmp_path), policy.model, optimizer, scheduler)


def test_a_checkpoint_restores_each_cuda_devices_generator(tmp_path, monkeypatch, policy):
    cuda = FakeCuda(monkeypatch)
    load = _save_and_load(tmp_path, policy)
    saved = [s.clone() for s in cuda.states]
    cuda.states = [torch.tensor([0, 0], dtype=torch.uint8)] * 2  # the generators drew on after the checkpoint
    load()
    assert all(torch.equal(a, b) for a, b in zip(cuda.states, saved))


def test_a_checkpoint_restores_the_cpu_generators_to_the_same_draws(tmp_path, policy):
    load = _save_and_load(tmp_path, policy)
    expected = (random.random(), np.random.rand(), torch.rand(3))
    load()
    assert (random.random(), np.random.rand()) == expected[:2] and torch.equal(torch.rand(3), expected[2])


def test_a_cpu_checkpoint_or_one_from_before_restores_without_cuda_states():
    states = rng_states()
    assert states["cuda"] == []  # CUDA never started here
    expected = torch.rand(2)
    del states["cuda"]  # a checkpoint written before issue #42
    restore_rng(states)
    assert torch.equal(torch.rand(2), expected)


@pytest.mark.parametrize("visible", [1, 3])
def test_a_resume_gives_cuda_states_to_as_many_devices_as_are_saved_and_visible(monkeypatch, visible):
    cuda = FakeCuda(monkeypatch, devices=2)
    states = rng_states()
    monkeypatch.setattr(torch.cuda, "device_count", lambda: visible)
    given = []
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: given.append(device))
    restore_rng(states)
    assert given == list(range(min(visible, len(cuda.states))))
