"""The difficulty controller: a staircase on each task's knob, its config checks, and its trainer wiring."""

import pytest

from polyrl.curriculum import DifficultyController, make_difficulty_controller
from polyrl.errors import UserError
from polyrl.tasks import get_task
from polyrl.train.checkpoint import latest_checkpoint
from polyrl.train.config import load_config
from polyrl.train.trainer import Trainer

BAND = {"target_low": 0.25, "target_high": 0.75, "step_size": 0.1, "window": 4, "max_difficulty": 1.0}


def controller(**kw):
    return DifficultyController({"a": 0.5}, **{"min_difficulty": 0.0, **BAND, **kw})


def test_knob_rises_after_a_window_above_the_band():
    c = controller()
    c.update("a", [1, 1])
    assert c.difficulty("a") == 0.5  # window not full yet
    c.update("a", [1, 0])  # 3/4 = 0.75: not above
    assert c.difficulty("a") == 0.5
    c.update("a", [1, 1, 1, 1])
    assert c.difficulty("a") == pytest.approx(0.6)


def test_knob_falls_below_the_band_and_stops_at_its_bounds():
    c = controller(min_difficulty=0.35)
    for _ in range(3):
        c.update("a", [0, 0, 0, 0])
    assert c.difficulty("a") == pytest.approx(0.35)
    assert c.pass_rate["a"] == 0.0


def test_uncontrolled_tasks_keep_their_configured_difficulty():
    c = DifficultyController({"a": 0.0}, min_difficulty=0.0, fixed={"b": "hard"}, **BAND)
    c.update("b", [1] * 100)
    assert c.difficulty("b") == "hard"


def test_state_round_trips():
    c = controller()
    c.update("a", [1, 1, 1, 1, 1])
    fresh = controller()
    fresh.load_state_dict(c.state_dict())
    assert fresh.state_dict() == c.state_dict()


@pytest.mark.parametrize(
    "section, message",
    [
        ("{enabled: true, target_low: 0.9, target_high: 0.1}", "above target_high"),
        ("{enabled: true, target_high: 1.5}", "less than or equal to 1"),
        ("{enabled: true, min_difficulty: 0.8, max_difficulty: 0.2}", "above max_difficulty"),
    ],
)
def test_bad_bands_are_config_errors(tmp_path, section, message):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"tasks: [addition]\ndifficulty_control: {section}\n")
    with pytest.raises(UserError, match=message):
        load_config(cfg)


def test_controller_refuses_unknown_tasks_and_explicit_parameters():
    tasks = {"addition": get_task("addition")}
    cfg = load_config(
        None, base={"tasks": ["addition"], "difficulty_control": {"enabled": True, "tasks": ["sort_digits"]}}
    )
    with pytest.raises(UserError, match="not in the mix"):
        make_difficulty_controller(cfg.difficulty_control, tasks, {s.name: s for s in cfg.tasks})
    cfg = load_config(
        None,
        base={"tasks": [{"name": "addition", "difficulty": {"digits": 3}}], "difficulty_control": {"enabled": True}},
    )
    with pytest.raises(UserError, match="explicit difficulty parameters"):
        make_difficulty_controller(cfg.difficulty_control, tasks, {s.name: s for s in cfg.tasks})


def test_trainer_moves_logs_and_checkpoints_the_knob(tmp_path):
    cfg = load_config(
        None,
        base={
            "run_dir": str(tmp_path / "run"),
            "model": {"path": "tiny"},
            "prompt": {"field": "question"},
            "threads": 1,
            "tasks": [{"name": "addition", "difficulty": 0.5}],
            "tensorboard": False,
            "progress": False,
            "sft": {"enabled": False},
            "eval": {"problems_per_task": 2, "pass_k": 1},
            "rl": {"steps": 3, "prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4, "dynamic_sampling": False},
            # an untrained policy never reaches a pass rate of 1: every window lowers the knob
            "difficulty_control": {
                "enabled": True,
                "target_low": 1.0,
                "target_high": 1.0,
                "step_size": 0.1,
                "window": 4,
            },
        },
    )
    trainer = Trainer(cfg)
    trainer.run()
    rl = [r for r in trainer.parts.run_dir.read_metrics() if r["stage"] == "rl"]
    assert [round(r["difficulty/addition"], 6) for r in rl] == [0.4, 0.3, 0.2]
    assert rl[-1]["sampler_weight/addition"] == 1.0
    ckpt = latest_checkpoint(trainer.parts.run_dir.checkpoints)
    assert ckpt.state["difficulty"]["knobs"] == pytest.approx({"addition": 0.2})
