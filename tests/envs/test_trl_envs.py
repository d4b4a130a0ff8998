"""``env/trl:<module>:<Class>``: environment classes written for TRL's ``GRPOTrainer(environment_factory=...)``,
played over a dataset's rows."""

import json

import pytest
import trl_classes
from rollout_sampling import sampling

from polyrl.envs import EnvConfig
from polyrl.errors import UserError
from polyrl.rewards import RewardConfig, score
from polyrl.rollout import rollout
from polyrl.tasks import resolve_task
from polyrl.tasks.dataset_rows import DatasetSpec
from polyrl.tasks.task_registry import TASKS


def call(name, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments}, separators=(',', ':'))}</tool_call>"


@pytest.fixture
def rows(tmp_path):
    def write(records, name="rows.jsonl"):
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        return str(path)

    return write


def _task(cls, dataset=None, **config):
    return resolve_task(f"env/trl:trl_classes:{cls}", env=EnvConfig(**config), dataset=dataset)


def test_reset_gets_every_column_of_the_row_and_its_text_is_appended_to_the_prompt(rows):
    path = rows([{"prompt": "Hit it.", "level": 2, "tags": ["a"]}] * 3)
    task = _task("Recorder", DatasetSpec(path=path))
    trl_classes.Recorder.resets.clear()
    env = task.make_env(task.generate(0))
    assert env.reset() == [{"role": "user", "content": "Hit it. Go."}]  # appended as TRL appends it
    assert trl_classes.Recorder.resets == [{"prompt": "Hit it.", "level": 2, "tags": ["a"]}]


def test_a_conversational_prompt_keeps_its_messages_and_gets_the_reset_text_on_the_last_one(rows):
    prompt = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hit it."}]
    task = _task("Recorder", DatasetSpec(path=rows([{"prompt": prompt}])))
    env = task.make_env(task.generate(0))
    assert env.reset() == [prompt[0], {"role": "user", "content": "Hit it. Go."}]


def test_public_methods_are_the_tools_with_the_schemas_their_docstrings_give():
    task = _task("Recorder")
    names = [t["function"]["name"] for t in task.tools]
    assert names == ["explode", "hit", "wait"]  # not reset, get_reward or _private
    hit = next(t["function"] for t in task.tools if t["function"]["name"] == "hit")
    assert hit["description"] == "Hit the target."
    assert hit["parameters"]["properties"] == {"times": {"type": "integer", "description": "How many times."}}


def test_tool_calls_run_the_methods_and_a_turn_without_one_ends_the_episode_with_get_reward():
    task = _task("Recorder")
    env = task.make_env(task.generate(0))
    env.reset()
    first = env.step(call("hit", times=1) + call("explode") + call("wait", seconds=0.5))
    assert [m["content"] for m in first.observation] == ["hits: 1", "error: boom", "waited 0.5"]
    assert not first.done and env.stats == {"tool_calls": 3, "tool_errors": 1, "invalid_actions": 0}
    second = env.step(call("hit", times=1))
    end = env.step("That is all.")
    assert not second.done and end.done and end.info["end_reason"] == "answered"
    assert end.reward == pytest.approx(2 / 3) and end.info["score"] == pytest.approx(2 / 3)
    assert not end.info["success"]
    env.close()


def test_the_turn_limit_ends_the_episode_with_the_reward_so_far():
    task = _task("Recorder", max_turns=2)
    env = task.make_env(task.generate(0))
    env.reset()
    env.step(call("hit", times=2))
    end = env.step(call("hit", times=5))
    assert end.done and end.info["end_reason"] == "max_turns" and end.reward == 1.0 and end.info["success"]


def test_instances_are_pooled_and_reset_for_each_episode(prompts, scripted):
    task = _task("Recorder")
    trl_classes.Recorder.made = 0
    problems = [task.generate(s) for s in range(2)]
    for _ in range(3):  # three rollouts of four episodes: four instances, made once (the probe is the first)
        rollout(problems, {task.name: task}, scripted(lambda _: call("hit", times=1)), prompts, sampling(2, 60))
    assert trl_classes.Recorder.made == 3


def test_a_class_that_draws_its_game_plays_one_game_per_problem_and_the_same_games_in_every_run(prompts, scripted):
    task = _task("DrawsItsGame")
    problems = [task.generate(s) for s in range(3)] + [task.generate(0, split="eval")]

    def play(concurrency):
        trajs = rollout(
            problems, {task.name: task}, scripted(lambda _: "ok"), prompts, sampling(3, 8, env_concurrency=concurrency)
        )
        score(trajs, {task.name: task}, RewardConfig(), 8)
        return [t.prompt_text for t in trajs]

    one, again, threads = play(1), play(1), play(4)
    assert one == again == threads
    games = [one[i : i + 3] for i in range(0, 12, 3)]
    assert all(len(set(g)) == 1 for g in games)  # a group plays one game
    assert len({g[0] for g in games}) == 4  # the problems (train and held out) play different games


def test_rows_split_by_prompt_and_identical_prompts_play_every_row_in_both_splits(rows):
    many = _task("Recorder", DatasetSpec(path=rows([{"prompt": f"row {i}"} for i in range(200)]), eval_fraction=0.2))
    assert len(many.splits["eval"]) + len(many.splits["train"]) == 200 and 20 < len(many.splits["eval"]) < 60
    assert not {r["prompt"] for r in many.splits["eval"]} & {r["prompt"] for r in many.splits["train"]}
    same = _task("Recorder", DatasetSpec(path=rows([{"prompt": "Play."}] * 10, "same.jsonl")))
    assert same.splits["train"] == same.splits["eval"] and len(same.splits["eval"]) == 10


def test_without_a_dataset_the_class_owns_its_data_and_reset_gives_the_prompt():
    task = _task("DrawsItsGame")
    env = task.make_env(task.generate(0))
    assert env.reset()[0]["content"].startswith(" secret ")


def test_a_trl_entry_plays_its_rows_and_registers_no_dataset_task(rows):
    path = rows([{"prompt": "Hit it."}])
    task = resolve_task("env/trl:trl_classes:Recorder", dataset=DatasetSpec(path=path))
    assert task.name == "env/trl:trl_classes:Recorder" and "trl_classes:Recorder" not in TASKS


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("trl_classes:NoReset", "is not a TRL environment class: its instances have no reset method"),
        ("trl_classes:Undocumented", "method 'act' cannot be a tool .*no docstring"),
        ("trl_classes:Broken", r"cannot construct an instance \(RuntimeError: no licence key\)"),
        ("trl_classes:NOT_CALLABLE", "is not a class"),
        ("trl_classes:Missing", "has no attribute 'Missing'"),
        ("no_such_module_w:Env", "cannot import 'no_such_module_w'"),
    ],
)
def test_a_name_that_is_not_a_trl_environment_class_is_one_line(name, message):
    with pytest.raises(UserError, match=message) as info:
        resolve_task(f"env/trl:{name}")
    assert "\n" not in str(info.value)


def test_a_dataset_without_the_prompt_column_is_one_line(rows):
    with pytest.raises(UserError, match="has no column 'question'"):
        _task("Recorder", DatasetSpec(path=rows([{"prompt": "x"}]), prompt="question"))
