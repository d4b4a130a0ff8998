"""Text games with scripted oracles: ``env/twenty_questions``, ``env/wordle`` and ``env/grid_nav``.

Every game states its rules in the first message, answers each move with a short observation, and
has a scripted solver whose moves are the reference trajectory. Moves go inside ``<answer></answer>``
tags (a question in twenty questions is plain text ending in ``?``). The messages come in two wordings: the terse
one the tiny model learns and, for an instruction-tuned LM (``Environment.natural``), sentences that say what the
game is, what a move looks like and what each observation means.
"""

from __future__ import annotations

import random
import re
from collections import deque

from polyrl.envs.env_registry import EnvConfig, register_env
from polyrl.envs.environment import Environment, EnvTask, Message, StepResult
from polyrl.tasks.base import Example, Param, Problem

WORDS = tuple(
    [
        "apple",
        "brave",
        "crane",
        "drink",
        "eagle",
        "flame",
        "grape",
        "house",
        "input",
        "joker",
        "knife",
        "lemon",
        "mango",
        "night",
        "ocean",
        "piano",
        "queen",
        "river",
        "stone",
        "tiger",
        "uncle",
        "vivid",
        "whale",
        "young",
        "zebra",
        "adobe",
        "bacon",
        "cabin",
        "dance",
        "earth",
        "fable",
        "giant",
        "habit",
        "ivory",
        "jelly",
        "koala",
        "laser",
        "magic",
        "noble",
        "olive",
        "pearl",
        "quilt",
        "radar",
        "salad",
        "table",
        "ultra",
        "valve",
        "wagon",
        "yacht",
        "zonal",
        "amber",
        "blend",
        "candy",
        "delta",
        "ember",
        "fairy",
        "glory",
        "honey",
        "index",
        "jumbo",
        "karma",
        "lunar",
        "maple",
        "nerve",
        "orbit",
        "plaza",
        "quest",
        "robot",
        "scale",
        "tulip",
        "umbra",
        "vapor",
        "waltz",
        "arrow",
        "badge",
        "cider",
        "depot",
        "elbow",
        "frost",
        "gravy",
        "hotel",
        "irony",
        "jewel",
        "kneel",
        "latch",
        "mirth",
        "nylon",
        "onset",
        "prism",
        "quota",
        "raven",
        "shelf",
        "torch",
        "usher",
        "vault",
        "wheat",
        "yeast",
        "blink",
        "chess",
        "crisp",
        "dwarf",
        "flock",
    ]
)

# twenty questions: objects with attributes the oracle can answer about
OBJECTS = {
    "cat": ("animal", "small", "black"),
    "horse": ("animal", "large", "brown"),
    "frog": ("animal", "small", "green"),
    "whale": ("animal", "large", "blue"),
    "banana": ("food", "small", "yellow"),
    "pumpkin": ("food", "large", "orange"),
    "lime": ("food", "small", "green"),
    "bread": ("food", "small", "brown"),
    "truck": ("machine", "large", "blue"),
    "phone": ("machine", "small", "black"),
    "tractor": ("machine", "large", "green"),
    "radio": ("machine", "small", "brown"),
    "tulip": ("plant", "small", "yellow"),
    "oak": ("plant", "large", "brown"),
    "cactus": ("plant", "small", "green"),
    "maple": ("plant", "large", "orange"),
}
_ATTRS = sorted({a for attrs in OBJECTS.values() for a in attrs})


def wordle_feedback(guess: str, secret: str) -> str:
    """``G`` right letter right place, ``Y`` in the word elsewhere, ``.`` absent (repeats counted)."""
    marks = ["."] * 5
    left = [s for g, s in zip(guess, secret) if g != s]
    for i, (g, s) in enumerate(zip(guess, secret)):
        if g == s:
            marks[i] = "G"
        elif g in left:
            marks[i] = "Y"
            left.remove(g)
    return "".join(marks)


