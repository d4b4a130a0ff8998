"""Vision-language policies on Ray rollout workers — the embedded tiny VLM and the small random-initialised Idefics3
and Qwen2-VL of ``tests/small_vlms.py``: the pictures travel to the workers and back with the prompts, the weight
sync carries the vision tower (the tiny VLM's patch encoder) and the LoRA adapters, the workers' behaviour log-probs
(plain and top-p, single-turn and crop-and-zoom episodes) equal the learner's training forward, and a visual config
trains end to end."""

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
FAMILIES = {
    "tiny": lambda folder: TINY_VLM,
    "idefics3": lambda folder: {"path": str(save_idefics3(folder / "model"))},
    "qwen2_vl": lambda folder: {"path": str(save_qwen2_vl(folder / "model")), "images": {"size": 16}},
}
"""Each family's ``model`` section (a Hugging Face one saved in ``folder`` first)."""
ZOOM = {"tiny": (2, 6, 200), "idefics3": (3, 5, 400), "qwen2_vl": (3, 5, 400)}
"""Each family's crop-and-zoom episodes: (turns, new tokens a turn, tokens an episode)."""
TRAINING = {
    "tiny": {"rl": {"steps": 3, "group_size": 4, "max_new_tokens": 8}, "sft": {"steps": 2}},
    "hf": {
        "rl": {"steps": 2, "group_size": 2, "max_new_tokens": 6},
        "sft": {"steps": 1},
        "eval": {"problems_per_task": 2},
    },
}
"""The end-to-end run's sizes: the tiny VLM's, and the (slower) Hugging Face ones'."""


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(zoom_env)  # the zoom environment, on the actors
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.shutdown()


@pytest.fixture(scope="module", params=list(FAMILIES))
def vlm(request, tmp_path_factory):
    """``(family, model section)`` of a VLM of each family."""
    return request.param, FAMILIES[request.param](tmp_path_factory.mktemp(request.param))


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


@pytest.mark.parametrize("vlm", ["tiny"], indirect=True)
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


@pytest.mark.parametrize(
    ("vlm", "lora"),
    [("tiny", False), ("idefics3", False), ("idefics3", True), ("qwen2_vl", False), ("qwen2_vl", True)],
    indirect=["vlm"],
)
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


@pytest.mark.parametrize("vlm", ["tiny"], indirect=True)
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
def test_a_visual_config_trains_on_ray_rollout_workers(local_ray, visual_config, vlm, asynchronous):
    from polyrl.train.trainer import Trainer

    run = TRAINING["tiny" if vlm[0] == "tiny" else "hf"]
    cfg = visual_config(
        ray={"num_rollout_workers": 2, "async": asynchronous, "max_staleness": 1},
        rl={"prompts_per_step": 2, "dynamic_sampling": False, **run["rl"]},
        reward={"terms": [{"fn": "signal_rewards:distinct_text", "weight": 1.0}]},
        sft={"batch_size": 4, **run["sft"]},
        **({"eval": run["eval"]} if "eval" in run else {}),
    )
    trainer = Trainer(cfg)
    trainer.run()
    lines = (trainer.parts.run_dir.path / "metrics.jsonl").read_text().splitlines()
    records = [r for r in map(json.loads, lines) if r["stage"] == "rl"]
    assert len(records) == run["rl"]["steps"] and sum(r["updates"] for r in records) > 0
    assert all(r["samples"] and all(s["images"] for s in r["samples"]) for r in records)
    trained = [r for r in records if r["updates"] and r["staleness_max"] == 0]
    assert trained  # a step trained on the weights that sampled it: behaviour and learner agree
    for r in trained:
        assert r["tis_weight_mean"] == pytest.approx(1.0, abs=1e-4) and r["tis_truncated_fraction"] == 0
    stats = trainer.parts.rollout_pool.stats
    assert stats.failed_groups == 0 and stats.task_errors == 0


def test_a_zoom_episode_on_workers_reaches_the_learner_and_scores_as_the_worker_did(local_ray, vlm):
    from polyrl.device import HOST
    from polyrl.distributed.pool import RolloutPool
    from polyrl.distributed.ray_config import RayConfig
    from polyrl.policy import load_policy
    from polyrl.policy.loading import ModelConfig
    from polyrl.policy.prompts import PromptConfig
    from polyrl.tasks import get_task

    turns, max_new_tokens, max_episode_tokens = ZOOM[vlm[0]]
    model_config = ModelConfig(**vlm[1])
    task = zoom_env.ZoomTask(get_task("count_shapes"), turns)
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
        episodes = sampling(2, max_new_tokens, max_episode_tokens=max_episode_tokens)
        (group,) = pool.groups(1, lambda n: [problem] * n, episodes)
        assert ray.get(pool.env_workers[0].counts.remote())["started"] == 2
    finally:
        pool.shutdown()
    images, image_id, shown = policy.image_input, policy.model.config.image_token_id, turns - 1
    for t in group:
        assert isinstance(t.response_ids, ImageIds) and t.response_ids.pixels.shape == (
            shown,
            images.size,
            images.size,
            3,
        )
        assert [m for i, m in zip(t.response_ids, t.policy_mask) if i == image_id] == [0] * (shown * images.tokens)
    learner = _learner_logprobs(policy.model, group, policy.tokenizer.pad_token_id, 1.0)
    for t, expected in zip(group, learner, strict=True):
        torch.testing.assert_close(torch.tensor(t.behaviour_logprobs), expected)
