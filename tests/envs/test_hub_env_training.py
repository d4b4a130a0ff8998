"""Environments from other hubs train like polyrl's own: three GEM games, polyrl's three OpenEnv environments in process
and served by uvicorn, and a TRL class each train two RL steps of the tiny model (``polyrl train``), are evaluated by
``polyrl eval``, and a run with them in the mix, stepped on four threads, is the same run twice."""

import json
from pathlib import Path

import pytest
import torch
import yaml
from cli_errors import one_error_line
from openenv_servers import EXAMPLES, free_port, serve
from system_packages import hub_package

from polyrl.cli import run as cli

hub_package("gem", "gem-llm is installed by scripts/setup.sh")
hub_package("openenv", "openenv is installed by scripts/setup.sh")

GEM = ["env/gem:game:GuessTheNumber-v0-easy", "env/gem:game:Mastermind-v0-easy", "env/gem:game:TowerofHanoi-v0-easy"]
OPENENV = [f"env/openenv:openenv_envs:{c}" for c in ("GuessNumber", "SumTools", "Arithmetic")]
TRL = "env/trl:trl_guess:GuessEnv"
VOLATILE = {"step_time", "tokens_per_s", "completions_per_s"}


@pytest.fixture(autouse=True)
def _examples_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))


@pytest.fixture(scope="module")
def servers():
    with serve("guess_app") as guess, serve("sums_app") as sums, serve("arithmetic_app") as arithmetic:
        yield [f"env/openenv:{s.url}" for s in (guess, sums, arithmetic)]


def _config(tiny_train_settings, tmp_path, tasks, **changes) -> Path:
    data = {
        **tiny_train_settings,
        "model": {"path": "tiny", "tiny": {**tiny_train_settings["model"]["tiny"], "max_positions": 1536}},
        "tasks": tasks,
        "env": {"max_turns": 3, "max_episode_tokens": 96, "concurrency": 4},
        "sft": {"steps": 2, "batch_size": 4, "warmup_steps": 1},
        "rl": {**tiny_train_settings["rl"], "steps": 2, "prompts_per_step": 4, "group_size": 2, "max_new_tokens": 24},
        "eval": {"problems_per_task": 2, "pass_k": 1},
        "checkpoint_every": 2,
        "tensorboard": False,
        "threads": 1,
        **changes,
    }
    path = tmp_path / f"config-{len(list(tmp_path.glob('config-*')))}.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path


def _trl_entry() -> dict:
    return {"name": TRL, "dataset": str(EXAMPLES / "trl_guess_prompts.jsonl")}


def _records(run_dir) -> list[dict]:
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in VOLATILE} for line in lines]


def test_each_hub_environment_trains_two_rl_steps_and_is_evaluated_by_polyrl_eval(
    servers, tiny_train_settings, tmp_path
):
    names = GEM + OPENENV + servers
    rl = {**tiny_train_settings["rl"], "steps": 2, "prompts_per_step": 30, "group_size": 2, "max_new_tokens": 24}
    config = _config(tiny_train_settings, tmp_path, [*names, _trl_entry()], rl=rl)
    run_dir = tmp_path / "run"
    assert cli(["train", "--config", str(config), "--run-dir", str(run_dir)]) == 0
    records = _records(run_dir)
    rl = [r for r in records if r["stage"] == "rl"]
    assert len(rl) == 2 and all(r["skipped_updates"] == 0 for r in rl)
    played = {k.split("/", 1)[1] for r in rl for k in r if k.startswith("success/")}
    assert played == {*names, TRL}  # seed 0's draws give every environment episodes in the two steps
    assert any(k.startswith("reward_terms/rubric/correct/env/openenv:") for r in rl for k in r)  # Arithmetic's rubric
    sft = [r for r in records if r["stage"] == "sft"]
    assert len(sft) == 2  # GEM's GuessTheNumber and TowerofHanoi give reference episodes
    after = json.loads((run_dir / "eval" / "after_rl.json").read_text())
    assert set(after) == {*names, TRL, "mean"}

    out = tmp_path / "eval"
    args = ["--tasks", ",".join([*names, TRL]), "--n", "2", "--samples", "1", "--max-new-tokens", "24"]
    assert (
        cli(["eval", "--model", str(run_dir / "final_model"), "--config", str(config), *args, "--out", str(out)]) == 0
    )
    results = json.loads((out / "results.json").read_text())
    assert set(results["tasks"]) == {*names, TRL}
    assert results["problems_done"] == results["problems_total"] == 2 * len(results["tasks"])


def test_a_run_with_hub_environments_stepped_on_four_threads_is_the_same_run_twice(
    servers, tiny_train_settings, tmp_path
):
    from safetensors.torch import load_file

    config = _config(tiny_train_settings, tmp_path, [*GEM, *OPENENV, servers[0], _trl_entry()])
    runs = [tmp_path / "a", tmp_path / "b"]
    for run_dir in runs:
        assert cli(["train", "--config", str(config), "--run-dir", str(run_dir)]) == 0
    assert _records(runs[0]) == _records(runs[1])
    a, b = (load_file(str(r / "final_model" / "model.safetensors")) for r in runs)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ("env/openenv:no_such_module_v:Env", "cannot import 'no_such_module_v'"),
        ("env/openenv:openenv_envs:NoSuchEnv", "has no attribute 'NoSuchEnv'"),
        ("env/openenv:openenv_envs:Guess", "is not an OpenEnv Environment subclass"),
        ("env/openenv:http://127.0.0.1:{port}", "no OpenEnv server answers at"),
        ("env/gem:game:NoSuchGame-v0", "GEM has no environment 'game:NoSuchGame-v0'"),
        ("env/gem:game:Hangman-v0-easy", "downloads NLTK's word list"),
        ("env/trl:json:JSONDecoder", "is not a TRL environment class"),
    ],
)
def test_a_bad_hub_environment_is_one_line_and_exit_2_before_training(
    tiny_train_settings, tmp_path, capsys, task, message
):
    config = _config(tiny_train_settings, tmp_path, [task.format(port=free_port()), "addition"])
    run_dir = tmp_path / "run"
    assert cli(["train", "--config", str(config), "--run-dir", str(run_dir)]) == 2
    assert message in one_error_line(capsys)
    assert not (run_dir / "metrics.jsonl").exists()


@pytest.mark.parametrize("name", [GEM[1], OPENENV[1], TRL])
def test_a_hub_environment_task_travels_to_another_process_as_its_name_and_settings(name):
    """Ray rollout workers get the mix's tasks pickled: these rebuild there from the name, ``env`` and dataset."""
    import pickle

    from polyrl.envs import EnvConfig
    from polyrl.tasks import resolve_task
    from polyrl.tasks.dataset_rows import DatasetSpec

    dataset = DatasetSpec(path=str(EXAMPLES / "trl_guess_prompts.jsonl")) if name == TRL else None
    task = resolve_task(name, env=EnvConfig(max_turns=3), dataset=dataset)
    copy = pickle.loads(pickle.dumps(task))
    assert type(copy) is type(task) and copy.name == name and copy.max_turns == 3
    assert copy.generate(5, split="eval") == task.generate(5, split="eval")
