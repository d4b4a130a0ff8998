"""Task-name prefixes: how a name that is not a registered task becomes one.

``rg/<dataset>`` (reasoning-gym), ``compose/<op>+<op>`` (string-op chains), ``env/<name>[:<argument>]``
(environments), ``vf/<module>:<taskset>`` (verifiers tasksets) and ``harness:`` (a training-mix entry whose
episodes the user's agent plays) are each a :data:`TASK_PREFIXES` entry, registered by the module that owns
it with :func:`register_task_prefix`; :func:`polyrl.tasks.resolve.resolve_task` routes every name through them.
A plugin adds a prefix of its own through the ``polyrl.task_prefixes`` entry-point group.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from polyrl.registry import Registry
from polyrl.tasks.answers import AnswerFormat
from polyrl.tasks.base import Task

__all__ = ["TASK_PREFIXES", "TaskPrefix", "TaskRequest", "prefix_of", "register_task_prefix", "with_answer_format"]

RG_PREFIX = "rg/"


@dataclass(frozen=True)
class TaskRequest:
    """What one task name is resolved with: the name and the options of its training-mix entry."""

    name: str
    answer_format: Any = None
    """An ``AnswerFormat`` (or its name) for the task and every task it wraps; None: the tasks' own."""
    env: Any = None
    """The ``EnvConfig`` of the run (``env/`` names); None: the defaults."""
    harness: Any = None
    """The entry's ``HarnessSpec``: its episodes are played by the user's agent."""


@dataclass(frozen=True)
class TaskPrefix:
    """A registered prefix: the function that makes the task of a name with it, and whether that task plays
    the entry's ``harness`` itself (``vf/``; otherwise an entry with a harness goes to ``harness:``)."""

    resolve: Callable[[TaskRequest], Task]
    plays_harness: bool = False


TASK_PREFIXES: Registry[TaskPrefix] = Registry(
    "task-name prefix",
    "polyrl.task_prefixes",
    builtins=(
        "polyrl.tasks.reasoning_gym",
        "polyrl.tasks.builtin.compositions",
        "polyrl.envs.env_registry",
        "polyrl.rollout.harness.task",
        "polyrl.rollout.harness.vf_tasks",
    ),
    entry=lambda name, resolve, **metadata: TaskPrefix(resolve, **metadata),
)
"""Prefix → how a name with it becomes a task. The modules that own a prefix register it; they are imported
only when a name is first routed (``env/`` needs the environments, ``vf/`` the harness)."""


def register_task_prefix(name: str, *, plays_harness: bool = False) -> Callable[[Callable], Callable]:
    """Decorator: ``resolve(request: TaskRequest) -> Task`` makes the task of every name that starts with
    ``name`` and is not a registered task (the longest registered prefix wins)."""
    return TASK_PREFIXES.register(name, plays_harness=plays_harness)


def prefix_of(name: str) -> str | None:
    """The longest registered prefix ``name`` starts with, or None."""
    matches = [p for p in TASK_PREFIXES.names() if isinstance(name, str) and name.startswith(p)]
    return max(matches, key=len, default=None)


def with_answer_format(task: Task, request: TaskRequest) -> Task:
    """``task`` with the request's answer format (if it names one) on it and on every task it wraps, so that
    every verifier of an episode reads answers the same way."""
    answer_format = request.answer_format
    if isinstance(answer_format, str):
        answer_format = AnswerFormat(answer_format)
    node = task
    while answer_format is not None and node is not None:
        node.answer_format = answer_format
        node = getattr(node, "inner", None)
    return task
