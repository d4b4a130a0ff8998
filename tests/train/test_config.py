"""The training config: validation, overrides, one-line errors, generated reference."""

from pathlib import Path

import pytest

from polyrl import UserError
from polyrl.cli import run
from polyrl.train.config import load_config
from polyrl.train.config_docs import config_reference

DEFAULT = Path(__file__).parents[2] / "src" / "polyrl" / "configs" / "default.yaml"


def test_default_config_is_valid_and_has_six_tasks_from_four_categories():
    from polyrl.tasks import get_task

    cfg = load_config(DEFAULT)
    assert len(cfg.tasks) >= 6
    assert len({get_task(t.name).category for t in cfg.tasks}) >= 4


def test_dotted_overrides_are_parsed_as_yaml():
    cfg = load_config(DEFAULT, ["rl.steps=7", "rl.task_normalize=true", "tasks=[addition, caesar]", "seed=3"])
    assert (cfg.rl.steps, cfg.rl.task_normalize, cfg.seed) == (7, True, 3)
    assert [t.name for t in cfg.tasks] == ["addition", "caesar"]


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["rl.stepz=3"], "rl.stepz: unknown option"),
        (["rl.steps=-1"], "rl.steps"),
        (["rl.steps"], "not of the form key=value"),
        (["tasks=[]"], "tasks"),
        (["tasks=[addition, addition]"], "listed twice"),
    ],
)
def test_bad_overrides_are_one_line_user_errors(overrides, message):
    with pytest.raises(UserError, match=message) as err:
        load_config(DEFAULT, overrides)
    assert "\n" not in str(err.value)


def test_malformed_yaml_names_the_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tasks: [addition\nrl: {steps: 3}\n")
    with pytest.raises(UserError, match="not valid YAML"):
        load_config(bad)


def test_missing_config_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="cannot read config"):
        load_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    "args,message",
    [
        (["tasks=[additon]"], "unknown task 'additon'"),
        (["rl.advantage=ppo2"], "unknown advantage estimator"),
        (["rl.loss_aggregation=sum"], "aggregation"),
        (["sampler.name=nope"], "unknown sampler"),
        (["tasks=[{name: addition, difficulty: extreme}]"], "unknown difficulty"),
        (["model.path=/definitely/not/here"], "not a directory"),
    ],
)
def test_cli_rejects_bad_input_before_training(tmp_path, capsys, args, message):
    code = run(["train", "--run-dir", str(tmp_path / "run"), *args])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_model_path_that_is_not_a_causal_lm(tmp_path, capsys):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"model_type": "vit"}')
    assert run(["train", "--run-dir", str(tmp_path / "run"), f"model.path={tmp_path / 'm'}"]) == 2
    assert "not a causal language model" in capsys.readouterr().err


def test_unwritable_run_dir(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert run(["train", "--run-dir", str(blocker / "run")]) == 2
    assert "not writable" in capsys.readouterr().err


def test_existing_run_is_never_overwritten(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("seed: 1\n")
    assert run(["train", "--run-dir", str(tmp_path / "run")]) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert (tmp_path / "run" / "config.yaml").read_text() == "seed: 1\n"


def test_config_reference_in_docs_is_up_to_date():
    docs = Path(__file__).parents[2] / "docs" / "config.md"
    assert docs.read_text() == config_reference()
