"""`polyrl eval` evaluates every task kind the trainer trains (issue #36): environments played as episodes,
agents of a training config's `harness:` entries, verifiers tasksets. Names resolve as a training mix's do,
with the config's `env` settings."""

import json
from pathlib import Path

import pytest
import yaml

from polyrl.cli import run
from polyrl.eval.suite import parse_suite

HARNESS_AGENTS = Path(__file__).parents[1] / "harness"
EXAMPLES = Path(__file__).parents[2] / "examples"
MAX_NEW_TOKENS = 6


def _eval(checkpoint, out, tasks: str, *extra) -> int:
    args = ["eval", "--model", str(checkpoint), "--tasks", tasks, "--difficulty", "easy", "--n", "2"]
    return run([*args, "--samples", "2", "--max-new-tokens", str(MAX_NEW_TOKENS), "--out", str(out), *extra])


def _records(out, task: str) -> list[dict]:
    records = [json.loads(line) for line in (Path(out) / "samples.jsonl").read_text().splitlines()]
    return [r for r in records if r["task"] == task]


def _config(tmp_path, **data) -> str:
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_a_suite_names_environments_as_a_training_mix_does():
    suite = parse_suite({"tasks": [{"name": "env/retry:addition", "difficulties": ["easy"], "n": 2}]})
    assert suite.tasks[0].name == "env/retry:addition"


def test_an_environment_is_played_as_multi_turn_episodes(tiny_checkpoint, tmp_path):
    assert _eval(tiny_checkpoint, tmp_path / "ev", "env/retry:addition,addition") == 0
    results = json.loads((tmp_path / "ev" / "results.json").read_text())
    assert set(results["tasks"]) == {"env/retry:addition", "addition"}
    episodes = _records(tmp_path / "ev", "env/retry:addition")
    assert len(episodes) == 2 * 3  # greedy + 2 samples per problem, one episode each
    # an untrained policy fails its first attempt, and env/retry (3 attempts by default) asks again
    assert max(r["tokens"] for r in episodes) > MAX_NEW_TOKENS
    assert {r["reason"] for r in episodes} <= {"attempts_exhausted", "correct", "token_budget"}
    assert results["tasks"]["env/retry:addition"]["maj@2"] is None  # an episode has no single answer to vote on


def test_the_training_configs_env_settings_bound_the_episodes(tiny_checkpoint, tmp_path):
    config = _config(tmp_path, tasks=["addition"], env={"attempts": 1})
    assert _eval(tiny_checkpoint, tmp_path / "ev", "env/retry:addition", "--config", config) == 0
    assert max(r["tokens"] for r in _records(tmp_path / "ev", "env/retry:addition")) <= MAX_NEW_TOKENS


def test_a_harness_entry_of_the_training_config_is_played_by_its_agent(tiny_checkpoint, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(HARNESS_AGENTS))
    config = _config(tmp_path, tasks=[{"name": "addition", "harness": "harness_test_agents:async_agent"}])
    assert _eval(tiny_checkpoint, tmp_path / "ev", "addition", "--config", config) == 0
    assert {r["reason"] for r in _records(tmp_path / "ev", "addition")} == {"returned"}
    # without the config, addition is the plain single-turn task
    assert _eval(tiny_checkpoint, tmp_path / "plain", "addition") == 0
    assert "returned" not in {r["reason"] for r in _records(tmp_path / "plain", "addition")}


def test_a_verifiers_taskset_is_played_through_the_harness(tiny_checkpoint, tmp_path, monkeypatch):
    pytest.importorskip("verifiers.v1", reason="verifiers is not installed (pip install 'polyrl[verifiers]')")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    name = "vf/vf_add_taskset:AddTaskset"
    assert _eval(tiny_checkpoint, tmp_path / "ev", name) == 0
    assert name in json.loads((tmp_path / "ev" / "results.json").read_text())["tasks"]
    assert {r["reason"] for r in _records(tmp_path / "ev", name)} == {"returned"}


def test_an_endpoint_asked_for_episodes_is_one_line(tmp_path, capsys):
    args = ["eval", "--endpoint", "http://127.0.0.1:9/v1", "--tasks", "env/retry:addition", "--n", "1"]
    assert run([*args, "--out", str(tmp_path / "ev")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "task env/retry:addition plays multi-turn episodes" in err
    assert not (tmp_path / "ev").exists()