class GameEnvironment(Environment):
    """Shared move parsing: the move is the text inside answer tags (or None)."""

    def move(self, action: str) -> str | None:
        m = re.findall(r"<answer>(.*?)</answer>", action, re.DOTALL)
        return m[-1].strip().lower() if m else None

    def reply(self, text: str) -> StepResult:
        return self.out_of_turns() or StepResult([{"role": "user", "content": text}], 0.0, False)


class WordleEnvironment(GameEnvironment):
    def reset(self) -> list[Message]:
        if self.natural:
            text = (
                f"Let's play Wordle. I have picked a secret English word of 5 letters; find it in at most "
                f"{self.max_turns} guesses. Each turn, guess one 5-letter word and write it inside <answer></answer> "
                "tags. After each guess I tell you, letter by letter, whether the letter is in the right place, "
                "elsewhere in the secret word, or not in it at all. Use that to choose your next guess.\n"
                "What is your first guess? Reply with the word inside the tags, like <answer>crane</answer>."
            )
        else:
            text = (
                f"Guess the 5-letter word in {self.max_turns} tries. Feedback: G right place, "
                "Y elsewhere in the word, . absent. Guess inside <answer></answer>."
            )
        return [{"role": "user", "content": text}]

    def step(self, action: str) -> StepResult:
        self.turn += 1
        guess, secret = self.move(action), self.problem.answer
        if guess is None or not re.fullmatch(r"[a-z]{5}", guess):
            self.stats["invalid_actions"] += 1
            return self.reply("error: guess one 5-letter word inside <answer></answer>.")
        if guess == secret:
            return self.end(1.0, True, 1.0, "correct", guess)
        marks = wordle_feedback(guess, secret)
        if self.natural:
            said = {"G": "right place", "Y": "elsewhere in the word", ".": "not in the word"}
            letters = ", ".join(f"{g} {said[m]}" for g, m in zip(guess, marks))
            return self.reply(f"{guess} is not the word: {letters}. Guess again.")
        return self.reply(f"{guess} {marks}")


def wordle_solver(secret: str, opening: str | None = None) -> list[str]:
    """Open with ``opening`` (the list's first word by default), then guess the first word consistent with all
    feedback so far, in list order. Every (secret, opening) pair of the list is solved in at most 5 guesses."""
    guesses, candidates = [], list(WORDS)
    if opening is not None:
        candidates = [opening] + [w for w in candidates if w != opening]
    while True:
        guess = candidates[0]
        guesses.append(guess)
        if guess == secret:
            return guesses
        fb = wordle_feedback(guess, secret)
        candidates = [w for w in candidates if wordle_feedback(guess, w) == fb and w != guess]


class TwentyQuestionsEnvironment(GameEnvironment):
    def reset(self) -> list[Message]:
        names = ", ".join(self.problem.answer["candidates"])
        kinds = ", ".join(sorted({v[0] for v in OBJECTS.values()}))
        if self.natural:
            colors = ", ".join(sorted({v[2] for v in OBJECTS.values()}))
            text = (
                f"Let's play a guessing game. I am thinking of one of these objects: {names}. Find it by asking me "
                "yes/no questions, one question per turn, each about one property: its kind "
                f"({kinds}), its size (small or large) or its color ({colors}). Write the question as a "
                "short sentence ending with a question mark; I answer yes or no. When you know the object, write "
                "its name inside <answer></answer> tags: that is your guess, and it ends the game.\n"
                "What is your first question?"
            )
        else:
            text = (
                f"I am thinking of one of: {names}. Ask yes/no questions like 'Is it green?' "
                f"about kind ({kinds}), size or color, then guess inside <answer></answer>."
            )
        return [{"role": "user", "content": text}]

    def step(self, action: str) -> StepResult:
        self.turn += 1
        secret = self.problem.answer["secret"]
        guess = self.move(action)
        if guess is not None:
            return self.end(
                1.0 if guess == secret else 0.0,
                guess == secret,
                float(guess == secret),
                "correct" if guess == secret else "wrong",
                guess,
            )
        asked = [a for a in _ATTRS if re.search(rf"\b{a}\b", action.lower())]
        if "?" not in action or len(asked) != 1:
            self.stats["invalid_actions"] += 1
            return self.reply("I can only answer a question about one kind, size or color.")
        return self.reply("yes" if asked[0] in OBJECTS[secret] else "no")


