"""``polyrl train`` and ``polyrl eval`` with a Hugging Face vision-language policy on a visual task, end to end
through the CLI, for both families of small random-initialised models (``tests/small_vlms.py``): an SFT warm start
and a GRPO step run, the final model is a Hugging Face checkpoint with its processor beside it that loads and
evaluates again, and what a single process cannot run is refused in one line."""

import json

import pytest
from small_vlms import save_idefics3, save_qwen2_vl

from polyrl.cli import run
from polyrl.device import HOST
from polyrl.policy.loading import ModelConfig, load_policy
from polyrl.tasks.base import TEXT_AND_IMAGES

FAMILIES = {"idefics3": (save_idefics3, {}), "qwen2_vl": (save_qwen2_vl, {"images": {"size": 16}})}


def _config(tmp_path, family: str, **model) -> str:
    save, extra = FAMILIES[family]
    config = {
        "tasks": [{"name": "count_shapes", "difficulty": "easy"}, {"name": "addition", "difficulty": "easy"}],
        "model": {"path": str(save(tmp_path / family)), **extra, **model},
        "prompt": {"field": "question"},
        "sft": {"steps": 2, "batch_size": 4, "micro_batch_tokens": 64},
        "rl": {
            "steps": 1,
            "prompts_per_step": 2,
            "group_size": 2,
            "max_new_tokens": 6,
            "dynamic_sampling": False,
            "micro_batch_tokens": 64,
        },
        "eval": {"problems_per_task": 2},
        "run_dir": str(tmp_path / "run"),
        "threads": 1,
    }
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("lora", [False, True])
def test_train_runs_sft_and_rl_on_a_visual_task_and_the_final_model_reloads(tmp_path, family, lora):
    model = {"lora": {"enabled": True, "r": 4}} if lora else {}
    assert run(["train", "--config", _config(tmp_path, family, **model)]) == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("stage") == "sft" for r in records) and any(r.get("stage") == "rl" for r in records)
    final = tmp_path / "run" / "final_model"
    back = load_policy(ModelConfig(path=str(final)), device=HOST)  # the picture size the run trained with
    assert back.modalities == TEXT_AND_IMAGES and back.image_input.tokens == 4


def test_eval_takes_a_visual_task_for_a_saved_vision_language_model(tmp_path):
    model = save_idefics3(tmp_path / "model")
    argv = ["eval", "--model", str(model), "--tasks", "count_shapes", "--n", "2", "--out", str(tmp_path / "e")]
    assert run(argv) == 0
    records = [json.loads(line) for line in (tmp_path / "e" / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["images"] for r in records)


def test_eval_takes_a_run_s_saved_model_at_the_picture_size_it_trained_with(tmp_path):
    assert run(["train", "--config", _config(tmp_path, "qwen2_vl"), "rl.steps=0", "sft.steps=1"]) == 0
    final = tmp_path / "run" / "sft_model"
    argv = ["eval", "--model", str(final), "--tasks", "count_shapes", "--n", "2", "--out", str(tmp_path / "e")]
    assert run(argv) == 0
    records = [json.loads(line) for line in (tmp_path / "e" / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["images"] for r in records)


def test_nproc_is_refused_for_a_vision_language_model_in_one_line(tmp_path, capsys):
    config = _config(tmp_path, "idefics3")
    capsys.readouterr()  # what saving the model printed
    assert run(["train", "--config", config, "--nproc", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"polyrl: error: --nproc: {tmp_path / 'idefics3'} is a Hugging Face vision-language model, which trains in "
        "one process only"
    ]
    assert not (tmp_path / "run").exists()


def test_the_packed_forward_is_refused_for_a_vision_language_model_in_one_line(tmp_path, capsys):
    config = _config(tmp_path, "qwen2_vl", forward="packed")
    capsys.readouterr()
    assert run(["train", "--config", config]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.forward: packed cannot run" in err[0]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_whole_run_keeps_every_tensor_on_the_placements_device(tmp_path, family):
    """SFT, RL and both evaluations of a vision-language policy under the device guard (``tests/device_guard.py``):
    its pictures, positions and blocked tokens go where the model is, as on a GPU."""
    from device_guard import DEVICE, on_device, second_device

    from polyrl.train.config import load_config
    from polyrl.train.placement import LocalPlacement
    from polyrl.train.trainer import Trainer

    config = load_config(_config(tmp_path, family, lora={"enabled": True, "r": 4}), ["tensorboard=false"])
    with second_device() as guard:
        trainer = Trainer(config, placement=LocalPlacement(guard.device))
        assert trainer.parts.policy.device == DEVICE
        assert all(on_device(p) for p in trainer.parts.policy.model.parameters())
        results = trainer.run()
    assert set(results) >= {"after_sft", "after_rl"}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_train_runs_crop_and_zoom_episodes_whose_observations_show_pictures(tmp_path, family):
    """``polyrl train`` of an environment whose observation is a zoomed crop (``tests/zoom_env.py``): SFT on the
    visual task, then GRPO steps on its crop-and-zoom episodes, each of which saw the zoomed crop."""
    from zoom_env import registered_zoom

    tasks = "tasks=[{name: 'count_shapes', difficulty: easy}, {name: 'env/zoom:count_shapes', difficulty: easy}]"
    reward = "reward.terms=[{fn: 'signal_rewards:distinct_text', weight: 1.0}]"
    overrides = [tasks, reward, "rl.steps=2", "rl.max_new_tokens=4", "env.max_episode_tokens=200"]
    with registered_zoom():
        assert run(["train", "--config", _config(tmp_path, family), *overrides]) == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in records if r.get("stage") == "rl"]
    assert len(rl) == 2 and sum(r["updates"] for r in rl) > 0
    episodes = [s for r in rl for s in r["samples"] if s["task"] == "env/zoom:count_shapes"]
    assert episodes and all(s["images"] and "[user] zoomed" in s["completion"] for s in episodes)
