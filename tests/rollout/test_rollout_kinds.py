"""Rollout kinds are registered like every other extension kind, and the one rollout path asks the registry which
kind plays each problem: by the task's ``rollout_kind``, never by probing its attributes."""

import pytest
from rollout_sampling import sampling

from polyrl.envs.environment import Environment, EnvTask
from polyrl.errors import UserError
from polyrl.eval.sources import plays_episodes
from polyrl.rollout import Trajectory, rollout
from polyrl.rollout.dispatch import ROLLOUT_KINDS, register_rollout_kind, rollout_kind
from polyrl.tasks import Problem, get_task


class OneTurnEnv(Environment):
    """An environment no list of known classes names: it answers any action with the end of the episode."""

    def reset(self):
        return [{"role": "user", "content": self.problem.question}]

    def step(self, action):
        return self.end(1.0, True, 1.0, "answered", action)


class HubEnvTask(EnvTask):
    """Stands for an environment from another hub (OpenEnv, GEM, a TRL environment class): an EnvTask like ours."""

    name = "hub_env"
    category = "agent"

    def make(self, rng, params):
        return get_task("addition").make(rng, params)

    def make_env(self, problem: Problem) -> Environment:
        return OneTurnEnv(problem, self.max_turns)


@pytest.fixture
def echo_kind():
    """A plugin's rollout kind, registered for the test and removed after it: one trajectory per problem that
    records the weights' version it was handed."""
    played = []

    @register_rollout_kind("echo", episodic=False)
    def echo(problems, tasks, backend, prompts, sg, greedy, version, latest):
        played.append((len(problems), version, latest))
        return [[Trajectory(p.task, 0, p, [1], [2], "echo", True, 0.0, {}, None, version)] for p in problems]

    yield played
    ROLLOUT_KINDS.remove("echo")


class EchoTask(type(get_task("addition"))):
    name = "echo_task"
    rollout_kind = "echo"


def test_every_environment_is_an_episode_whichever_hub_it_comes_from():
    assert rollout_kind(HubEnvTask()) is ROLLOUT_KINDS.lookup("episode")
    assert plays_episodes(HubEnvTask()) and not plays_episodes(get_task("addition"))


def test_a_registered_kind_plays_its_tasks_problems_beside_single_turn_ones(echo_kind, prompts, scripted):
    echo, plain = EchoTask(), get_task("addition")
    tasks = {"echo_task": echo, "addition": plain}
    problems = [plain.generate(0), echo.generate(1), plain.generate(2)]
    trajs = rollout(problems, tasks, scripted(lambda _: "<answer>0</answer>"), prompts, sampling(2, 16), version=3)
    assert echo_kind == [(1, 3, None)]  # one call for the kind's problems, on the weights it was handed
    assert [t.task for t in trajs] == ["addition", "addition", "echo_task", "addition", "addition"]
    assert [t.group for t in trajs] == [0, 0, 1, 2, 2]  # one group per problem, in problem order
    assert all(t.policy_mask == [1] * len(t.response_ids) for t in trajs)  # a mixed batch: one mask per row


def test_a_task_of_an_unregistered_kind_is_one_line_naming_the_known_kinds(prompts, scripted):
    class Unplayable(type(get_task("addition"))):
        name = "unplayable"
        rollout_kind = "telepathy"

    task = Unplayable()
    with pytest.raises(UserError, match=r"^unknown rollout kind 'telepathy'; known: episode, harness, single_turn$"):
        rollout([task.generate(0)], {"unplayable": task}, scripted(lambda _: ""), prompts, sampling(1, 8))


def test_a_kind_must_be_a_function():
    with pytest.raises(TypeError, match="rollout kind 'broken' must be a function"):
        register_rollout_kind("broken", episodic=False)("not a function")
