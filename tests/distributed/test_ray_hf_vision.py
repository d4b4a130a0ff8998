"""Hugging Face vision-language policies (the small random-initialised Idefics3 and Qwen2-VL of
``tests/small_vlms.py``) on Ray rollout workers: the pictures travel to the workers and back, the weight sync carries
the vision tower and the LoRA adapters, the workers' behaviour log-probs (plain and top-p, single-turn and
crop-and-zoom episodes) equal the learner's training forward, and a visual config trains end to end."""

import copy
import json
import sys

import pytest
import torch

ray = pytest.importorskip("ray")

import zoom_env  # noqa: E402
from rollout_sampling import sampling  # noqa: E402
from small_vlms import save_idefics3, save_qwen2_vl  # noqa: E402

from polyrl.forward import sequence_logprobs  # noqa: E402
from polyrl.forward.batch import ImageIds  # noqa: E402
from polyrl.learner.update_batch import collate_trajectories  # noqa: E402

FAMILIES = {"idefics3": (save_idefics3, {}), "qwen2_vl": (save_qwen2_vl, {"images": {"size": 16}})}


def odd_length(response):
    """A reward that differs within a group of random completions, so that every step has something to train on."""
    return float(len(response) % 2)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(zoom_env)  # the zoom environment, on the actors
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.shutdown()


@pytest.fixture(scope="module", params=list(FAMILIES))
def vlm(request, tmp_path_factory):
    """``(family, model section)`` of a saved small VLM of each family."""
    save, extra = FAMILIES[request.param]
    return request.param, {"path": str(save(tmp_path_factory.mktemp(request.param) / "model")), **extra}


@pytest.fixture
def visual_config(tiny_train_config, vlm):
    def make(model=None, **updates):
        return tiny_train_config(
            model={**vlm[1], **(model or {})},
            tasks=[{"name": "count_shapes", "difficulty": "easy"}, {"name": "bar_tallest", "difficulty": "easy"}],
            backend="ray",
            threads=1,
            **updates,
        )

    return make


def _perturbed(model) -> None:
    """Move the vision tower's weights and every LoRA adapter's away from the workers' own initialisation: only a
    weight sync that carries them makes the workers' log-probs equal the trainer's."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "vision" in name or "visual" in name or "lora_" in name:
                p.add_(torch.randn(p.shape, generator=generator) * 0.5)


def _learner_logprobs(model, group, pad_id, temperature):
    batch = collate_trajectories(group, pad_id)
    with torch.no_grad():
        logp, _ = sequence_logprobs(model.eval(), batch, temperature)
    return [logp[i, len(t.prompt_ids) - 1 : len(t.prompt_ids) - 1 + len(t.response_ids)] for i, t in enumerate(group)]


def _worker_group(trainer, problem, sampling_, perturb: bool = False):
    """One group of ``problem`` from a Ray rollout worker, after a weight sync of the trainer's policy (its vision
    tower and adapters moved first when ``perturb``); the pool shut down."""
    pool, model = trainer.parts.rollout_pool, trainer.parts.policy.model
    try:
        if perturb:
            _perturbed(model)
        pool.sync_weights(model, 3)
        (group,) = pool.groups(1, lambda n: [problem] * n, sampling_)
    finally:
        pool.shutdown()
    return group


@pytest.mark.parametrize("lora", [False, True])
def test_worker_logprobs_with_pictures_equal_the_learners_forward_after_a_weight_sync(local_ray, visual_config, lora):
    from polyrl.train.trainer import Trainer

    model_section = {"lora": {"enabled": True, "r": 4}} if lora else {}
    trainer = Trainer(visual_config(model=model_section, ray={"num_rollout_workers": 1}))
    model, pad_id = trainer.parts.policy.model, trainer.parts.policy.tokenizer.pad_token_id
    initial = copy.deepcopy(model)
    problem = trainer.parts.mix.tasks["count_shapes"].generate(0, "easy")
    group = _worker_group(trainer, problem, sampling(3, 6), perturb=True)
    shown = trainer.parts.prompts.ids(problem)
    for t, expected in zip(group, _learner_logprobs(model, group, pad_id, 1.0), strict=True):
        assert isinstance(t.prompt_ids, ImageIds) and t.prompt_ids == shown
        assert torch.equal(t.prompt_ids.pixels, shown.pixels) and t.policy_version == 3
        torch.testing.assert_close(torch.tensor(t.behaviour_logprobs), expected)
    unsynced = _learner_logprobs(initial, group, pad_id, 1.0)  # the workers' own vision tower and adapters
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


def test_a_zoom_episode_on_workers_reaches_the_learner_and_scores_as_the_worker_did(local_ray, vlm):
    from polyrl.device import HOST
    from polyrl.distributed.pool import RolloutPool
    from polyrl.distributed.ray_config import RayConfig
    from polyrl.policy import load_policy
    from polyrl.policy.loading import ModelConfig
    from polyrl.policy.prompts import PromptConfig
    from polyrl.tasks import get_task

    model_config = ModelConfig(**vlm[1])
    task = zoom_env.ZoomTask(get_task("count_shapes"), 3)
    pool = RolloutPool(
        RayConfig(num_rollout_workers=1, num_env_workers=1),
        model_config=model_config,
        seed=0,
        prompt_config=PromptConfig(field="question"),
        tasks={task.name: task},
    )
    policy = load_policy(model_config, seed=0, device=HOST)
    try:
        _perturbed(policy.model)
        pool.sync_weights(policy.model, 0)
        problem = task.generate(0, "easy")
        (group,) = pool.groups(1, lambda n: [problem] * n, sampling(2, 5, max_episode_tokens=400))
    finally:
        pool.shutdown()
    images = policy.image_input
    for t in group:
        assert isinstance(t.response_ids, ImageIds) and t.response_ids.pixels.shape == (2, images.size, images.size, 3)
        assert [m for i, m in zip(t.response_ids, t.policy_mask) if i == images.token_id] == [0] * (2 * images.tokens)
    learner = _learner_logprobs(policy.model, group, policy.tokenizer.pad_token_id, 1.0)
    for t, expected in zip(group, learner, strict=True):
        torch.testing.assert_close(torch.tensor(t.behaviour_logprobs), expected)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_visual_config_trains_on_ray_rollout_workers(local_ray, visual_config, asynchronous):
    from polyrl.train.trainer import Trainer

    cfg = visual_config(
        ray={"num_rollout_workers": 2, "async": asynchronous, "max_staleness": 1},
        rl={"steps": 2, "prompts_per_step": 2, "group_size": 2, "max_new_tokens": 6, "dynamic_sampling": False},
        reward={"terms": [{"fn": "test_ray_hf_vision:odd_length", "weight": 1.0}]},
        sft={"steps": 1, "batch_size": 4},
        eval={"problems_per_task": 2},
    )
    trainer = Trainer(cfg)
    trainer.run()
    lines = (trainer.parts.run_dir.path / "metrics.jsonl").read_text().splitlines()
    records = [r for r in map(json.loads, lines) if r["stage"] == "rl"]
    assert len(records) == 2 and sum(r["updates"] for r in records) > 0
    assert all(r["samples"] and all(s["images"] for s in r["samples"]) for r in records)
    trained = [r for r in records if r["updates"] and r["staleness_max"] == 0]
    assert trained  # a step trained on the weights that sampled it: behaviour and learner agree
    for r in trained:
        assert r["tis_weight_mean"] == pytest.approx(1.0, abs=1e-4) and r["tis_truncated_fraction"] == 0
    stats = trainer.parts.rollout_pool.stats
    assert stats.failed_groups == 0 and stats.task_errors == 0
