"""The embedded tiny vision-language model on Ray rollout workers: the pictures travel to the workers and back with
the prompts, the weights the workers sample with include the patch encoder's, the workers' behaviour log-probs equal
the learner's training forward, and a visual config trains end to end."""

import copy
import json
import sys

import numpy as np
import pytest
import torch

ray = pytest.importorskip("ray")

from rollout_sampling import sampling  # noqa: E402

from polyrl.envs.environment import Environment, StepResult  # noqa: E402
from polyrl.envs.wrapped import WrappedTask  # noqa: E402
from polyrl.forward import sequence_logprobs  # noqa: E402
from polyrl.forward.batch import ImageIds  # noqa: E402
from polyrl.learner.update_batch import collate_trajectories  # noqa: E402
from polyrl.policy.tiny_vision import IMAGE_TOKEN  # noqa: E402

TINY_VLM = {
    "path": "tiny",
    "tiny": {
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_layers": 1,
        "num_heads": 2,
        "vision": {"enabled": True, "image_size": 16, "heads": 2},
    },
}
"""A seconds-long tiny VLM: 16-pixel pictures of 4 squares of 8 pixels, so 4 placeholders a picture."""


def odd_length(response):
    """A reward that differs within a group of random completions, so that every step has something to train on
    (the verifier alone scores an untrained model's answers 0)."""
    return float(len(response) % 2)


