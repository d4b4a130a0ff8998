"""Reward terms as Python callables: by import path, registered by name, per completion or per group."""

import math
import textwrap

import pytest

from polyrl.device import HOST
from polyrl.errors import UserError
from polyrl.rewards import (
    REWARD_SOURCES,
    RewardConfig,
    RewardScorer,
    register_reward_source,
    register_reward_term,
    score,
)
from polyrl.rollout import Trajectory
from polyrl.tasks import get_task
from polyrl.train.config import load_config

MODULE = """
def brevity(response):
    return -len(response) / 100

def exact_bonus(problem, extracted, verdict):
    return 1.0 if verdict.correct and extracted == problem.solution else 0.0

def spread(responses):
    # per group: 1 for a response no other member of the group wrote
    return [float(responses.count(r) == 1) for r in responses]

def broken(response):
    if "boom" in response:
        raise RuntimeError("boom")
    return float("nan") if "nan" in response else 1.0

def wrong_length(responses):
    return [1.0]

def needs_context(problem, temperature):
    return 0.0
"""


@pytest.fixture
def rewards_module(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_rewards"


def _traj(text: str, group: int = 0, task: str = "addition") -> Trajectory:
    t = get_task(task)
    problem = t.generate(group, "easy")
    verdict = t.verify(problem, text)
    return Trajectory(task, group, problem, [1], [2], text, True, verdict.score, {"verifier": verdict.score}, verdict)


def _score(config: RewardConfig, trajs, tasks=("addition",)):
    score(trajs, {name: get_task(name) for name in tasks}, config, 16, RewardScorer(config, list(tasks), device=HOST))
    return trajs


def test_a_function_by_import_path_is_a_weighted_term(rewards_module):
    config = RewardConfig(terms=[{"fn": f"{rewards_module}:brevity", "weight": 0.5}])
    (t,) = _score(config, [_traj("<answer>12345</answer>")])  # 22 characters
    assert t.reward_terms["brevity"] == pytest.approx(-0.22)
    assert t.reward == pytest.approx(t.verdict.score + 0.5 * -0.22)


def test_a_term_sees_problem_extracted_answer_and_verdict(rewards_module):
    config = RewardConfig(terms=[{"fn": f"{rewards_module}:exact_bonus"}])
    problem = get_task("addition").generate(0, "easy")
    right, wrong = _traj(f"<answer>{problem.solution}</answer>"), _traj("<answer>-1</answer>")
    _score(config, [right, wrong])
    assert (right.reward_terms["exact_bonus"], wrong.reward_terms["exact_bonus"]) == (1.0, 0.0)


def test_a_group_function_scores_each_group_on_its_own(rewards_module):
    config = RewardConfig(terms=[{"fn": f"{rewards_module}:spread", "weight": 1.0}])
    trajs = [_traj("<answer>1</answer>", 0), _traj("<answer>1</answer>", 0), _traj("<answer>2</answer>", 0)]
    trajs += [_traj("<answer>1</answer>", 1)]  # alone in its group: unique
    _score(config, trajs)
    assert [t.reward_terms["spread"] for t in trajs] == [0.0, 0.0, 1.0, 1.0]


def test_a_raising_or_nan_term_is_a_counted_failure_with_zero_reward(rewards_module, capsys):
    config = RewardConfig(terms=[{"fn": f"{rewards_module}:broken", "weight": 1.0}])
    ok, boom, nan = _score(config, [_traj("<answer>1</answer>"), _traj("boom"), _traj("nan")])
    assert ok.reward_terms["broken"] == 1.0 and not ok.reward_failures
    assert boom.reward_terms["broken"] == 0.0 and boom.reward_failures["broken"].startswith("error: Runtime")
    assert nan.reward_terms["broken"] == 0.0 and nan.reward_failures["broken"] == "not_finite"
    assert math.isfinite(nan.reward)
    assert capsys.readouterr().err.count("reward term 'broken'") == 1  # printed once, then only counted


def test_a_group_function_returning_the_wrong_number_of_values_fails_the_whole_group(rewards_module):
    config = RewardConfig(terms=[{"fn": f"{rewards_module}:wrong_length"}])
    trajs = _score(config, [_traj("<answer>1</answer>"), _traj("<answer>2</answer>")])
    assert all("returned 1 values for a group of 2" in t.reward_failures["wrong_length"] for t in trajs)


def test_a_registered_term_is_configurable_by_name():
    @register_reward_term("test_shout")
    def shout(response: str) -> float:
        return float(response.isupper())

    try:
        config = RewardConfig.model_validate({"test_shout": 2.0})
        assert [(t.name, t.weight) for t in config.terms] == [("test_shout", 2.0)]
        (t,) = _score(config, [_traj("NO ANSWER")])
        assert t.reward_terms["test_shout"] == 1.0 and t.reward == pytest.approx(0.0 + 2.0)
    finally:
        del REWARD_SOURCES["test_shout"]


def test_a_registered_source_is_configurable_by_name_from_yaml(tmp_path):
    @register_reward_source("test_constant")
    def constant(config, device):
        return lambda trajs: [(0.25, None)] * len(trajs)

    try:
        path = tmp_path / "c.yaml"
        path.write_text("tasks: [addition]\nreward: {test_constant: 0.5}\n")
        assert load_config(path).reward.weights("addition")["test_constant"] == 0.5
    finally:
        del REWARD_SOURCES["test_constant"]


def test_a_term_applies_only_to_its_tasks(rewards_module):
    config = RewardConfig(terms=[{"fn": f"{rewards_module}:brevity", "tasks": ["addition"]}])
    assert config.weights("addition")["brevity"] == 1.0 and config.weights("sort_digits")["brevity"] == 0.0
    other = _traj("<answer>1</answer>", task="sort_digits")
    _score(config, [other], tasks=("addition", "sort_digits"))
    assert "brevity" not in other.reward_terms


def test_per_task_overrides_accept_custom_terms(rewards_module):
    config = RewardConfig(terms=[{"fn": f"{rewards_module}:brevity"}], tasks={"addition": {"brevity": 0.0}})
    assert config.weights("addition")["brevity"] == 0.0


@pytest.mark.parametrize(
    ("reward", "message"),
    [
        ({"terms": [{"fn": "no_such_module_xyz:f"}]}, "cannot import 'no_such_module_xyz'"),
        ({"terms": [{"fn": "my_rewards:missing"}]}, "has no attribute 'missing'"),
        ({"terms": [{"fn": "my_rewards"}]}, "must be written 'package.module:function'"),
        ({"terms": [{"fn": "my_rewards:needs_context"}]}, "takes problem, temperature"),
        ({"terms": [{"fn": "my_rewards:brevity", "tasks": ["sort_digits"]}]}, "not in the mix: sort_digits"),
    ],
)
def test_bad_callables_fail_at_start_up_in_one_line(rewards_module, reward, message):
    with pytest.raises(UserError, match=message) as info:
        RewardScorer(RewardConfig.model_validate(reward), ["addition"], device=HOST)
    assert "\n" not in str(info.value)


def test_unknown_term_names_and_duplicates_are_config_errors(tmp_path, rewards_module):
    path = tmp_path / "c.yaml"
    for reward, message in [
        ("{brevityy: 0.5}", "reward.brevityy: unknown option"),
        ("{terms: [{name: nope}]}", "unknown reward term 'nope'"),
        ("{terms: [{fn: 'my_rewards:brevity'}, {fn: 'my_rewards:brevity'}]}", "'brevity' is configured twice"),
        ("{terms: [{name: judge}]}", "'judge' is a built-in option: set reward.judge instead"),
    ]:
        path.write_text(f"tasks: [addition]\nreward: {reward}\n")
        with pytest.raises(UserError, match=message):
            load_config(path)


def test_a_plugin_entry_point_naming_a_function_becomes_a_term_by_that_name():
    def polite(response):
        return float("please" in response)

    REWARD_SOURCES.add("test_polite", polite)  # what loading the entry point test_polite = "pkg:polite" does
    try:
        (t,) = _score(RewardConfig.model_validate({"test_polite": 0.5}), [_traj("please <answer>1</answer>")])
        assert t.reward_terms["test_polite"] == 1.0
    finally:
        del REWARD_SOURCES["test_polite"]


def test_thinking_is_rewarded_and_length_penalized_separately():
    from polyrl.rewards import RewardConfig, compute_rewards
    from polyrl.tasks import get_task
    from polyrl.tasks.answers import AnswerFormat

    task = get_task("addition", answer_format=AnswerFormat(think_tags=("<think>", "</think>")))
    problem = task.generate(0, "easy")
    answer = task.reference_response(problem)
    text = "<think>" + "x" * 30 + "</think>" + answer
    config = RewardConfig(think_format=0.5, think_length=1.0)
    r = compute_rewards(config, task, problem, text, length=10, finished=True, max_new_tokens=20)
    share = 30 / len(text)  # the thought, without its tags, over the whole response
    assert r.terms["think_format"] == 1.0
    assert r.terms["think_length"] == pytest.approx(-share * 10 / 20)
    assert r.total == pytest.approx(1.0 + 0.5 * 1.0 - share * 10 / 20)
    unthought = compute_rewards(config, task, problem, answer, length=5, finished=True, max_new_tokens=20)
    assert unthought.terms["think_format"] == 0.0 and unthought.terms["think_length"] == 0.0
