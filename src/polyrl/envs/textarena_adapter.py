"""``env/textarena:<Game-v0>``: TextArena's single-player games as polyrl environments.

Needs the optional ``textarena`` package (``pip install 'polyrl[envs]'``). The games that work offline
are listed in :data:`OFFLINE_GAMES`; others (Wordle, Hangman, … download NLTK data; TwentyQuestions needs
a hosted LLM) are refused with a clear error. A problem is a game seed: the game draws its own puzzle
from it, so problems are reproducible but have no reference trajectory.
"""

from __future__ import annotations

from polyrl.envs.env_registry import EnvConfig, register_env
from polyrl.envs.environment import Environment, EnvTask, Message, StepResult
from polyrl.errors import UserError
from polyrl.tasks.base import Example, Problem

OFFLINE_GAMES = (
    "Bandit-v0",
    "Blackjack-v0",
    "Countdown-v0",
    "Crosswords-v0",
    "Cryptarithm-v0",
    "FrozenLake-v0",
    "GuessTheNumber-v0",
    "LightsOut-v0",
    "Mastermind-v0",
    "Minesweeper-v0",
    "PegJump-v0",
    "RushHour-v0",
    "Sokoban-v0",
    "Sudoku-v0",
    "TowerOfHanoi-v0",
)


def _textarena():
    try:
        import textarena
    except ImportError:
        raise UserError("env/textarena needs the textarena package: pip install 'polyrl[envs]'") from None
    return textarena


class TextArenaEnvironment(Environment):
    """Observations are the new part of the game's running transcript; the game's final reward for
    player 0 is the episode reward. TextArena pays a win 1 and a lost game its share of progress (GuessTheNumber:
    how close the last guess was, also after an invalid move), so ``success`` is a reward of 1, and the score is
    the reward clipped to [0, 1]."""

    def __init__(self, problem: Problem, game: str, max_turns: int):
        super().__init__(problem, max_turns)
        self.env = _textarena().make(game)
        self.seen = ""

    def _observe(self) -> str:
        _, obs = self.env.get_observation()
        obs = obs if isinstance(obs, str) else "\n".join(str(o[-1] if isinstance(o, tuple) else o) for o in obs)
        new = obs[len(self.seen) :] if obs.startswith(self.seen) else obs
        self.seen = obs
        return new.strip()

    def reset(self) -> list[Message]:
        self.env.reset(num_players=1, seed=self.problem.answer["game_seed"])
        return [{"role": "user", "content": self._observe()}]

    def step(self, action: str) -> StepResult:
        self.turn += 1
        done, _info = self.env.step(action)
        if done or self.turn >= self.max_turns:
            rewards, game_info = self.env.close()
            reward = float((rewards or {}).get(0, 0.0))
            reason = "game_over" if done else "max_turns"
            if (game_info or {}).get(0, {}).get("invalid_move"):
                self.stats["invalid_actions"] += 1
                reason = "invalid_move"
            won = reward >= 1.0 and reason == "game_over"
            return self.end(reward, won, min(max(reward, 0.0), 1.0), reason, action.strip()[-200:])
        text = self._observe()
        if "invalid move" in text.lower():
            self.stats["invalid_actions"] += 1
        return StepResult([{"role": "user", "content": text}], 0.0, False)


class TextArenaTask(EnvTask):
    category = "game"
    description = "A TextArena single-player game."

    def __init__(self, game: str, config: EnvConfig):
        super().__init__("tags")
        if game not in OFFLINE_GAMES:
            raise UserError(f"textarena game {game!r} is not supported offline; use one of {', '.join(OFFLINE_GAMES)}")
        _textarena()
        self.game = game
        self.max_turns = config.max_turns or 20

    def make(self, rng, params) -> Example:
        return Example(f"Play {self.game}.", {"game_seed": rng.randrange(2**31)}, None)

    def check(self, answer: str, problem: Problem) -> float:
        return 0.0  # only a played episode can win

    def make_env(self, problem: Problem) -> Environment:
        return TextArenaEnvironment(problem, self.game, self.max_turns)


@register_env("textarena", needs_argument=True)
def textarena_env(argument: str, config: EnvConfig) -> TextArenaTask:
    return TextArenaTask(argument, config)
