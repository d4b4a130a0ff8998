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


def test_the_config_classes_are_the_default_job():
    """One home per default: the embedded default YAML changes only what it lists."""
    import yaml

    from polyrl.train.config import TrainConfig

    listed = yaml.safe_load(DEFAULT.read_text())
    from_yaml = load_config(DEFAULT).model_dump(mode="json")
    from_classes = TrainConfig(tasks=listed["tasks"], **{k: v for k, v in listed.items() if k != "tasks"})
    assert from_classes.model_dump(mode="json") == from_yaml
    assert set(listed) == {"model", "prompt", "tasks"}
    assert from_yaml["rl"]["steps"] == TrainConfig.model_fields["rl"].default_factory().steps


@pytest.mark.parametrize(
    "overrides,both",
    [
        (["rl.advantage=gae", "rl.task_normalize=true"], ("rl.task_normalize", "rl.advantage=gae")),
        (["rl.advantage_level=turn", "rl.advantage=rloo"], ("rl.advantage_level=turn", "rl.advantage=rloo")),
        (["rl.advantage_level=turn", "rl.task_normalize=true"], ("rl.advantage_level=turn", "rl.task_normalize")),
        (["generation.engine=vllm", "backend=ray", "device=cuda"], ("generation.engine=vllm", "backend=ray")),
        (["rl.offpolicy_kl_threshold=0.5"], ("rl.offpolicy_kl_threshold", "backend=ray")),
        (["rl.minibatches=9", "rl.prompts_per_step=2", "rl.group_size=4"], ("rl.minibatches=9", "8 rows")),
        (["rl.micro_batch_tokens=16", "rl.max_new_tokens=32"], ("rl.micro_batch_tokens=16", "max_new_tokens=32")),
    ],
)
def test_conflicting_options_are_an_error_naming_both(overrides, both):
    with pytest.raises(UserError) as err:
        load_config(DEFAULT, overrides)
    assert all(name in str(err.value) for name in both), str(err.value)


@pytest.mark.parametrize(
    "override,message",
    [
        ("rl.advantage=grpp", "did you mean grpo"),
        ("rl.objective=gpso", "did you mean gspo"),
        ("rl.loss_aggregation=token_sum", "unknown loss aggregation"),
        ("rl.kl_estimator=k4", "unknown KL estimator"),
    ],
)
def test_choices_are_checked_against_the_registries(override, message):
    with pytest.raises(UserError, match=message):
        load_config(DEFAULT, [override])


# --- each objective's own settings ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "override,new_key",
    [
        ("rl.gspo_clip_ratio_low=0.001", "rl.objective_settings.clip_ratio_low (read when rl.objective is gspo)"),
        ("rl.gspo_clip_ratio_high=0.001", "rl.objective_settings.clip_ratio_high (read when rl.objective is gspo)"),
        ("rl.cispo_clip_ratio_high=3", "rl.objective_settings.clip_ratio_high (read when rl.objective is cispo)"),
    ],
)
def test_a_flat_objective_key_of_earlier_versions_names_its_new_key(tmp_path, capsys, override, new_key):
    assert run(["train", "--run-dir", str(tmp_path / "run"), override]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has moved" in err[0] and new_key in err[0]


def test_objective_settings_are_the_chosen_objectives_with_its_defaults_filled_in():
    gspo = load_config(DEFAULT, ["rl.objective=gspo", "rl.objective_settings.clip_ratio_high=5e-4"]).rl
    assert gspo.objective_settings == {"clip_ratio_low": 3e-4, "clip_ratio_high": 5e-4}
    assert load_config(DEFAULT, ["rl.objective=cispo"]).rl.objective_settings == {"clip_ratio_high": 4.0}
    assert load_config(DEFAULT).rl.objective_settings == {}  # ppo_clip has none


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["rl.objective_settings.clip_ratio_high=0.1"], "rl.objective=ppo_clip has no settings of its own"),
        (
            ["rl.objective=gspo", "rl.objective_settings.clip_ratio_low=1.5"],
            "clip_ratio_low (gspo): Input should be less than 1",
        ),
        (["rl.objective=cispo", "rl.objective_settings.clip_ratio_low=0.1"], "clip_ratio_low (cispo): unknown option"),
    ],
)
def test_objective_settings_are_validated_against_the_objectives_class(overrides, message):
    with pytest.raises(UserError) as err:
        load_config(DEFAULT, overrides)
    assert message in str(err.value)


def test_a_run_saved_by_an_earlier_version_resumes_with_its_flat_keys_moved(tmp_path):
    """Every saved config.yaml of an earlier version has the flat keys (all fields were saved): the run's
    objective keeps its values, the others' are dropped (nothing read them)."""
    import yaml

    from polyrl.train.trainer import resume_config

    saved = load_config(DEFAULT, ["rl.objective=gspo"]).model_dump(mode="json")
    del saved["rl"]["objective_settings"]
    saved["rl"].update(gspo_clip_ratio_low=1e-3, gspo_clip_ratio_high=2e-3, cispo_clip_ratio_high=4.0)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    config = resume_config(tmp_path)
    assert config.rl.objective_settings == {"clip_ratio_low": 1e-3, "clip_ratio_high": 2e-3}
    with pytest.raises(UserError, match="has moved"):  # a user's file is not upgraded silently
        load_config(tmp_path / "config.yaml")
