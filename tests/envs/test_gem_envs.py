"""``env/gem:<id>``: GEM's games as polyrl environments (offline: GuessTheNumber, Mastermind, TowerofHanoi)."""

import logging
import random

import numpy as np
import pytest
from rollout_sampling import sampling
from system_packages import hub_package

from polyrl.envs import get_env_task
from polyrl.envs.latency import LatencyModel, with_latency
from polyrl.errors import UserError
from polyrl.rewards import RewardConfig, score
from polyrl.rollout import rollout

hub_package("gem", "gem-llm is installed by scripts/setup.sh (pip install --no-deps gem-llm==0.1.0)")

GAMES = ("game:GuessTheNumber-v0-easy", "game:Mastermind-v0-easy", "game:TowerofHanoi-v0-easy")


def test_gem_and_reasoning_gym_import_and_work_side_by_side():
    """gem-llm pins reasoning-gym 0.1.23 and imports it; polyrl needs 0.1.25: both work in one process."""
    import gem
    import reasoning_gym

    from polyrl.tasks import get_task

    assert "rg:basic_arithmetic" in gem.envs.registration.ENV_REGISTRY  # gem read reasoning-gym's datasets
    entry = reasoning_gym.create_dataset("basic_arithmetic", size=1, seed=0)[0]
    assert reasoning_gym.create_dataset("basic_arithmetic", size=1, seed=0).score_answer(entry["answer"], entry) == 1.0
    task = get_task("rg/basic_arithmetic")
    problem = task.generate(0)
    assert task.verify(problem, task.reference_response(problem)).correct
    game = gem.make(GAMES[0])
    game.reset(seed=1)
    assert game.step("\\boxed{3}")[2] in (True, False)


def test_importing_gem_through_polyrl_leaves_the_root_logger_as_it_was():
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    get_env_task(f"env/gem:{GAMES[0]}")
    assert (list(root.handlers), root.level) == before


@pytest.mark.parametrize("game", GAMES)
def test_a_reference_episode_solves_the_game_its_problem_deals(game):
    task = get_env_task(f"env/gem:{game}")
    for seed in range(5):
        problem = task.generate(seed)
        moves = task.reference_actions(problem)
        env = task.make_env(problem)
        env.reset()
        results = [env.step(move) for move in moves]
        assert [r.done for r in results] == [False] * (len(moves) - 1) + [True]
        assert results[-1].info["success"] and results[-1].info["end_reason"] == "solved"
        assert sum(r.reward for r in results) == 1.0


def test_a_gem_problem_asks_for_no_answer_tags_since_the_game_states_its_own_move_format():
    """The game's first observation gives the rules and the ``\\boxed`` move format; the problem's prompt (what
    ``polyrl tasks show`` prints, what the eval key hashes) is the bare question, as for env/openenv and env/trl."""
    task = get_env_task(f"env/gem:{GAMES[0]}")
    problem = task.generate(0)
    assert problem.prompt == problem.question == f"Play {GAMES[0]}."
    first = task.make_env(problem).reset()[0]["content"]
    assert "\\boxed" in first and task.answer_format.instruction() not in first


def test_a_game_without_a_solver_has_no_reference_episode():
    task = get_env_task("env/gem:game:Minesweeper-v0-easy")
    problem = task.generate(0)
    assert problem.solution is None and task.reference_actions(problem) is None


def test_a_move_the_game_cannot_read_ends_it_as_an_invalid_action_with_gems_format_penalty():
    task = get_env_task(f"env/gem:{GAMES[1]}")
    env = task.make_env(task.generate(0))
    first = env.reset()
    assert "Mastermind" in first[0]["content"] and first[0]["role"] == "user"
    going = env.step("\\boxed{1 2}")
    assert not going.done and going.observation[0]["role"] == "user"
    end = env.step("no idea")
    assert end.done and end.reward == pytest.approx(-0.1)  # GEM's format-error reward, paid as it comes
    assert end.info["end_reason"] == "invalid_action" and env.stats["invalid_actions"] == 1
    assert end.info["score"] == 0.0 and not end.info["success"]


