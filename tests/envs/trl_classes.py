"""Environment classes in TRL's ``environment_factory`` shape, for the env/trl tests (importable as
``trl_classes``: ``tests/envs`` is on the path)."""

import asyncio
import random
from typing import ClassVar


class Recorder:
    """Records what ``reset`` was given; its tools exercise the tool loop."""

    made = 0
    resets: ClassVar[list] = []

    def __init__(self):
        Recorder.made += 1
        self.hits = 0

    def reset(self, **row):
        Recorder.resets.append(row)
        self.hits = 0
        return " Go."

    def hit(self, times: int) -> str:
        """Hit the target.

        Args:
            times: How many times.
        """
        self.hits += times
        return f"hits: {self.hits}"

    def explode(self) -> str:
        """A tool that fails."""
        raise ValueError("boom")

    async def wait(self, seconds: float) -> str:
        """An async tool.

        Args:
            seconds: How long.
        """
        await asyncio.sleep(0)
        return f"waited {seconds}"

    def get_reward(self) -> float:
        return min(self.hits, 3) / 3

    def _private(self):
        return "not a tool"


class DrawsItsGame:
    """Draws its secret in ``reset`` from the global generator, as TRL classes do."""

    def reset(self, **kwargs):
        self.secret = random.randint(1, 1000)
        return f" secret {self.secret}"

    def get_reward(self) -> float:
        return 0.0


class NoReset:
    def step(self, x: int) -> int:
        """Step.

        Args:
            x: a number
        """
        return x


class Undocumented:
    def reset(self, **kwargs):
        return None

    def act(self, x):
        return x


class Broken:
    def __init__(self):
        raise RuntimeError("no licence key")

    def reset(self, **kwargs):
        return None


NOT_CALLABLE = 3