class ZoomEnvironment(Environment):
    """First turn: any text, answered with the top-left quarter of the picture; second turn: the answer."""

    def reset(self):
        return [{"role": "user", "content": self.problem.prompt}]

    def step(self, action):
        self.turn += 1
        if self.turn == 1:
            pixels = np.asarray(self.problem.images[0])
            crop = pixels[: pixels.shape[0] // 2, : pixels.shape[1] // 2]
            return StepResult([{"role": "user", "content": "zoomed", "images": [crop]}], 0.0, False)
        return self.end(0.0, False, 0.0, "answered")


class ZoomTask(WrappedTask):
    name = "zoom:count_shapes"

    def make_env(self, problem):
        return ZoomEnvironment(problem, self.max_turns)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the zoom environment, on the actors
    yield
    ray.shutdown()


@pytest.fixture
def visual_config(tiny_train_config):
    def make(**updates):
        return tiny_train_config(
            model=TINY_VLM,
            tasks=[{"name": "count_shapes", "difficulty": "easy"}, {"name": "bar_tallest", "difficulty": "easy"}],
            backend="ray",
            **updates,
        )

    return make


def _perturbed_encoder(model) -> None:
    """Move the patch encoder's weights away from the workers' own initialisation: only a weight sync that carries
    them makes the workers' log-probs equal the trainer's."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.vision.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.5)


def _learner_logprobs(model, group, pad_id, temperature):
    batch = collate_trajectories(group, pad_id)
    with torch.no_grad():
        logp, _ = sequence_logprobs(model.eval(), batch, temperature)
    return [logp[i, len(t.prompt_ids) - 1 : len(t.prompt_ids) - 1 + len(t.response_ids)] for i, t in enumerate(group)]


def _worker_group(trainer, problem, sampling_, perturb: bool = False):
    """One group of ``problem`` from a Ray rollout worker, after a weight sync of the trainer's policy (its patch
    encoder moved first when ``perturb``); the pool shut down."""
    pool, model = trainer.parts.rollout_pool, trainer.parts.policy.model
    try:
        if perturb:
            _perturbed_encoder(model)
        pool.sync_weights(model, 3)
        (group,) = pool.groups(1, lambda n: [problem] * n, sampling_)
    finally:
        pool.shutdown()
    return group


def test_pictures_travel_to_the_workers_and_back_with_the_prompts(local_ray, visual_config):
    from polyrl.train.trainer import Trainer

    trainer = Trainer(visual_config(ray={"num_rollout_workers": 1}))
    problem = trainer.parts.mix.tasks["count_shapes"].generate(0, "easy")
    group = _worker_group(trainer, problem, sampling(3, 6))
    shown = trainer.parts.prompts.ids(problem)
    assert len(group) == 3
    for t in group:
        assert isinstance(t.prompt_ids, ImageIds) and t.prompt_ids == shown
        assert torch.equal(t.prompt_ids.pixels, shown.pixels) and t.prompt_ids.images_key == shown.images_key


def test_worker_logprobs_with_pictures_equal_the_learners_forward_after_a_weight_sync(local_ray, visual_config):
    from polyrl.train.trainer import Trainer

    trainer = Trainer(visual_config(ray={"num_rollout_workers": 1}))
    model, pad_id = trainer.parts.policy.model, trainer.parts.policy.tokenizer.pad_token_id
    initial = copy.deepcopy(model)
    problem = trainer.parts.mix.tasks["count_shapes"].generate(0, "easy")
    group = _worker_group(trainer, problem, sampling(3, 6), perturb=True)
    for t, expected in zip(group, _learner_logprobs(model, group, pad_id, 1.0), strict=True):
        assert t.policy_version == 3
        torch.testing.assert_close(torch.tensor(t.behaviour_logprobs), expected)
    unsynced = _learner_logprobs(initial, group, pad_id, 1.0)  # the workers' own encoder: other log-probs
    assert not all(torch.allclose(torch.tensor(t.behaviour_logprobs), u) for t, u in zip(group, unsynced))


def test_worker_nucleus_logprobs_with_pictures_are_the_trainers(local_ray, visual_config):
    from polyrl.device import HOST
    from polyrl.distributed.workers import behaviour_logprobs
    from polyrl.train.trainer import Trainer

    trainer = Trainer(visual_config(ray={"num_rollout_workers": 1}))
    model, pad_id = trainer.parts.policy.model, trainer.parts.policy.tokenizer.pad_token_id
    problem = trainer.parts.mix.tasks["bar_tallest"].generate(1, "easy")
    group = _worker_group(trainer, problem, sampling(3, 6, top_p=0.9, temperature=0.7), perturb=True)
    here = copy.deepcopy(group)
    behaviour_logprobs({3: model.eval()}, HOST, here, pad_id, 0.7, 0.9)
    for t, mine in zip(group, here, strict=True):
        torch.testing.assert_close(torch.tensor(t.behaviour_logprobs), torch.tensor(mine.behaviour_logprobs))
        assert all(lp <= 0 for lp in t.behaviour_logprobs)


def test_placeholders_of_returned_trajectories_are_masked_from_the_loss(local_ray, visual_config):
    from polyrl.train.trainer import Trainer

    trainer = Trainer(visual_config(ray={"num_rollout_workers": 1}))
    parts = trainer.parts
    try:
        parts.rollout_pool.sync_weights(parts.policy.model, 0)
        problem = parts.mix.tasks["bar_tallest"].generate(2, "easy")
        (group,) = parts.rollout_pool.groups(1, lambda n: [problem] * n, sampling(2, 6))
    finally:
        parts.rollout_pool.shutdown()
    batch = collate_trajectories(group, parts.policy.tokenizer.pad_token_id)
    placeholder = parts.policy.tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
    targets = batch.input_ids[:, 1:]
    assert int((batch.input_ids == placeholder).sum()) == 4 * len(group)  # one picture of 4 squares a row
    assert batch.loss_mask[targets == placeholder].sum() == 0
    assert batch.images is not None and all(row[0].shape == (1, 16, 16, 3) for row in batch.images)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_visual_config_trains_on_ray_rollout_workers(local_ray, visual_config, asynchronous):
    from polyrl.train.trainer import Trainer

    cfg = visual_config(
        ray={"num_rollout_workers": 2, "async": asynchronous, "max_staleness": 1},
        rl={"steps": 3, "prompts_per_step": 2, "group_size": 4, "max_new_tokens": 8, "dynamic_sampling": False},
        reward={"terms": [{"fn": "test_ray_vision:odd_length", "weight": 1.0}]},
        sft={"steps": 2, "batch_size": 4},
    )
    trainer = Trainer(cfg)
    trainer.run()
    lines = (trainer.parts.run_dir.path / "metrics.jsonl").read_text().splitlines()
    records = [r for r in map(json.loads, lines) if r["stage"] == "rl"]
    assert len(records) == 3 and sum(r["updates"] for r in records) > 0
    assert all(r["samples"] and all(s["images"] for s in r["samples"]) for r in records)
    trained = [r for r in records if r["updates"] and r["staleness_max"] == 0]
    assert trained  # a step trained on the weights that sampled it: behaviour and learner agree
    for r in trained:
        assert r["tis_weight_mean"] == pytest.approx(1.0, abs=1e-4) and r["tis_truncated_fraction"] == 0
    stats = trainer.parts.rollout_pool.stats
    assert stats.failed_groups == 0 and stats.task_errors == 0


def test_an_environment_worker_s_picture_reaches_the_learner_and_scores_as_the_worker_did(local_ray):
    from polyrl.device import HOST
    from polyrl.distributed.pool import RolloutPool
    from polyrl.distributed.ray_config import RayConfig
    from polyrl.policy import load_policy
    from polyrl.policy.loading import ModelConfig
    from polyrl.policy.prompts import PromptConfig
    from polyrl.tasks import get_task

    model_config = ModelConfig(**TINY_VLM)
    task = ZoomTask(get_task("count_shapes"), 2)
    pool = RolloutPool(
        RayConfig(num_rollout_workers=1, num_env_workers=1),
        model_config=model_config,
        seed=0,
        prompt_config=PromptConfig(field="question"),
        tasks={task.name: task},
    )
    policy = load_policy(model_config, seed=0, device=HOST)
    try:
        _perturbed_encoder(policy.model)
        pool.sync_weights(policy.model, 0)
        problem = task.generate(0, "easy")
        (group,) = pool.groups(1, lambda n: [problem] * n, sampling(2, 6, max_episode_tokens=200))
        assert ray.get(pool.env_workers[0].counts.remote())["started"] == 2
    finally:
        pool.shutdown()
    placeholder = policy.model.config.image_token_id
    for t in group:
        assert isinstance(t.response_ids, ImageIds) and t.response_ids.pixels.shape == (1, 16, 16, 3)
        assert [m for i, m in zip(t.response_ids, t.policy_mask) if i == placeholder] == [0] * 4
    learner = _learner_logprobs(policy.model, group, policy.tokenizer.pad_token_id, 1.0)
    for t, expected in zip(group, learner, strict=True):
        torch.testing.assert_close(torch.tensor(t.behaviour_logprobs), expected)
