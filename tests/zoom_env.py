"""A crop-and-zoom test environment: the first turn is answered with a zoomed quarter of the problem's picture, the
second ends the episode. What the tests of pictures in multi-turn episodes run, as a task object
(:class:`ZoomTask`) or by name: :func:`registered_zoom` registers ``env/zoom:<task>`` for ``polyrl train``."""

from contextlib import contextmanager

import numpy as np

from polyrl.envs.env_registry import ENVS, register_env
from polyrl.envs.environment import Environment, StepResult
from polyrl.envs.wrapped import WrappedTask
from polyrl.tasks import get_task


class ZoomEnvironment(Environment):
    """Every turn but the last: any text, answered with the top-left quarter of the last picture shown, blown up to
    its size; the last turn: the answer, scored by the wrapped task's verifier."""

    def reset(self):
        self.shown = self.problem.images[0]
        return [{"role": "user", "content": self.problem.prompt}]

    def step(self, action):
        self.turn += 1
        if self.turn < self.max_turns:
            pixels = np.asarray(self.shown)
            crop = pixels[: pixels.shape[0] // 2, : pixels.shape[1] // 2]
            self.shown = crop.repeat(2, axis=0).repeat(2, axis=1)
            return StepResult([{"role": "user", "content": "zoomed", "images": [self.shown]}], 0.0, False)
        verdict = self.inner.verify(self.problem, action)
        return self.end(verdict.score, verdict.correct, verdict.score, "answered")


class ZoomTask(WrappedTask):
    """``env/zoom:<task>``: a visual task played as a crop-and-zoom episode of ``max_turns`` turns, a zoomed picture after each but the last."""

    def __init__(self, task, max_turns: int = 2):
        super().__init__(task, max_turns)
        self.name = f"env/zoom:{task.name}"

    def make_env(self, problem):
        env = ZoomEnvironment(problem, self.max_turns)
        env.inner = self.inner
        return env


@contextmanager
def registered_zoom():
    """``env/zoom:<task>`` registered while the block runs."""
    register_env("zoom", needs_argument=True)(lambda argument, config: ZoomTask(get_task(argument)))
    try:
        yield
    finally:
        ENVS.remove("zoom")
