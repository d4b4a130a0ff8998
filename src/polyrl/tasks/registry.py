"""Task registry: built-ins, third-party plugins (``polyrl.tasks`` entry points) and ``rg/<name>``.

A plugin package declares, in its pyproject.toml::

    [project.entry-points."polyrl.tasks"]
    my_task = "my_package.tasks:MyTask"

and the class (a :class:`~polyrl.tasks.base.Task` subclass) becomes available by its ``name``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from polyrl.errors import UserError
from polyrl.registry import Registry
from polyrl.tasks.base import CATEGORIES, Task
from polyrl.tasks.builtin import MODULES as BUILTIN_MODULES

RG_PREFIX = "rg/"


def _adopt_plugin_task(entry_point_name: str, obj: Any) -> None:
    register_task(obj)  # a task registers under its class's ``name``, not the entry point's


TASKS: Registry[type[Task]] = Registry("task", "polyrl.tasks", builtins=BUILTIN_MODULES, adopt=_adopt_plugin_task)


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator: make ``cls`` available as ``get_task(cls.name)``."""
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise TypeError(f"register_task expects a Task subclass, got {cls!r}")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name or name.startswith(RG_PREFIX) or any(c.isspace() for c in name):
        raise ValueError(f"{cls.__name__}: task name must be a non-empty string without spaces or the 'rg/' prefix")
    if not getattr(cls, "category", None):
        raise ValueError(
            f"{cls.__name__}: task {name!r} needs a category (one of {', '.join(CATEGORIES)} or your own)"
        )
    return TASKS.add(name, cls)


FAMILIES: dict[str, Callable[[str], type[Task]]] = {}
"""Name prefix → the class of any task of that family, built on demand (``compose/rot+sort+up``); a family's
module registers its own with :func:`register_task_family` (the built-ins load with the registry)."""


def register_task_family(prefix: str) -> Callable[[Callable[[str], type[Task]]], Callable[[str], type[Task]]]:
    """Decorator: ``resolve(name) -> Task class`` answers every unregistered task name starting with ``prefix``."""

    def decorator(resolve):
        FAMILIES[prefix] = resolve
        return resolve

    return decorator


def builtin_and_plugin_tasks() -> dict[str, type[Task]]:
    return dict(TASKS)


def list_tasks(category: str | None = None, include_rg: bool = False) -> list[type[Task]]:
    """Registered task classes sorted by name, optionally of one category (and the ``rg/`` adapters)."""
    tasks = [TASKS[name] for name in TASKS.names()]
    if include_rg:
        from polyrl.tasks.reasoning_gym import rg_task_classes

        tasks += rg_task_classes()
    if category is not None:
        known = sorted({t.category for t in tasks} | set(CATEGORIES))
        if category not in known:
            raise UserError(f"unknown category {category!r}; known: {', '.join(known)}")
        tasks = [t for t in tasks if t.category == category]
    return tasks


def get_task_class(name: str) -> type[Task]:
    if isinstance(name, str) and name.startswith(RG_PREFIX):
        from polyrl.tasks.reasoning_gym import rg_task_class

        return rg_task_class(name[len(RG_PREFIX) :])
    if isinstance(name, str) and name not in TASKS:  # reading TASKS loads the built-ins and their families
        for prefix, resolve in FAMILIES.items():
            if name.startswith(prefix):
                return resolve(name)
    return TASKS.lookup(name)


def get_task(name: str, **kwargs: Any) -> Task:
    """An instance of the task registered as ``name`` (``rg/<dataset>`` for reasoning-gym datasets)."""
    return get_task_class(name)(**kwargs)
