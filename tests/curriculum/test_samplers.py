"""Task samplers: weights from hand-computed numbers, bad options as one-line user errors, saved state."""

import math

import numpy as np
import pytest

from polyrl.cli import run as cli
from polyrl.curriculum import make_sampler
from polyrl.errors import UserError

TASKS = ["a", "b"]


def test_uniform_gives_every_task_the_same_weight():
    assert make_sampler("uniform", ["a", "b", "c", "d"]).weights().tolist() == [0.25] * 4


def test_weighted_normalises_a_mapping_and_leaves_missing_tasks_at_zero():
    s = make_sampler("weighted", ["a", "b", "c"], {"weights": {"a": 3, "b": 1}})
    assert s.weights().tolist() == [0.75, 0.25, 0.0]


@pytest.mark.parametrize(
    "weights, message",
    [
        ({"a": -1, "b": 2}, "non-negative"),
        ({"a": 0, "b": 0}, "sum to zero"),
        ({"z": 1}, "unknown task"),
        ([1], "1 values for 2"),
    ],
)
def test_weighted_rejects_bad_weights(weights, message):
    with pytest.raises(UserError, match=message):
        make_sampler("weighted", TASKS, {"weights": weights})


def test_unknown_sampler_and_unknown_option_are_user_errors():
    with pytest.raises(UserError, match="unknown sampler 'nope'"):
        make_sampler("nope", TASKS)
    with pytest.raises(UserError, match="no option"):
        make_sampler("learning_progress", TASKS, {"speed": 1})


def test_success_temperature_is_a_softmax_of_negative_success():
    s = make_sampler("success_temperature", TASKS, {"temperature": 0.5, "ema": 1.0, "epsilon": 0.0})
    s.update("a", [1.0, 1.0])
    s.update("b", [0.0, 0.0])
    # exp(-1/0.5) : exp(0)
    assert s.weights() == pytest.approx([math.exp(-2) / (1 + math.exp(-2)), 1 / (1 + math.exp(-2))])


def test_learning_progress_is_the_gap_between_fast_and_slow_success_averages():
    s = make_sampler("learning_progress", TASKS, {"fast": 0.5, "slow": 0.1, "epsilon": 0.2})
    for score in (0.0, 1.0):  # a: fast 0.5, slow 0.1 -> progress 0.4
        s.update("a", [score])
    for _ in range(2):  # b: flat at 0 -> progress 0
        s.update("b", [0.0])
    assert s.progress() == pytest.approx([0.4, 0.0])
    assert s.weights() == pytest.approx([0.1 + 0.8, 0.1])  # epsilon / n + (1 - epsilon) * share


def test_learning_progress_tries_unseen_tasks_first():
    s = make_sampler("learning_progress", TASKS, {"epsilon": 0.0})
    s.update("a", [1.0])
    assert s.weights().tolist() == [0.0, 1.0]


def test_success_band_prefers_tasks_inside_the_band():
    s = make_sampler("success_band", TASKS, {"low": 0.2, "high": 0.8, "width": 0.1, "ema": 1.0, "epsilon": 0.0})
    s.update("a", [1.0])  # 0.2 above the band -> exp(-2)
    s.update("b", [1.0, 0.0])  # inside -> 1
    assert s.weights() == pytest.approx([math.exp(-2) / (1 + math.exp(-2)), 1 / (1 + math.exp(-2))])


@pytest.mark.parametrize(
    "options, message",
    [({"low": 0.8, "high": 0.2}, "above high"), ({"low": -0.1}, "outside"), ({"high": 1.5}, "outside")],
)
def test_success_band_rejects_bad_bands(options, message):
    with pytest.raises(UserError, match=message):
        make_sampler("success_band", TASKS, options)


def test_staged_follows_the_step_and_replays_earlier_tasks():
    s = make_sampler(
        "staged", ["a", "b", "c"], {"stages": [{"tasks": ["a"], "until": 10}, {"tasks": ["b", "c"]}], "replay": 0.2}
    )
    s.set_step(9)
    assert s.weights().tolist() == [1.0, 0.0, 0.0]
    s.set_step(10)
    assert s.weights() == pytest.approx([0.2, 0.4, 0.4])


@pytest.mark.parametrize(
    "stages, message",
    [
        ([{"tasks": ["a"], "until": 5}, {"tasks": ["zz"]}], "unknown task"),
        ([{"tasks": ["a"], "until": 5}, {"tasks": ["b"], "until": 5}, {"tasks": ["a"]}], "after the previous"),
        ([{"tasks": ["a"]}, {"tasks": ["b"]}], "needs until"),
    ],
)
def test_staged_rejects_bad_schedules(stages, message):
    with pytest.raises(UserError, match=message):
        make_sampler("staged", TASKS, {"stages": stages})


@pytest.mark.parametrize("name", ["success_temperature", "learning_progress", "success_band", "staged"])
def test_sampler_state_round_trips(name):
    options = {"stages": [{"tasks": ["a"], "until": 2}, {"tasks": ["b"]}]} if name == "staged" else {}
    s = make_sampler(name, TASKS, options)
    rng = np.random.default_rng(0)
    for step in range(5):
        s.set_step(step)
        for task in s.sample(3, rng):
            s.update(task, rng.random(4).round().tolist())
    fresh = make_sampler(name, TASKS, options)
    fresh.load_state_dict(s.state_dict())
    assert fresh.weights().tolist() == s.weights().tolist()


def test_bad_sampler_in_a_config_exits_2_before_training(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("tasks: [addition]\nsampler: {name: success_band, options: {low: 0.9, high: 0.1}}\n")
    assert cli(["train", "--config", str(cfg), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "above high" in err
    assert not (tmp_path / "run").exists()