def test_the_turn_limit_is_the_games_own_unless_env_max_turns_says(monkeypatch):
    from polyrl.envs import EnvConfig

    assert get_env_task(f"env/gem:{GAMES[0]}").max_turns == 4  # GuessTheNumber-v0-easy: 4 guesses
    assert get_env_task(f"env/gem:{GAMES[0]}", EnvConfig(max_turns=2)).max_turns == 2


def test_an_episode_leaves_the_global_random_generators_alone():
    task = get_env_task(f"env/gem:{GAMES[2]}")
    random.seed(5)
    np.random.seed(5)
    expected = (random.random(), float(np.random.rand()))
    random.seed(5)
    np.random.seed(5)
    env = task.make_env(task.generate(3))
    env.reset()  # GEM's reset seeds the global generators; the episode's own state takes that
    env.step("\\boxed{A C}")
    assert (random.random(), float(np.random.rand())) == expected


def test_stepping_games_on_many_threads_gives_the_trajectories_of_stepping_them_one_by_one(prompts, scripted):
    """GEM seeds the global generators in reset and draws from them (Game2048 in every move). Each step waits a few
    milliseconds first (drawn per episode), so that on threads the episodes draw in another order than one by one:
    without the isolation they deal other tiles and this test fails."""
    games = (*GAMES, "game:Game2048-v0-easy")
    latency = LatencyModel("lognormal", median_s=0.003, p99_over_p50=5)
    tasks = {t.name: with_latency(t, latency) for t in (get_env_task(f"env/gem:{g}") for g in games)}
    problems = [task.generate(seed) for task in tasks.values() for seed in range(3)]
    rng = random.Random(0)

    def moves(prompt_text):  # varied moves, some invalid, so that the games take different paths
        if "2048" in prompt_text:  # long games: every move draws a new tile
            return rng.choice(["\\boxed{up}", "\\boxed{left}", "\\boxed{down}", "\\boxed{right}"])
        return rng.choice(["\\boxed{3}", "\\boxed{1 2}", "\\boxed{A C}", "\\boxed{5 1}", "hmm"])

    def play(concurrency):
        rng.seed(0)
        for task in tasks.values():
            task._episodes.clear()  # the next run numbers the episodes of each problem from 0 again
        trajs = rollout(problems, tasks, scripted(moves), prompts, sampling(4, 16, env_concurrency=concurrency))
        score(trajs, tasks, RewardConfig(), 16)
        return [(t.task, t.response_ids, t.policy_mask, t.turn_rewards, t.verdict.reason) for t in trajs]

    one, many = play(1), play(6)
    assert many == one
    assert len({len(r[3]) for r in one}) > 1  # episodes of several lengths: the games took different paths


@pytest.mark.parametrize(
    ("game", "why"),
    [
        ("game:Wordle-v0-easy", "downloads NLTK's word list"),
        ("math:GSM8K", "grades in a process pool"),
        ("code:CodeContest", "runs the policy's code outside any sandbox"),
        ("rg:countdown", "plays as rg/<name>"),
    ],
)
def test_gem_environments_that_need_downloads_or_unsafe_grading_are_refused_in_one_line(game, why):
    with pytest.raises(UserError, match=why) as info:
        get_env_task(f"env/gem:{game}")
    assert "\n" not in str(info.value)


def test_an_unknown_gem_id_is_one_line_with_the_closest_ids():
    with pytest.raises(UserError, match=r"GEM has no environment 'game:GuesTheNumber-v0-easy'; did you mean game:Gue"):
        get_env_task("env/gem:game:GuesTheNumber-v0-easy")


def test_without_gem_installed_the_error_names_how_to_install_it(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "gem", None)  # import gem now raises ImportError
    with pytest.raises(UserError, match=r"needs the gem-llm package: bash scripts/setup\.sh"):
        get_env_task(f"env/gem:{GAMES[0]}")
