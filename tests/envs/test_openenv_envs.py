"""``env/openenv``: polyrl's own small OpenEnv environments (examples/openenv_envs.py: a typed action, an MCP
environment, a TaskProvider with a rubric) in process, and the same classes served by uvicorn on 127.0.0.1."""

import dataclasses
import json
import time

import pytest
from openenv_servers import EXAMPLES, serve
from rollout_sampling import sampling
from system_packages import hub_package

from polyrl.envs import EnvConfig, get_env_task
from polyrl.errors import UserError
from polyrl.rollout import rollout

hub_package("openenv", "openenv is installed by scripts/setup.sh")

GUESS, SUMS, ARITHMETIC = "openenv_envs:GuessNumber", "openenv_envs:SumTools", "openenv_envs:Arithmetic"


@pytest.fixture(autouse=True)
def _examples_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))


def call(name, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments}, separators=(',', ':'))}</tool_call>"


def _play(task, actions, problem=None):
    env = task.make_env(problem or task.generate(0))
    first = env.reset()
    results = []
    for action in actions:
        results.append(env.step(action))
        if results[-1].done:
            break
    env.close()
    return env, first, results


def test_a_typed_action_is_offered_as_one_tool_named_after_its_class():
    task = get_env_task(f"env/openenv:{GUESS}")
    env, first, (wrong, bad, end) = _play(task, [call("guess", number=9), call("guess", number="9"), "I give up"])
    assert first == [{"role": "user", "content": "Guess my number from 1 to 8. You have 4 guesses."}]
    (tool,) = env.tools
    assert tool["function"]["name"] == "guess" and tool["function"]["description"] == "Guess the hidden number."
    assert tool["function"]["parameters"]["properties"] == {"number": {"title": "Number", "type": "integer"}}
    assert wrong.observation == [{"role": "tool", "name": "guess", "content": "9 is wrong: go lower."}]
    assert bad.observation[0]["content"] == "error: argument 'number' must be of type integer"  # never stepped
    assert end.done and end.info["end_reason"] == "no_tool_call" and env.stats["tool_calls"] == 2
    assert env.stats["tool_errors"] == 1


def test_a_won_game_pays_its_reward_and_counts_as_a_success():
    task = get_env_task(f"env/openenv:{GUESS}")
    problem = task.generate(0)
    target = __import__("random").Random(problem.answer["seed"]).randint(1, 8)  # what GuessNumber.reset draws
    _, _, (won,) = _play(task, [call("guess", number=target)], problem)
    assert won.done and won.reward == 1.0 and won.info["success"] and won.info["end_reason"] == "done"


def test_an_mcp_environment_offers_the_tools_list_tools_gives_and_plays_calls_as_call_tool_actions():
    task = get_env_task(f"env/openenv:{SUMS}")
    assert task.kind.kind == "mcp"
    problem = task.generate(1)
    env = task.make_env(problem)
    question = env.reset()[0]["content"]
    a, b = (int(x) for x in question.split("What is ")[1].split("?")[0].split("+"))
    assert [t["function"]["name"] for t in env.tools] == ["add", "submit"]
    added = env.step(call("add", a=a, b=b))
    assert added.observation == [{"role": "tool", "name": "add", "content": str(a + b)}] and not added.done
    unknown = env.step(call("multiply", a=1, b=2))
    assert unknown.observation[0]["content"] == "error: unknown tool 'multiply'; available: add, submit"
    end = env.step(call("submit", answer=a + b))
    assert end.done and end.reward == 1.0 and end.info["success"]
    env.close()


def test_a_task_provider_gives_a_real_held_out_split_and_a_one_string_action_takes_the_text():
    task = get_env_task(f"env/openenv:{ARITHMETIC}")
    assert task.kind.kind == "text" and task.kind.field == "text"
    assert task.task_splits == {"train": ("train", 40), "eval": ("test", 20)}
    problem = task.generate(23, split="eval")
    assert problem.answer == {"split": "test", "index": 3, "seed": 23}
    env = task.make_env(problem)
    question = env.reset()[0]["content"]
    a, b = (int(x) for x in question.split("What is ")[1].split("?")[0].split("+"))
    answer = f"It is {a + b}"
    end = env.step(answer)
    assert end.done and end.reward == 1.0 and end.info["success"]
    env.close()
    # the rubric's named parts, summed over the episode, logged beside the reward and never added to it
    concise = 1 / (1 + len(answer) / 20)
    assert env.logged_terms() == {"rubric/correct": 1.0, "rubric/concise": pytest.approx(concise)}


