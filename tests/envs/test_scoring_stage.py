"""The scoring stage: rollouts come back unscored, and one score() weighs single- and multi-turn samples alike."""

import pytest
from rollout_sampling import sampling

from polyrl.device import HOST
from polyrl.envs import get_env_task
from polyrl.rewards import RULE_TERMS, RewardConfig, RewardScorer, score
from polyrl.rewards.rules import RULES
from polyrl.rollout import rollout
from polyrl.tasks import get_task

RETRY = "env/retry:addition"


def _answer_right(prompt_text):
    question = prompt_text.rsplit("<|user|>", 1)[1].split("<|assistant|>")[0]
    a, b = question.strip().rstrip("=").split("+")
    return f"<answer>{int(a) + int(b)}</answer>"


def _mixed(scripted, prompts):
    env, single = get_env_task(RETRY), get_task("addition")
    tasks = {RETRY: env, "addition": single}
    problems = [single.generate(0, "easy"), env.generate(1, "easy")]
    trajs = rollout(problems, tasks, scripted(_answer_right), prompts, sampling(2, 16))
    return tasks, trajs


def test_rollouts_are_unscored_until_the_scoring_stage(prompts, scripted):
    tasks, trajs = _mixed(scripted, prompts)
    single, episodes = trajs[:2], trajs[2:]
    assert all(t.reward == 0.0 and t.reward_terms == {} for t in trajs)
    assert all(t.verdict is None for t in single)  # verified by the scoring stage, in one batch
    assert all(t.verdict.correct for t in episodes)  # an episode's outcome is its environment's
    score(trajs, tasks, RewardConfig(format=0.5), 16)
    assert [t.reward_terms for t in single] == [{"verifier": 1.0, "format": 1.0}] * 2
    assert [t.reward for t in single] == [1.5, 1.5]
    assert [t.reward_terms for t in episodes] == [{"env_return": 1.0}] * 2
    assert [t.reward for t in episodes] == [1.0, 1.0]


def test_per_task_overrides_weigh_an_environment_return(prompts, scripted):
    # the defect: multi-turn rewards were verifier * return with the global weight, whatever reward.tasks said
    tasks, trajs = _mixed(scripted, prompts)
    config = RewardConfig(verifier=1.0, tasks={RETRY: {"verifier": 0.25}, "addition": {"verifier": 2.0}})
    score(trajs, tasks, config, 16)
    assert [t.reward for t in trajs] == [2.0, 2.0, 0.25, 0.25]


def test_batched_terms_are_weighed_once_per_task_and_gated_on_episodes_too(prompts, scripted):
    tasks, trajs = _mixed(scripted, prompts)
    config = RewardConfig(majority_vote=0.5, gate="verifier", tasks={RETRY: {"majority_vote": 2.0}})
    score(trajs, tasks, config, 16, RewardScorer(config, list(tasks), device=HOST))
    assert [t.reward_terms["majority_vote"] for t in trajs] == [1.0] * 4
    assert [t.reward for t in trajs] == [1.5, 1.5, 3.0, 3.0]
    wrong = rollout(
        [tasks["addition"].generate(0, "easy")],
        tasks,
        scripted(lambda _: "<answer>x</answer>"),
        prompts,
        sampling(2, 16),
    )
    score(wrong, tasks, config, 16, RewardScorer(config, list(tasks), device=HOST))
    assert [t.reward for t in wrong] == [0.0, 0.0]  # the agreeing but wrong pair gets nothing behind the gate


def test_length_terms_are_measured_in_the_stage_token_budget(prompts, scripted):
    tasks, trajs = _mixed(scripted, prompts)
    single = trajs[:2]
    score(single, tasks, RewardConfig(verifier=0.0, length=1.0), 16)
    assert single[0].reward == pytest.approx(-len(single[0].response_ids) / 16)


def test_every_rule_weight_names_a_registered_rule_term():
    completion = [name for name, term in RULES.items() if not term.episode]
    assert tuple(completion) == RULE_TERMS  # summed in this order (the order the totals always had)
    assert RULES["env_return"].weight == "verifier" and RULES["env_return"].episode


TRL_ECHO = """
def echo_prompts(completions, prompts, **kwargs):
    echo_prompts.seen = list(prompts)
    return [0.0] * len(completions)
"""


def test_a_trl_functions_prompts_are_what_the_policy_read(prompts, scripted, tmp_path, monkeypatch):
    (tmp_path / "trl_echo.py").write_text(TRL_ECHO)
    monkeypatch.syspath_prepend(str(tmp_path))
    tasks, trajs = _mixed(scripted, prompts)  # prompt.field: question, as the tiny model's runs read it
    config = RewardConfig(terms=[{"fn": "trl_echo:echo_prompts", "weight": 1.0}])
    score(trajs, tasks, config, 16, RewardScorer(config, list(tasks), device=HOST))
    import trl_echo

    questions = [t.problem.question for t in trajs]
    assert trl_echo.echo_prompts.seen == questions and questions[0] != trajs[0].problem.prompt
