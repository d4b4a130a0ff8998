"""Three small OpenEnv environments, written as OpenEnv asks (``openenv`` 0.10), that polyrl trains on in process
(``env/openenv:openenv_envs:GuessNumber``) or served by uvicorn (``env/openenv:http://127.0.0.1:8000``):

* ``GuessNumber``: a typed action (``Guess(number: int)``), which polyrl offers the policy as a tool;
* ``SumTools``: an MCP environment (FastMCP tools ``add`` and ``submit``), played through ``ListToolsAction`` and
  ``CallToolAction``;
* ``Arithmetic``: a ``TaskProvider`` (train and test splits of sums, a real held-out split) whose action is one
  string (the policy's text), rewarded by a rubric with two named parts.

Serve one with ``uvicorn --factory openenv_envs:guess_app --port 8000`` (``PYTHONPATH=examples``).
"""

from __future__ import annotations

import random
import re

from fastmcp import FastMCP
from openenv.core import Environment, create_app
from openenv.core.env_server import CallToolAction, MCPEnvironment
from openenv.core.env_server.types import Action, Observation, State
from openenv.core.rubrics import Rubric


# -- a typed action: the policy calls it as a tool ------------------------------------------------------------
class Guess(Action):
    """Guess the hidden number."""

    number: int


class Feedback(Observation):
    message: str


class GuessNumber(Environment[Guess, Feedback, State]):
    """Find a number from 1 to 8 in four guesses; each wrong guess says higher or lower."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def reset(self, seed=None, episode_id=None, **kwargs) -> Feedback:
        self.target, self.guesses = random.Random(seed).randint(1, 8), 0
        return Feedback(message="Guess my number from 1 to 8. You have 4 guesses.")

    def step(self, action: Guess, timeout_s=None, **kwargs) -> Feedback:
        self.guesses += 1
        if action.number == self.target:
            return Feedback(message="Correct!", reward=1.0, done=True)
        hint = "higher" if action.number < self.target else "lower"
        return Feedback(message=f"{action.number} is wrong: go {hint}.", reward=0.0, done=self.guesses >= 4)

    @property
    def state(self) -> State:
        return State(step_count=self.guesses)


def guess_app():
    return create_app(GuessNumber, Guess, Feedback, max_concurrent_envs=64)


# -- an MCP environment: its tools are FastMCP functions --------------------------------------------------------
class Question(Observation):
    question: str


class SumTools(MCPEnvironment):
    """Add two numbers with the ``add`` tool, then ``submit`` the sum."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        mcp = FastMCP("sums")
        self.submitted = None

        @mcp.tool()
        def add(a: int, b: int) -> int:
            """Add two integers."""
            return a + b

        @mcp.tool()
        def submit(answer: int) -> str:
            """Submit the final answer."""
            self.submitted = answer
            return "correct" if answer == self.a + self.b else "wrong"

        super().__init__(mcp)

    def reset(self, seed=None, episode_id=None, **kwargs) -> Question:
        rng = random.Random(seed)
        self.a, self.b, self.submitted = rng.randint(10, 99), rng.randint(10, 99), None
        return Question(question=f"What is {self.a}+{self.b}? Use add, then submit the sum.")

    def _scored(self, observation):
        if self.submitted is not None:  # submit ends the episode: 1 for the right sum
            observation.reward, observation.done = float(self.submitted == self.a + self.b), True
        return observation

    def step(self, action, timeout_s=None, **kwargs):
        return self._scored(super().step(action, timeout_s=timeout_s, **kwargs))

    async def step_async(self, action, timeout_s=None, **kwargs):  # what the server calls
        return self._scored(await super().step_async(action, timeout_s=timeout_s, **kwargs))

    def _step_impl(self, action, timeout_s=None, **kwargs):
        raise ValueError(f"SumTools takes MCP actions only, not {type(action).__name__}")

    @property
    def state(self) -> State:
        return State()


def sums_app():
    return create_app(SumTools, CallToolAction, Observation, max_concurrent_envs=64)


# -- a TaskProvider with a real held-out split, a one-string action and a rubric ---------------------------------
class Answer(Action):
    text: str


class Prompt(Observation):
    question: str


def _sums(split: str) -> list[tuple[int, int]]:
    rng = random.Random(split)
    return [(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(40 if split == "train" else 20)]


class Correct(Rubric):
    def forward(self, action, observation) -> float:
        numbers = re.findall(r"-?\d+", action.text)
        return float(bool(numbers) and int(numbers[-1]) == observation.metadata["sum"])


class Concise(Rubric):
    def forward(self, action, observation) -> float:
        return 1.0 / (1 + len(action.text) / 20)


class Graded(Rubric):
    """Pays for the right sum; how concise the answer was is logged beside it, not paid."""

    def __init__(self):
        super().__init__()
        self.correct, self.concise = Correct(), Concise()

    def forward(self, action, observation) -> float:
        self.concise(action, observation)
        return self.correct(action, observation)


class Arithmetic(Environment[Answer, Prompt, State]):
    """Answer a sum; the task API serves 40 training sums and 20 test sums."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__(rubric=Graded())

    def list_splits(self):
        return ["train", "test"]

    def num_tasks(self, split):
        return len(_sums(split))

    def get_task(self, split, index):
        a, b = _sums(split)[index]
        return {"id": f"{split}-{index}", "a": a, "b": b}

    def reset(self, seed=None, episode_id=None, split="train", index=0, **kwargs) -> Prompt:
        self._reset_rubric()
        self.a, self.b = _sums(split)[index]
        return Prompt(question=f"What is {self.a}+{self.b}? Answer with the number.")

    def step(self, action: Answer, timeout_s=None, **kwargs) -> Prompt:
        observation = Prompt(question="", done=True, metadata={"sum": self.a + self.b})
        observation.reward = self._apply_rubric(action, observation)
        return observation

    @property
    def state(self) -> State:
        return State()


def arithmetic_app():
    return create_app(Arithmetic, Answer, Prompt, max_concurrent_envs=64)