def test_the_return_is_held_in_minus_one_to_one_and_a_reward_of_none_is_zero(monkeypatch):
    import openenv_envs

    task = get_env_task(f"env/openenv:{GUESS}")
    rewards = iter([None, 5.0])

    def step(self, action, timeout_s=None, **kwargs):
        return openenv_envs.Feedback(message="ok", reward=next(rewards), done=False)

    monkeypatch.setattr(openenv_envs.GuessNumber, "step", step)
    _, _, (none, big) = _play(task, [call("guess", number=1), call("guess", number=2)])
    assert none.reward == 0.0 and big.reward == 1.0


def test_a_class_without_concurrent_sessions_has_its_calls_run_one_at_a_time(prompts, scripted, monkeypatch):
    import threading

    import openenv_envs

    running, most = [0], [0]
    lock = threading.Lock()
    original = openenv_envs.GuessNumber.step

    def step(self, action, timeout_s=None, **kwargs):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.01)
        with lock:
            running[0] -= 1
        return original(self, action)

    monkeypatch.setattr(openenv_envs.GuessNumber, "step", step)
    monkeypatch.setattr(openenv_envs.GuessNumber, "SUPPORTS_CONCURRENT_SESSIONS", False)
    task = get_env_task(f"env/openenv:{GUESS}")
    problems = [task.generate(s) for s in range(4)]
    rollout(problems, {task.name: task}, scripted(lambda _: call("guess", number=4)), prompts, sampling(2, 80))
    assert most[0] == 1


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ("openenv_envs", "name the class as package.module:Class"),
        ("no_such_module_q:Env", "cannot import 'no_such_module_q'"),
        ("openenv_envs:NoSuchEnv", "module 'openenv_envs' has no attribute 'NoSuchEnv'"),
        ("openenv_envs:Guess", "openenv_envs:Guess is not an OpenEnv Environment subclass"),
        ("json:JSONDecoder", "is not an OpenEnv Environment subclass"),
    ],
)
def test_a_name_that_is_not_an_openenv_environment_is_one_line(argument, message):
    with pytest.raises(UserError, match=message) as info:
        get_env_task(f"env/openenv:{argument}")
    assert "\n" not in str(info.value)


# -- over a server ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def servers():
    with serve("guess_app") as guess, serve("sums_app") as sums, serve("arithmetic_app") as arithmetic:
        yield {"guess": guess, "sums": sums, "arithmetic": arithmetic}


def _remote(server, **config):
    return get_env_task(f"env/openenv:{server.url}", EnvConfig(**config))


def _wait_for(predicate, seconds=15.0):
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.1)
    return predicate()


@pytest.mark.parametrize(
    ("app", "local", "actions"),
    [
        ("guess", GUESS, [call("guess", number=2), call("guess", number="x"), call("guess", number=7), "stop"]),
        ("sums", SUMS, [call("add", a=1, b=2), call("submit", answer=3)]),
        ("arithmetic", ARITHMETIC, ["It is 131"]),
    ],
)
def test_a_served_environment_plays_as_the_same_class_in_process(servers, app, local, actions):
    remote = _remote(servers[app])
    in_process = get_env_task(f"env/openenv:{local}")
    assert remote.kind == in_process.kind and remote.task_splits == in_process.task_splits
    problem = in_process.generate(5, split="eval")
    _, here_first, here = _play(in_process, actions, problem)
    _, there_first, there = _play(remote, actions, dataclasses.replace(problem, task=remote.name))
    assert there_first == here_first
    assert [(r.observation, r.reward, r.done, r.info) for r in there] == [
        (r.observation, r.reward, r.done, r.info) for r in here
    ]


