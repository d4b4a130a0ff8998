"""A crop-and-zoom test environment: the first turn is answered with a zoomed quarter of the problem's picture, the
second ends the episode. What the tests of pictures in multi-turn episodes run, as a task object
(:class:`ZoomTask`) or by name: :func:`registered_zoom` registers ``env/zoom:<task>`` for ``polyrl train``;
:func:`zoom_episodes` plays such episodes with a policy in process, recording what each generate call read."""

from contextlib import contextmanager

import numpy as np
import torch

from polyrl.device import HOST
from polyrl.envs.env_registry import ENVS, register_env
from polyrl.envs.environment import Environment, StepResult
from polyrl.envs.wrapped import WrappedTask
from polyrl.forward.batch import collate
from polyrl.forward.logprobs import sequence_logprobs
from polyrl.policy.generation import TransformersBackend
from polyrl.rollout.episodes import rollout_episodes
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


class Recording:
    """A backend that keeps what each generate call read and returned."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def generate(self, prompts, **kwargs):
        gens = self.inner.generate(prompts, **kwargs)
        self.calls.append((list(prompts), gens))
        return gens


def zoom_episodes(policy, prompts, turns: int, group_size: int, max_new_tokens: int, max_episode_tokens: int):
    """Crop-and-zoom episodes of ``turns`` turns on ``count_shapes`` problems 0 and 1 (easy), ``group_size`` of
    each, that ``policy`` plays in process from torch seed 0 at temperature 1; returns the trajectories and the
    calls of the generation backend (``(prompts read, generations)`` a call)."""
    task = ZoomTask(get_task("count_shapes"), turns)
    backend = Recording(TransformersBackend(policy.model, policy.tokenizer, device=HOST))
    problems = [task.generate(s, "easy") for s in range(2)]
    torch.manual_seed(0)
    trajs = rollout_episodes(
        problems,
        {task.name: task},
        backend,
        prompts,
        group_size,
        max_new_tokens,
        max_episode_tokens,
        temperature=1.0,
        top_p=1.0,
    )
    return trajs, backend.calls


def scored_and_sampled(model, trajs, calls) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """For each episode of :func:`zoom_episodes` whose every episode lives all its turns: the training forward's
    log-probs of its policy tokens, and those generation sampled them with, turn after turn (row ``i`` of each
    call is episode ``i``)."""
    batch = collate([(t.prompt_ids, t.response_ids) for t in trajs], 0, [t.policy_mask for t in trajs])
    with torch.no_grad():
        logp, _ = sequence_logprobs(model, batch)
    sampled = [[lp for _, gens in calls for lp in gens[i].logprobs] for i in range(len(trajs))]
    return [(logp[i][batch.loss_mask[i].bool()], torch.tensor(sampled[i])) for i in range(len(trajs))]
