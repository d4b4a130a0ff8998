"""A task whose problems carry images is refused, in one line before training or evaluating, for a model that takes
text only: the embedded tiny model takes text only unless its patch encoder is on (``model.tiny.vision``,
tests/policy/test_tiny_vision.py), and a Hugging Face causal LM takes text only (its vision-language models take both:
tests/policy/test_hf_vision.py)."""

import json

import pytest

from polyrl.cli import run
from polyrl.device import HOST
from polyrl.errors import UserError
from polyrl.policy.loading import ModelConfig, load_policy
from polyrl.tasks import get_task, resolve_task
from polyrl.tasks.base import TEXT_AND_IMAGES, TEXT_ONLY, check_modalities

TINY_SHAPE = {"hidden_size": 16, "intermediate_size": 32, "num_layers": 1, "num_heads": 2}


def test_a_task_with_images_is_refused_for_a_text_model():
    tasks = {"addition": get_task("addition"), "count_shapes": get_task("count_shapes")}
    with pytest.raises(UserError) as caught:
        check_modalities(tasks, TEXT_ONLY, "tiny")
    assert str(caught.value) == "task count_shapes has images; model tiny takes text only"


def test_a_model_that_takes_images_takes_every_task():
    tasks = {"addition": get_task("addition"), "count_shapes": get_task("count_shapes")}
    check_modalities(tasks, TEXT_AND_IMAGES, "a-vlm")


def test_an_environment_over_a_visual_task_shows_its_images():
    task = resolve_task("env/retry:bar_value")
    assert task.modalities == TEXT_AND_IMAGES and len(task.generate(0).images) == 1


def test_the_default_tiny_model_takes_text_only():
    policy = load_policy(
        ModelConfig(tiny={"hidden_size": 16, "intermediate_size": 32, "num_layers": 1, "num_heads": 2}), device=HOST
    )
    assert policy.modalities == TEXT_ONLY


def test_train_refuses_a_visual_task_for_the_tiny_model_in_one_line(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"tasks": ["countdown", "env/retry:jigsaw"], "run_dir": str(tmp_path / "run")}))
    assert run(["train", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["polyrl: error: task env/retry:jigsaw has images; model tiny takes text only"]
    assert not (tmp_path / "run" / "config.yaml").exists() and not (tmp_path / "run" / "metrics.jsonl").exists()


def test_eval_refuses_a_visual_task_for_a_text_checkpoint_in_one_line(tmp_path, capsys):
    model = tmp_path / "model"
    load_policy(
        ModelConfig(tiny={"hidden_size": 16, "intermediate_size": 32, "num_layers": 1, "num_heads": 2}), device=HOST
    ).save(model)
    argv = [
        "eval",
        "--model",
        str(model),
        "--tasks",
        "addition,read_expression",
        "--n",
        "2",
        "--out",
        str(tmp_path / "e"),
    ]
    assert run(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"polyrl: error: task read_expression has images; model checkpoint {model} takes text only"]
    assert not (tmp_path / "e" / "samples.jsonl").exists()


def test_train_takes_a_visual_task_for_the_tiny_model_with_its_encoder(tmp_path):
    config = {
        "tasks": [{"name": "count_shapes", "difficulty": "easy"}],
        "model": {"tiny": {**TINY_SHAPE, "vision": {"enabled": True, "image_size": 16, "heads": 2}}},
        "prompt": {"field": "question"},
        "sft": {"steps": 2, "batch_size": 4},
        "rl": {"steps": 1, "prompts_per_step": 2, "group_size": 2, "max_new_tokens": 6, "dynamic_sampling": False},
        "eval": {"problems_per_task": 2},
        "run_dir": str(tmp_path / "run"),
        "threads": 1,
    }
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(config))
    assert run(["train", "--config", str(path)]) == 0
    back = load_policy(ModelConfig(path=str(tmp_path / "run" / "final_model")), device=HOST)
    assert back.modalities == TEXT_AND_IMAGES


def test_eval_takes_a_visual_task_for_a_saved_tiny_vision_model(tmp_path):
    model = tmp_path / "model"
    vision = {"enabled": True, "image_size": 16, "heads": 2}
    load_policy(ModelConfig(tiny={**TINY_SHAPE, "vision": vision}), device=HOST).save(model)
    argv = ["eval", "--model", str(model), "--tasks", "count_shapes", "--n", "2", "--out", str(tmp_path / "e")]
    assert run(argv) == 0
    records = [json.loads(line) for line in (tmp_path / "e" / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["images"] for r in records)