def test_a_rollout_leaves_no_session_open_on_the_server(servers, prompts, scripted):
    task = _remote(servers["guess"])
    problems = [task.generate(s) for s in range(6)]
    trajs = rollout(problems, {task.name: task}, scripted(lambda _: call("guess", number=3)), prompts, sampling(4, 80))
    assert len(trajs) == 24
    assert _wait_for(lambda: servers["guess"].open_sessions() == 0)


def test_a_rollout_that_fails_closes_the_sessions_its_episodes_opened(servers, prompts, scripted):
    task = _remote(servers["guess"])
    problems = [task.generate(s) for s in range(3)]

    def fails(_):
        raise RuntimeError("generation failed")

    with pytest.raises(RuntimeError, match="generation failed"):
        rollout(problems, {task.name: task}, scripted(fails), prompts, sampling(2, 80))
    assert _wait_for(lambda: servers["guess"].open_sessions() == 0)


def test_an_unreachable_url_is_one_line_before_anything_runs():
    from openenv_servers import free_port

    with pytest.raises(UserError, match=r"no OpenEnv server answers at http://127.0.0.1:\d+ \(ConnectError") as info:
        get_env_task(f"env/openenv:http://127.0.0.1:{free_port()}")
    assert "\n" not in str(info.value)


def test_a_url_that_is_not_an_openenv_server_is_one_line(fake_openai):
    server = fake_openai(lambda request: "hi")
    with pytest.raises(UserError, match="does not serve OpenEnv's /schema"):
        get_env_task(f"env/openenv:{server.url}")


# -- a server that refuses, dies or stalls ----------------------------------------------------------------------------
def test_a_server_with_too_few_sessions_for_the_rollout_is_one_line_naming_max_concurrent_envs(prompts, scripted):
    with serve("guess_app_two_sessions") as server:
        task = _remote(server)
        problems = [task.generate(s) for s in range(2)]
        with pytest.raises(UserError, match="max_concurrent_envs") as info:
            rollout(problems, {task.name: task}, scripted(lambda _: "stop"), prompts, sampling(2, 80))
        assert "\n" not in str(info.value) and "rl.prompts_per_step × rl.group_size" in str(info.value)
        assert _wait_for(lambda: server.open_sessions() == 0)


def test_a_server_that_dies_mid_episode_ends_its_episodes_as_env_error(prompts, scripted):
    with serve("guess_app") as server:
        task = _remote(server)
        problems = [task.generate(s) for s in range(2)]
        turns = []

        def guess_then_kill(_):
            turns.append(1)
            if len(turns) == 4:  # the first turn of every episode is generated: the server goes away before steps
                server.kill()
            return call("guess", number=3)

        t0 = time.monotonic()
        with pytest.warns(UserWarning, match="environment error ends the episode"):
            trajs = rollout(problems, {task.name: task}, scripted(guess_then_kill), prompts, sampling(2, 80))
        assert time.monotonic() - t0 < 30
    assert [t.verdict.reason for t in trajs] == ["env_error"] * 4
    assert all(t.info["turns"] == 1 and not t.verdict.correct for t in trajs)


def test_a_server_that_stalls_ends_its_episodes_as_env_error_after_the_server_timeout(prompts, scripted):
    with serve("guess_app") as server:
        task = _remote(server, server_timeout_s=1.0)
        problems = [task.generate(s) for s in range(2)]
        stalled = []

        def guess_then_stall(_):
            if not stalled:
                stalled.append(1)
                server.stall()
            return call("guess", number=3)

        t0 = time.monotonic()
        with pytest.warns(UserWarning, match="environment error ends the episode"):
            trajs = rollout(problems, {task.name: task}, scripted(guess_then_stall), prompts, sampling(2, 80))
        elapsed = time.monotonic() - t0
    assert [t.verdict.reason for t in trajs] == ["env_error"] * 4
    assert elapsed < 20  # four steps of 1 s each at most, on threads; closing the stalled sessions is not waited for
