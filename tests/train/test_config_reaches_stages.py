"""Every stage is built from the config: the sampling and backend settings reach RL rollouts, held-out
evaluation, rejection sampling and the Ray workers, and no stage keeps a copied default of its own."""

import inspect

import pytest
from rollout_sampling import sampling

from polyrl.envs.wrapped import WrappedTask
from polyrl.rollout import Sampling
from polyrl.tasks import get_task
from polyrl.tasks.base import DEFAULT_DIFFICULTY, Task
from polyrl.tasks.dataset import DatasetTask
from polyrl.train.config import TaskSpec
from polyrl.train.trainer import Trainer

SETTINGS = {
    "env__concurrency": 3,
    "env__max_episode_tokens": 96,
    "rl__top_p": 0.9,
    "rl__temperature": 0.8,
    "rl__max_new_tokens": 7,
    "rl__share_prompts": False,
    "generation__batch_size": 5,
    "sft__rejection_samples": 3,
}
EXPECTED = Sampling(4, 7, 0.8, 0.9, 96, 3)  # group_size 4 from the tiny config


def test_rl_rollouts_sample_with_the_configured_settings(tiny_train_config):
    trainer = Trainer(tiny_train_config(**SETTINGS))
    assert trainer.parts.source.sampling == EXPECTED
    assert (trainer.parts.backend.batch_size, trainer.parts.backend.shared_prefill) == (5, False)


def test_held_out_evaluation_steps_environments_with_env_concurrency(tiny_train_config, monkeypatch):
    seen = {}

    def fake_evaluate(*args, **kwargs):
        seen.update(kwargs)
        return {"mean": {"accuracy": 0.0}}

    monkeypatch.setattr("polyrl.train.evaluation.evaluate_policy", fake_evaluate)
    trainer = Trainer(tiny_train_config(**SETTINGS))
    trainer.evaluate("probe", log=False)
    assert seen["env_concurrency"] == 3 and seen["max_episode_tokens"] == 96


def test_rejection_sampling_samples_like_rl_with_its_own_group_size(tiny_train_config, monkeypatch):
    seen = []
    monkeypatch.setattr("polyrl.train.sft_data.rejection_samples", lambda *args: (seen.append(args[-1]), ([], 0.0))[1])
    trainer = Trainer(tiny_train_config(**SETTINGS))
    trainer.sft.rejection_round(0)
    assert seen == [Sampling(3, 7, 0.8, 0.9, 96, 3)]


def test_ray_workers_get_the_trainer_backend_settings_and_its_sampling(tiny_train_config, monkeypatch):
    built = {}

    class FakePool:
        def __init__(self, cfg, **kwargs):
            built.update(kwargs)

    monkeypatch.setattr("polyrl.distributed.pool.RolloutPool", FakePool)
    trainer = Trainer(tiny_train_config(backend="ray", **SETTINGS))
    assert built["backend_options"] == {"batch_size": 5, "shared_prefill": False}
    assert trainer.parts.source.sampling == EXPECTED


def test_a_ray_worker_builds_its_backend_with_the_options_it_was_given(monkeypatch):
    pytest.importorskip("ray")
    from polyrl.distributed.workers import RolloutWorker
    from polyrl.policy import TransformersBackend
    from polyrl.policy.loading import ModelConfig
    from polyrl.policy.prompts import PromptConfig

    task = get_task("addition")
    model = ModelConfig(
        path="tiny", tiny={"hidden_size": 16, "intermediate_size": 32, "num_layers": 1, "num_heads": 2}
    )
    worker = RolloutWorker(model, 0, PromptConfig(field="question"), {"addition": task}, [], 2, 1, {"batch_size": 3})
    monkeypatch.setattr(worker, "_model", lambda version, weights: worker.policy.model)
    made = []

    class Spy(TransformersBackend):
        def __init__(self, *args, **kwargs):
            made.append(kwargs)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr("polyrl.policy.TransformersBackend", Spy)
    trajs = worker.rollout(task.generate(0, "easy"), 0, [None], sampling(2, 4))
    assert made == [{"device": worker.policy.device, "batch_size": 3}]  # the worker's device and the options
    assert len(trajs) == 2 and all(t.verdict is None for t in trajs)


def test_the_difficulty_default_has_one_home():
    assert TaskSpec(name="addition").difficulty == DEFAULT_DIFFICULTY
    for generate in (Task.generate, DatasetTask.generate, WrappedTask.generate):
        assert inspect.signature(generate).parameters["difficulty"].default == DEFAULT_DIFFICULTY
    task = get_task("addition")
    assert task.generate(0) == task.generate(0, DEFAULT_DIFFICULTY)
