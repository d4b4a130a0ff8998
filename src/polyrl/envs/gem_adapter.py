"""``env/gem:<id>``: GEM's environments (the ``gem-llm`` package) as polyrl environments.

``env/gem:game:GuessTheNumber-v0-easy`` plays ``gem.make("game:GuessTheNumber-v0-easy")``, one instance per episode,
reset with the problem's seed. The policy's whole turn is the action (GEM's games read a move in ``\\boxed{...}``);
each step's reward is paid as it comes (summed into the return, held in [-1, 1]: :mod:`polyrl.envs.hub_episode`);
``terminated`` or ``truncated`` ends the episode, and so does polyrl's ``env.max_turns`` (default: the game's own
``max_turns``). An observation is GEM's text with its ``prefix`` and ``suffix`` (the board, "Enter your next guess.")
around it, as GEM's observation wrappers build it; GEM's history-concatenating wrappers are not used, since polyrl
renders the conversation itself (one user message per observation, environment tokens masked out of the loss).

GEM's ``reset(seed)`` seeds the global ``random`` and ``numpy`` generators and its games draw from them: every call
runs under the episode's :class:`~polyrl.envs.hub_episode.IsolatedRandom`, so episodes on ``env.concurrency`` threads
never share a stream and a run replays exactly. ``import gem`` configures the root logger (INFO to stderr); polyrl
puts the root logger back as it was.

Refused with one line (:data:`REFUSED`): Wordle, Hangman and WordSearch (NLTK word lists downloaded at run time);
``math:``, ``code:``, ``qa:``, ``logic:`` and ``eval:`` (a hub dataset downloaded at ``make``; MathEnv also grades
in a process pool per instance, or with ``signal.alarm``, which works on the main thread only; CodeEnv runs the
policy's code outside any sandbox); ``rg:`` (the same reasoning-gym datasets as polyrl's ``rg/<name>``, which scores
them in isolated workers). Reference episodes (for the SFT warm start) come from the solvers in
:data:`GEM_SOLVERS`: GuessTheNumber (binary search), Mastermind (the first code consistent with the feedback so far)
and TowerofHanoi (the optimal moves); a plugin adds one for another game (``register_gem_solver``).
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
from collections.abc import Callable
from itertools import permutations, product

from polyrl.envs.env_registry import EnvConfig, register_env
from polyrl.envs.environment import Environment, EnvTask, Message, StepResult
from polyrl.envs.hub_episode import SUCCESS_RETURN, BuiltByName, HubEnvironment, IsolatedRandom
from polyrl.errors import UserError
from polyrl.registry import Registry
from polyrl.tasks.base import Example, Problem

REFUSED = {
    "HangmanEnv": "downloads NLTK's word list at run time",
    "WordleEnv": "downloads NLTK's word list at run time",
    "WordSearchEnv": "downloads NLTK's word list at run time",
    "MathEnv": "downloads a hub dataset and grades in a process pool per instance (or with signal.alarm); "
    "serve the rows as a dataset task instead ({dataset: <hub name>, verifier: math})",
    "MathVisualEnv": "downloads a hub dataset of images",
    "CodeEnv": "downloads a hub dataset and runs the policy's code outside any sandbox",
    "QaEnv": "downloads a hub dataset; serve the rows as a dataset task instead ({dataset: <hub name>})",
    "ReasoningGymEnv": "is reasoning-gym's dataset, which polyrl plays as rg/<name> with isolated scoring",
}
"""GEM environment classes polyrl does not play, and why."""
DEFAULT_MAX_TURNS = 20
"""Turns of an episode when neither ``env.max_turns`` nor the game says."""


def _gem():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        import gem
    except ImportError:
        raise UserError(
            "env/gem needs the gem-llm package: bash scripts/setup.sh installs it "
            "(pip install --no-deps gem-llm==0.1.0: its pins of reasoning-gym, nltk and msgspec would break polyrl's)"
        ) from None
    finally:  # gem's import calls logging.basicConfig(level=INFO): every library's INFO lines would reach stderr
        root.handlers[:], root.level = handlers, level
    return gem


def _entry_class(spec) -> str:
    entry = spec.entry_point
    return entry.rpartition(":")[2] if isinstance(entry, str) else getattr(entry, "__name__", str(entry))


GEM_SOLVERS: Registry[Callable] = Registry(
    "GEM reference solver", "polyrl.gem_solvers", builtins=("polyrl.envs.gem_adapter",)
)
"""GEM environment class name → a solver that reads the game just reset and returns the moves of a winning episode
(the SFT warm start's reference); a plugin adds one for another game with :func:`register_gem_solver`."""


def register_gem_solver(name: str) -> Callable[[Callable], Callable]:
    """Decorator: ``solver(env) -> list[str]`` gives the reference moves of GEM's class ``name`` (``GuessTheNumberEnv``)."""
    return GEM_SOLVERS.register(name)


@register_gem_solver("GuessTheNumberEnv")
def _guess_the_number(env) -> list[str]:
    """Binary search over the game's range: what the feedback (higher/lower) lets a player do."""
    low, high, moves = env.min_number, env.max_number, []
    while low <= high:
        guess = (low + high) // 2
        moves.append(f"\\boxed{{{guess}}}")
        if guess == env.game_number:
            return moves
        low, high = (guess + 1, high) if guess < env.game_number else (low, guess - 1)
    return moves


def _pegs(code: tuple, guess: tuple) -> tuple[int, int]:
    """Mastermind's feedback: digits in the right place (black), right digits in the wrong place (white)."""
    black = sum(c == g for c, g in zip(code, guess))
    return black, sum(min(code.count(d), guess.count(d)) for d in set(guess)) - black


@register_gem_solver("MastermindEnv")
def _mastermind(env) -> list[str]:
    """Guess the first code consistent with every feedback so far (what the pegs let a player do)."""
    digits, length = range(1, env.num_numbers + 1), env.code_length
    candidates = list(product(digits, repeat=length) if env.duplicate_numbers else permutations(digits, length))
    secret, moves = tuple(env.game_code), []
    while candidates:
        guess = candidates[0]
        moves.append(f"\\boxed{{{' '.join(map(str, guess))}}}")
        if guess == secret:
            break
        feedback = _pegs(secret, guess)
        candidates = [c for c in candidates if _pegs(c, guess) == feedback]
    return moves


@register_gem_solver("TowerofHanoiEnv")
def _tower_of_hanoi(env) -> list[str]:
    """The 2^n - 1 moves that carry the tower from A to C."""
    moves: list[str] = []

    def carry(n: int, source: str, target: str, spare: str) -> None:
        if n:
            carry(n - 1, source, spare, target)
            moves.append(f"\\boxed{{{source} {target}}}")
            carry(n - 1, spare, target, source)

    carry(env.num_disks, "A", "C", "B")
    return moves


def _observation(text: str, info: dict) -> str:
    text = f"{info.get('prefix', '')}{text}"
    suffix = info.get("suffix")
    if suffix:
        text = f"{text}{'' if text.endswith(chr(10)) or not text else chr(10)}{suffix}"
    return text.strip()


class GemEpisode(HubEnvironment):
    """One GEM instance, made and stepped under the episode's own random state."""

    def __init__(self, problem: Problem, task: GemTask):
        super().__init__(problem, task.max_turns, task.env_config.tool_format)  # GEM reads no tool calls
        self.task = task
        self.seed = int(problem.answer["gem_seed"])
        self.random = IsolatedRandom(self.seed)
        self.env = None

    def reset(self) -> list[Message]:
        with self.random.active():
            self.env = self.task.gem.make(self.task.gem_id)
            text, info = self.env.reset(seed=self.seed)
        return [{"role": "user", "content": _observation(text, info)}]

    def step(self, action: str) -> StepResult:
        self.turn += 1
        with self.random.active():
            text, reward, terminated, truncated, info = self.env.step(action)
        invalid = reward == self.task.format_error_reward
        self.stats["invalid_actions"] += invalid
        paid = self.pay(reward)
        if terminated or truncated:
            if self.total >= SUCCESS_RETURN:
                reason = "solved"
            elif truncated:
                reason = "max_turns"
            else:
                reason = "invalid_action" if invalid else "game_over"
            return self.finish(paid, reason, action)
        return self.go_on(paid, [{"role": "user", "content": _observation(text, info)}], action)

    def close(self) -> None:
        self.env = None


class GemTask(BuiltByName, EnvTask):
    category = "game"
    description = "A GEM environment."

    def __init__(self, gem_id: str, config: EnvConfig):
        super().__init__("tags")
        self.gem = _gem()
        self.env_config = config
        from gem.envs.registration import ENV_REGISTRY
        from gem.utils.constants import LanguageGameReward

        if gem_id not in ENV_REGISTRY:
            close = difflib.get_close_matches(gem_id, list(ENV_REGISTRY), n=3)
            hint = (
                f"; did you mean {', '.join(close)}?" if close else " (gem.envs.registration.ENV_REGISTRY lists them)"
            )
            raise UserError(f"env/gem: GEM has no environment {gem_id!r}{hint}")
        self.entry = _entry_class(ENV_REGISTRY[gem_id])
        if self.entry in REFUSED:
            raise UserError(f"env/gem:{gem_id} is not supported: GEM's {self.entry} {REFUSED[self.entry]}")
        self.gem_id = gem_id
        self.format_error_reward = LanguageGameReward.format_error_reward
        self.max_turns = config.max_turns or self._game_turns()
        self.description = f"GEM's {gem_id} ({self.entry})"

    def _game_turns(self) -> int:
        with IsolatedRandom(0).active():
            turns = getattr(self.gem.make(self.gem_id), "max_turns", None)
        return int(turns) if isinstance(turns, int) and turns > 0 else DEFAULT_MAX_TURNS

    def problem_from(self, ex: Example, *args, **kwargs) -> Problem:
        """The problem, its prompt the bare question: the game states its own rules and move format (``\\boxed``),
        polyrl's answer tags play no part."""
        problem = super().problem_from(ex, *args, **kwargs)
        return dataclasses.replace(problem, prompt=problem.question)

    def make(self, rng, params) -> Example:
        seed = rng.randrange(2**31)
        return Example(f"Play {self.gem_id}.", {"gem_seed": seed}, self._solution(seed))

    def _solution(self, seed: int) -> str | None:
        """The reference moves of the game ``seed`` deals, one per line (None for a game without a solver)."""
        solver = GEM_SOLVERS.get(self.entry)
        if solver is None:
            return None
        with IsolatedRandom(seed).active():  # the game the episode will reset to
            env = self.gem.make(self.gem_id)
            env.reset(seed=seed)
            return "\n".join(solver(env))

    def check(self, answer: str, problem: Problem) -> float:
        return 0.0  # only a played episode can win

    def make_env(self, problem: Problem) -> Environment:
        return GemEpisode(problem, self)

    def reference_actions(self, problem: Problem) -> list[str] | None:
        moves = problem.solution.split("\n") if problem.solution else None
        return moves if moves and len(moves) <= self.max_turns else None


@register_env("gem", needs_argument=True)
def gem_env(argument: str, config: EnvConfig) -> GemTask:
    return GemTask(argument, config)