def twenty_questions_solver(secret: str, candidates: list[str]) -> list[str]:
    """Ask about the attribute that best splits the remaining candidates, then guess."""
    left, moves = list(candidates), []
    while len(left) > 1:
        attr = min(_ATTRS, key=lambda a: abs(2 * sum(a in OBJECTS[c] for c in left) - len(left)))
        moves.append(f"Is it {attr}?")
        left = [c for c in left if (attr in OBJECTS[c]) == (attr in OBJECTS[secret])]
    return moves + [f"<answer>{left[0]}</answer>"]


_DIRS = {"north": (-1, 0), "south": (1, 0), "east": (0, 1), "west": (0, -1)}


class GridEnvironment(GameEnvironment):
    """The agent sees only its four neighbours and the goal's offset; walls are ``#``."""

    def __init__(self, problem: Problem, max_turns: int):
        super().__init__(problem, max_turns)
        self.pos = tuple(problem.answer["start"])

    def view(self) -> str:
        grid, (r, c) = self.problem.answer["grid"], self.pos
        gr, gc = self.problem.answer["goal"]
        sides = {d: "wall" if grid[r + dr][c + dc] == "#" else "open" for d, (dr, dc) in _DIRS.items()}
        if not self.natural:
            return f"{', '.join(f'{d} {side}' for d, side in sides.items())}. Goal: {gr - r} south, {gc - c} east."
        around = ", ".join(f"{d} {'a wall' if side == 'wall' else 'open'}" for d, side in sides.items())
        steps = [
            f"{abs(n)} step{'s' * (abs(n) != 1)} {way}"
            for n, way in ((gr - r, "south" if gr >= r else "north"), (gc - c, "east" if gc >= c else "west"))
            if n
        ]
        return f"Next to you: {around}. The goal is {' and '.join(steps)} of you."

    def reset(self) -> list[Message]:
        if self.natural:
            text = (
                "You are in a grid with walls and must walk to the goal. Each turn, move one step by writing one "
                "direction, north, south, east or west, inside <answer></answer> tags. You see only the four cells "
                f"next to you. {self.view()}\nWhich way do you move first? Reply with one of <answer>north</answer>, "
                "<answer>south</answer>, <answer>east</answer> or <answer>west</answer>."
            )
        else:
            text = f"Reach the goal. Move with <answer>north</answer> (or south, east, west). {self.view()}"
        return [{"role": "user", "content": text}]

    def step(self, action: str) -> StepResult:
        self.turn += 1
        move = self.move(action)
        if move not in _DIRS:
            self.stats["invalid_actions"] += 1
            return self.reply(f"error: move north, south, east or west. {self.view()}")
        dr, dc = _DIRS[move]
        r, c = self.pos[0] + dr, self.pos[1] + dc
        if self.problem.answer["grid"][r][c] == "#":
            return self.reply(f"{'You hit a wall and did not move' if self.natural else 'bump'}. {self.view()}")
        self.pos = (r, c)
        if list(self.pos) == self.problem.answer["goal"]:
            return self.end(1.0, True, 1.0, "reached_goal", move)
        return self.reply(self.view())


def grid_solver(grid: list[str], start: list[int], goal: list[int]) -> list[str] | None:
    """Shortest path by breadth-first search (the solver sees the whole grid)."""
    prev = {tuple(start): None}
    queue = deque([tuple(start)])
    while queue:
        cell = queue.popleft()
        if list(cell) == goal:
            path = []
            while prev[cell] is not None:
                cell, move = prev[cell]
                path.append(move)
            return path[::-1]
        for name, (dr, dc) in _DIRS.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if grid[nxt[0]][nxt[1]] != "#" and nxt not in prev:
                prev[nxt] = (cell, name)
                queue.append(nxt)
    return None


