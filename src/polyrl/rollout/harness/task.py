"""The harness task kind: a task's problems, each episode driven by the user's own agent function through
the local OpenAI-compatible endpoint (``tasks: [{name: addition, harness: "mymod:agent"}]``).

The agent is ``def agent(client, problem)`` or ``async def agent(client, problem)``: ``client`` is an
``openai.OpenAI`` (``openai.AsyncOpenAI`` for a coroutine function) pointed at the episode's base URL; an
agent whose first parameter is named ``base_url`` gets the URL instead, for any framework that takes one.
It returns the episode's reward: a number, a mapping (``reward``, optionally ``correct: bool`` and further
named numbers, each logged as a reward term), or None to have the task's verifier score the last completion.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from polyrl.errors import UserError
from polyrl.tasks.base import DEFAULT_DIFFICULTY, Difficulty, DifficultySpace, Problem, Task, Verdict
from polyrl.tasks.prefixes import TaskRequest, register_task_prefix
from polyrl.tasks.resolve import HARNESS, inner, route


class HarnessSpec(BaseModel):
    """How a task's episodes are driven by the user's agent function (a string is ``fn`` alone)."""

    model_config = ConfigDict(extra="forbid")

    fn: str | None = Field(
        None, description="The agent function, 'package.module:function' (sync or async); vf/ tasks bring their own."
    )
    timeout_s: float = Field(
        120.0, gt=0, description="Wall-clock limit of one episode's agent; then it ends as timeout and is abandoned."
    )
    concurrency: int = Field(
        128,
        ge=1,
        description="Episodes whose agent runs at once (each on a thread of its own, a coroutine on its own loop).",
    )
    batch_wait_s: float = Field(
        0.2, ge=0, description="Generate the waiting requests once no other agent's request has come for this long."
    )

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value):
        return {"fn": value} if isinstance(value, str) else value


def load_agent(path: str) -> Callable[..., Any]:
    """The function at ``"package.module:function"``; a problem is a one-line UserError naming ``path``."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise UserError(f"harness {path!r} must be written 'package.module:function'")
    try:
        fn: Any = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or the module's own error on import
        raise UserError(f"harness {path!r}: cannot import {module_name!r} ({type(exc).__name__}: {exc})") from None
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise UserError(f"harness {path!r}: module {module_name!r} has no attribute {attr!r}")
    if not callable(fn):
        raise UserError(f"harness {path!r} is not a function")
    params = [
        p for p in inspect.signature(fn).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(params) < 2:
        raise UserError(f"harness {path!r} must take (client_or_base_url, problem)")
    return fn


class HarnessTask(Task):
    """``inner``'s problems (generator, difficulty, verifier), played by an agent function."""

    rollout_kind = "harness"
    """Its problems are played by the agent (:func:`polyrl.rollout.harness.rollout.rollout_harness`)."""

    def __init__(self, inner: Task, spec: HarnessSpec, agent: Callable[..., Any] | None = None):
        super().__init__(inner.answer_format)
        self.inner, self.spec = inner, spec
        if agent is None and spec.fn is None:
            raise UserError(f"task {inner.name!r}: harness needs fn: 'package.module:function'")
        self.agent = agent or load_agent(spec.fn)
        self.name = inner.name
        self.category = getattr(inner, "category", "agent")
        self.description = f"{inner.name} played by {spec.fn}"
        self.partial_credit = inner.partial_credit
        self.pure = inner.pure
        self.is_async = inspect.iscoroutinefunction(self.agent)
        self.warned: set[str] = set()
        """The failures of this task's episodes already warned about (each is warned about once)."""
        first = next(iter(inspect.signature(self.agent).parameters))
        self.wants_url = first == "base_url"
        if not self.wants_url and importlib.util.find_spec("openai") is None:
            raise UserError(
                f"harness {spec.fn!r} gets an openai client, which needs the openai package: pip install openai"
            )

    def difficulty_space(self) -> DifficultySpace:  # type: ignore[override]
        return self.inner.difficulty_space()

    def generate(self, seed: int, difficulty: Difficulty = DEFAULT_DIFFICULTY, split: str = "train") -> Problem:
        return self.inner.generate(seed, difficulty, split)

    def make(self, rng, params):
        return self.inner.make(rng, params)

    def check(self, answer, problem):
        return self.inner.check(answer, problem)

    def verify(self, problem: Problem, response: str) -> Verdict:
        return self.inner.verify(problem, response)

    def reference_response(self, problem: Problem) -> str | None:
        """None: an agent's episode has no single reference response to imitate."""
        return None

    def client(self, base_url: str, http_client):
        """The OpenAI client (async for a coroutine agent) an agent that does not take the URL gets as its first
        argument, on ``http_client`` (the episode's own: :func:`polyrl.rollout.harness.agents.start_agent`)."""
        import openai

        cls = openai.AsyncOpenAI if self.is_async else openai.OpenAI
        return cls(
            base_url=base_url, api_key="polyrl", max_retries=0, timeout=self.spec.timeout_s, http_client=http_client
        )


@register_task_prefix(HARNESS)
def _played_by_agent(request: TaskRequest) -> HarnessTask:
    """A training-mix entry with ``harness:``: its task (resolved as any name is), played by the user's agent."""
    if request.harness is None:  # a name written "harness:...": no entry option to play it (and no end to routing)
        raise UserError(
            f"unknown task {request.name!r}: an agent plays a task named in its own entry, e.g. "
            "{name: addition, harness: 'mymod:agent'}, not through a 'harness:' task name"
        )
    return HarnessTask(route(inner(request)), request.harness)
