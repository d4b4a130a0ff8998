"""What the environments from other hubs share: rewards held to the return bound, the outcome rule, the isolated
global random state, and user classes imported with one-line errors."""

import math
import random
import threading

import numpy as np
import pytest

from polyrl.envs.hub_episode import HubEnvironment, IsolatedRandom, import_object, step_reward
from polyrl.errors import UserError
from polyrl.tasks.base import Problem


def _episode(max_turns=5):
    return HubEnvironment(Problem("t", "q", "q", {}, None, 0, "train", None, {}), max_turns, "hermes")


def test_a_reward_of_none_is_zero_and_numbers_pass_as_floats():
    assert step_reward(None) == 0.0
    assert step_reward(True) == 1.0 and step_reward(np.float32(0.5)) == 0.5


@pytest.mark.parametrize("bad", [math.nan, math.inf, "1", [1.0]])
def test_a_reward_that_is_not_a_finite_number_is_the_environments_error(bad):
    with pytest.raises(ValueError, match="not a finite number"):
        step_reward(bad)


def test_the_return_is_held_in_minus_one_to_one_and_the_paid_rewards_add_up_to_it():
    ep = _episode()
    paid = [ep.pay(r) for r in (0.7, 0.7, -0.1, -3.0, 5.0)]
    # 0.7, then 0.3 (the sum reaches 1), -0.1, -1.9 (the sum reaches -1), 2.0 (back to 1)
    assert paid == pytest.approx([0.7, 0.3, -0.1, -1.9, 2.0])
    assert ep.total == pytest.approx(1.0) and sum(paid) == pytest.approx(ep.total)


def test_an_episode_succeeds_when_its_return_reaches_one_and_scores_its_return_clipped_to_zero_one():
    ep = _episode()
    ep.pay(0.25)
    result = ep.finish(ep.pay(0.5), "done", "  my last move ")
    assert result.done and result.reward == 0.5
    assert result.info == {"success": False, "score": 0.75, "end_reason": "done", "answer": "my last move"}
    won = _episode()
    for _ in range(7):  # Sudoku pays 1/7 per cell: the sum is 1 less float rounding, still a success
        won.pay(1 / 7)
    assert won.finish(0.0, "solved").info["success"]
    lost = _episode()
    lost.pay(-0.1)
    assert lost.finish(0.0, "game_over").info["score"] == 0.0


def test_go_on_ends_the_episode_at_the_turn_limit():
    ep = _episode(max_turns=2)
    ep.turn = 1
    assert not ep.go_on(0.0, [{"role": "user", "content": "next"}]).done
    ep.turn = 2
    assert ep.go_on(0.0, []).info["end_reason"] == "max_turns"


def test_an_isolated_episode_draws_its_own_stream_and_leaves_the_callers_state_alone():
    random.seed(123)
    np.random.seed(123)
    before = (random.getstate(), np.random.get_state()[1].copy())
    a, b = IsolatedRandom(7), IsolatedRandom(7)
    with a.active():
        first = (random.random(), float(np.random.rand()))
    with b.active():
        assert (random.random(), float(np.random.rand())) == first  # the same seed, the same stream
    with a.active():
        second = random.random()
    assert second != first[0]  # a's stream went on where it stopped
    assert random.getstate() == before[0] and (np.random.get_state()[1] == before[1]).all()


def test_isolated_episodes_on_many_threads_draw_what_they_draw_one_after_another():
    def draws(seed):
        state = IsolatedRandom(seed)
        out = []
        for _ in range(50):
            with state.active():
                out.append(random.randint(0, 10**9))
        return out

    alone = {seed: draws(seed) for seed in range(8)}
    together = {}
    threads = [threading.Thread(target=lambda s=s: together.__setitem__(s, draws(s))) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together == alone


def test_import_object_reports_each_problem_in_one_line():
    with pytest.raises(UserError, match=r"^env/x: name the class as package.module:Class$"):
        import_object("no_colon", "env/x")
    with pytest.raises(UserError, match=r"cannot import 'no_such_module_xyz' \(ModuleNotFoundError"):
        import_object("no_such_module_xyz:Cls", "env/x")
    with pytest.raises(UserError, match=r"module 'json' has no attribute 'Nope'"):
        import_object("json:Nope", "env/x")
    assert import_object("json:JSONDecoder", "env/x").__name__ == "JSONDecoder"
