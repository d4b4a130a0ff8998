"""A YAML file that sets one key twice is refused in one line naming the key and both lines, wherever polyrl
reads YAML: PyYAML alone keeps the last value silently (issue #36, "configs and overrides")."""

import pytest

from polyrl.cli import run
from polyrl.errors import UserError
from polyrl.yaml_files import DuplicateKeyError, safe_load

TWICE = "tasks: [addition]\nrl:\n  steps: 3\n  lr: 0.001\n  lr: 0.1\n"
"""A training config whose rl section lists lr on lines 4 and 5."""


def test_a_key_listed_twice_in_one_mapping_names_the_key_and_both_lines():
    with pytest.raises(DuplicateKeyError, match=r"^key 'lr' appears twice \(lines 4 and 5\)$"):
        safe_load(TWICE)


def test_the_same_key_in_different_mappings_and_merge_keys_are_plain_yaml():
    text = "base: &b {lr: 1, steps: 2}\nrl: {<<: *b, lr: 3}\nsft: {lr: 4}\n"
    assert safe_load(text) == {"base": {"lr": 1, "steps": 2}, "rl": {"lr": 3, "steps": 2}, "sft": {"lr": 4}}


def test_a_training_config_with_a_key_twice_is_refused_by_polyrl_train(tmp_path, capsys):
    (tmp_path / "c.yaml").write_text(TWICE)
    assert run(["train", "--config", str(tmp_path / "c.yaml"), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"polyrl: error: config '{tmp_path / 'c.yaml'}': key 'lr' appears twice (lines 4 and 5)"
    assert not (tmp_path / "run").exists()


def test_an_override_with_a_key_twice_is_refused():
    from polyrl.train.config import parse_overrides

    with pytest.raises(UserError, match=r"override 'sampler.options=\{a: 1, a: 2\}': key 'a' appears twice"):
        parse_overrides(["sampler.options={a: 1, a: 2}"])


def test_an_experiment_file_with_a_key_twice_is_refused(tmp_path):
    from polyrl.experiments.curriculum import read_experiment_config

    (tmp_path / "e.yaml").write_text("strategies:\n  a: {}\n  a: {}\n")
    with pytest.raises(UserError, match=r"experiment config .*: key 'a' appears twice \(lines 2 and 3\)"):
        read_experiment_config(tmp_path / "e.yaml")


def test_an_eval_suite_with_a_key_twice_is_refused(tmp_path):
    from polyrl.eval.suite import load_suite

    (tmp_path / "s.yaml").write_text("name: x\nsamples: 1\nsamples: 4\ntasks: [{name: addition}]\n")
    with pytest.raises(UserError, match=r"key 'samples' appears twice \(lines 2 and 3\)"):
        load_suite(tmp_path / "s.yaml")


def test_a_run_directorys_config_with_a_key_twice_is_refused_by_the_report(tmp_path):
    from polyrl.report.html import load_run

    (tmp_path / "config.yaml").write_text("seed: 1\nseed: 2\n")
    with pytest.raises(UserError, match=r"key 'seed' appears twice \(lines 1 and 2\)"):
        load_run(tmp_path)


def test_the_dataset_tasks_of_a_config_are_read_with_the_same_check(tmp_path):
    from polyrl.tasks.dataset import load_config_datasets

    (tmp_path / "c.yaml").write_text(TWICE)
    with pytest.raises(UserError, match=r"key 'lr' appears twice \(lines 4 and 5\)"):
        load_config_datasets(tmp_path / "c.yaml")


def test_the_run_config_beside_an_evaluated_model_with_a_key_twice_is_refused(tmp_path):
    from polyrl.policy.prompts import run_prompt_field

    (tmp_path / "config.yaml").write_text("prompt: {field: prompt}\nprompt: {field: question}\n")
    with pytest.raises(UserError, match=r"key 'prompt' appears twice \(lines 1 and 2\)"):
        run_prompt_field(tmp_path / "final_model")