class GameTask(EnvTask):
    category = "game"

    def __init__(self, config: EnvConfig):
        super().__init__("tags")
        self.max_turns = config.max_turns or self.max_turns

    def check(self, answer: str, problem: Problem) -> float:
        return float(answer.strip().lower() == str(problem.solution))


class WordleTask(GameTask):
    name, description, max_turns = "env/wordle", "Wordle: guess a 5-letter word from letter feedback.", 6

    def make(self, rng, params) -> Example:
        secret = rng.choice(WORDS)
        return Example("Guess the 5-letter word.", secret, secret)

    def make_env(self, problem):
        return WordleEnvironment(problem, self.max_turns)

    def reference_actions(self, problem):
        # The opening varies with the problem: with one fixed opening every reference episode starts with the same
        # word, and a policy imitating them learns that word, not the use of feedback (SmolLM2 after SFT guessed
        # the fixed opening six times in every episode, docs/models.md).
        opening = random.Random(f"wordle-opening/{problem.split}/{problem.seed}").choice(WORDS)
        moves = wordle_solver(problem.answer, opening)
        return [f"<answer>{m}</answer>" for m in moves] if len(moves) <= self.max_turns else None


class TwentyQuestionsTask(GameTask):
    name, description, max_turns = "env/twenty_questions", "Find the hidden object with yes/no questions.", 8
    params = (Param("candidates", 4, 16, "objects the secret is drawn from"),)

    def make(self, rng, params) -> Example:
        candidates = rng.sample(sorted(OBJECTS), params["candidates"])
        secret = rng.choice(candidates)
        return Example(
            f"Find the hidden object among {', '.join(candidates)}.",
            {"secret": secret, "candidates": candidates},
            secret,
        )

    def make_env(self, problem):
        return TwentyQuestionsEnvironment(problem, self.max_turns)

    def reference_actions(self, problem):
        moves = twenty_questions_solver(problem.answer["secret"], problem.answer["candidates"])
        return moves if len(moves) <= self.max_turns else None


class GridNavTask(GameTask):
    name, description, max_turns = "env/grid_nav", "Walk to a goal in a walled grid seeing only adjacent cells.", 16
    params = (Param("size", 4, 8, "interior width and height"), Param("walls", 0, 12, "interior wall cells"))

    def make(self, rng, params) -> Example:
        n = params["size"]
        while True:
            grid = [["#"] * (n + 2)] + [["#"] + ["."] * n + ["#"] for _ in range(n)] + [["#"] * (n + 2)]
            cells = [(r, c) for r in range(1, n + 1) for c in range(1, n + 1)]
            picks = rng.sample(cells, params["walls"] + 2)
            start, goal = list(picks[0]), list(picks[1])
            for r, c in picks[2:]:
                grid[r][c] = "#"
            rows = ["".join(row) for row in grid]
            path = grid_solver(rows, start, goal)
            if path:
                return Example("Reach the goal.", {"grid": rows, "start": start, "goal": goal}, " ".join(path))

    def make_env(self, problem):
        return GridEnvironment(problem, self.max_turns)

    def reference_actions(self, problem):
        moves = problem.solution.split()
        return [f"<answer>{m}</answer>" for m in moves] if len(moves) <= self.max_turns else None


@register_env("wordle")
def wordle_env(argument: None, config: EnvConfig) -> WordleTask:
    return WordleTask(config)


@register_env("twenty_questions")
def twenty_questions_env(argument: None, config: EnvConfig) -> TwentyQuestionsTask:
    return TwentyQuestionsTask(config)


@register_env("grid_nav")
def grid_nav_env(argument: None, config: EnvConfig) -> GridNavTask:
    return GridNavTask(config)
