"""Where completions come from during evaluation: a local checkpoint or an OpenAI-compatible endpoint.

Both take a list of :class:`SampleRequest` and call ``on_done(request, completion)`` as each one finishes,
so the caller can append it to disk at once and lose at most the requests in flight when interrupted. A
local checkpoint also plays episodes (:meth:`LocalModelSource.play`: environments, harness agents, ``vf/``
tasksets), through the rollout path training uses.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from polyrl.envs.env_registry import EnvConfig
from polyrl.policy.generation import GENERATION_BATCH_SIZE, TransformersBackend
from polyrl.policy.prompts import PromptBuilder, PromptConfig, problem_text
from polyrl.rollout.dispatch import rollout_kind
from polyrl.tasks.base import Problem, Task, Verdict


@dataclass(frozen=True)
class SampleRequest:
    """One completion to produce: sample ``index`` of a problem (index 0 is the greedy one)."""

    key: str
    problem: Problem
    messages: list[dict[str, str]]
    greedy: bool
    temperature: float
    top_p: float
    max_new_tokens: int


@dataclass(frozen=True)
class Completion:
    text: str
    tokens: int | None
    """Completion length in tokens (None when an endpoint does not report usage)."""
    finished: bool
    """False when the response was cut at ``max_new_tokens``."""
    verdict: Verdict | None = None
    """An episode's own verdict (its environment's or agent's outcome); None: the text is verified."""


def plays_episodes(task: Task) -> bool:
    """Tasks whose rollout kind is episodic (environments, harness agents, ``vf/`` tasksets): the episode, not one
    completion's text, is what is scored."""
    return rollout_kind(task).episodic


OnDone = Callable[[SampleRequest, Completion], None]


class CompletionSource(Protocol):
    description: str
    modalities: frozenset[str]
    """What the model behind the source takes (text; text and images): a suite task showing more is refused."""

    def complete(self, requests: Sequence[SampleRequest], on_done: OnDone) -> None: ...


def chat_messages(problem: Problem, field: str, system: str | None, style: str | None = None) -> list[dict[str, str]]:
    """The chat a model is shown for ``problem`` (the same one PromptBuilder renders for training); ``style``
    natural shows the task's natural-language statement, terse (or None) the shorthand."""
    messages = [{"role": "user", "content": problem_text(problem, field, style)}]
    if system:
        messages.insert(0, {"role": "system", "content": system})
    return messages


class LocalModelSource:
    """Batched generation on a loaded checkpoint, ``batch_size`` sequences at a time (training's
    ``generation.batch_size`` unless told); greedy and sampled requests go in separate batches."""

    def __init__(
        self,
        policy,
        field: str,
        system: str | None,
        batch_size: int = GENERATION_BATCH_SIZE,
        seed: int = 0,
        style: str | None = None,
        env: EnvConfig | None = None,
    ):

        self.backend = TransformersBackend(policy.model, policy.tokenizer, batch_size=batch_size, device=policy.device)
        self.prompts = PromptBuilder(
            policy.tokenizer, PromptConfig(field=field, system=system, style=style), policy.image_input
        )
        self.batch_size = batch_size
        self.seed = seed
        self.env = env or EnvConfig()
        """Episodes' token budget and environment concurrency (a training config's ``env`` section)."""
        self.description = "local checkpoint"
        self.modalities = policy.modalities

    def complete(self, requests: Sequence[SampleRequest], on_done: OnDone) -> None:
        for greedy in (True, False):
            todo = [r for r in requests if r.greedy == greedy]
            for start in range(0, len(todo), self.batch_size):
                self._batch(todo[start : start + self.batch_size], on_done)

    def _batch(self, batch: list[SampleRequest], on_done: OnDone) -> None:
        first = batch[0]
        with torch.random.fork_rng():
            # seeded by the batch's first key, so a resumed evaluation samples the same way for that batch
            torch.manual_seed(self.seed + zlib.crc32(first.key.encode()))
            gens = self.backend.generate(
                [self.prompts.ids(r.problem) for r in batch],
                max_new_tokens=first.max_new_tokens,
                temperature=first.temperature,
                top_p=first.top_p,
                greedy=first.greedy,
            )
        for request, gen in zip(batch, gens):
            on_done(request, Completion(gen.text, len(gen.completion_ids), gen.finished))

    def play(self, requests: Sequence[SampleRequest], tasks: dict[str, Task], on_done: OnDone) -> None:
        """Each request one episode of its problem (``tasks``: name → task), played as training plays them
        (:func:`polyrl.rollout.rollout`: ``max_new_tokens`` per policy turn, ``env.max_episode_tokens`` in all),
        with the episode's own verdict; the completion's tokens are the policy's."""
        from polyrl.rollout import Sampling, rollout

        for greedy in (True, False):
            todo = [r for r in requests if r.greedy == greedy]
            for start in range(0, len(todo), self.batch_size):
                batch = todo[start : start + self.batch_size]
                first = batch[0]
                sampling = Sampling(
                    1,
                    first.max_new_tokens,
                    first.temperature,
                    first.top_p,
                    self.env.max_episode_tokens,
                    self.env.concurrency,
                )
                with torch.random.fork_rng():
                    torch.manual_seed(self.seed + zlib.crc32(first.key.encode()))
                    episodes = rollout([r.problem for r in batch], tasks, self.backend, self.prompts, sampling, greedy)
                for t in episodes:
                    tokens = sum(t.policy_mask) if t.policy_mask is not None else len(t.response_ids)
                    on_done(batch[t.group], Completion(t.text, tokens, t.finished, t.verdict))
