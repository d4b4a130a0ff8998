"""The one resolver of task names: training mixes, ``polyrl eval``, ``polyrl tasks``, reward-model data.

A name is, in this order:

1. a registered task (``countdown``, ``compose/rev``, a plugin's, a dataset task registered for this process);
2. otherwise routed by the longest registered prefix it starts with (:data:`~polyrl.tasks.task_registry.TASK_PREFIXES`:
   ``rg/`` reasoning-gym datasets, ``compose/`` chains, ``env/`` environments, ``vf/`` verifiers tasksets);
3. otherwise an unknown task (one line, with the closest names).

A training-mix entry may bring a ``dataset`` (registered first under the entry's task name) and a ``harness``
(its episodes played by the user's agent: the ``harness:`` route wraps the entry's task, unless its own prefix
plays the harness, as ``vf/`` does). ``answer_format`` replaces the task's, and that of every task it wraps.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from polyrl.tasks.base import Task
from polyrl.tasks.dataset import dataset_task_name, load_dataset_task
from polyrl.tasks.prefixes import TASK_PREFIXES, TaskRequest, prefix_of, with_answer_format
from polyrl.tasks.task_registry import TASKS

__all__ = ["get_task", "resolve_task"]

HARNESS = "harness:"


def resolve_task(
    name: str, *, answer_format: Any = None, env: Any = None, harness: Any = None, dataset: Any = None
) -> Task:
    """The task ``name`` names, with its entry's options (see the module docstring)."""
    if dataset is not None:
        load_dataset_task(dataset_task_name(name), dataset)
    return route(TaskRequest(name, answer_format, env, harness))


def route(request: TaskRequest) -> Task:
    """The task of ``request``: a registered task, or what the route of its prefix makes (``harness:`` for an
    entry with a harness whose prefix does not play it)."""
    registered = isinstance(request.name, str) and request.name in TASKS
    prefix = None if registered else prefix_of(request.name)
    entry = TASK_PREFIXES[prefix] if prefix is not None else None
    if request.harness is not None and not (entry is not None and entry.plays_harness):
        return TASK_PREFIXES.lookup(HARNESS).resolve(request)
    if entry is not None:
        return entry.resolve(request)
    return with_answer_format(TASKS.lookup(request.name)(), request)  # unknown: the registry's one-line error


def inner(request: TaskRequest) -> TaskRequest:
    """The request for the task a harness route wraps: the same name, without the harness."""
    return dataclasses.replace(request, harness=None)


def get_task(name: str, answer_format: Any = None) -> Task:
    """An instance of the task ``name`` names (:func:`resolve_task` without a training-mix entry's options)."""
    return resolve_task(name, answer_format=answer_format)
