"""The task registry: built-in tasks and third-party plugins (``polyrl.tasks`` entry points).

A plugin package declares, in its pyproject.toml::

    [project.entry-points."polyrl.tasks"]
    my_task = "my_package.tasks:MyTask"

and the class (a :class:`~polyrl.tasks.base.Task` subclass) becomes available by its ``name``. In code,
``@register_task("my_task")`` above the class does the same.

A name that is not a registered task is routed by its prefix (:mod:`polyrl.tasks.prefixes`);
:func:`polyrl.tasks.resolve.resolve_task` is the one function that resolves task names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from polyrl.errors import UserError
from polyrl.registry import Registry
from polyrl.tasks.base import CATEGORIES, Task
from polyrl.tasks.builtin import MODULES as BUILTIN_MODULES
from polyrl.tasks.prefixes import RG_PREFIX


def _task_entry(name: str, cls: Any) -> type[Task]:
    """``cls`` as task ``name``: a Task subclass with a category, its ``name`` set (or checked) to ``name``."""
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise TypeError(f"register_task expects a Task subclass, got {cls!r}")
    if name.startswith(RG_PREFIX):
        raise ValueError(f"{cls.__name__}: task name {name!r} must not start with 'rg/' (reasoning-gym datasets)")
    own = cls.__dict__.get("name")
    if own is not None and own != name:
        raise ValueError(f"{cls.__name__} is named {own!r}; it cannot be registered as task {name!r}")
    if not getattr(cls, "category", None):
        raise ValueError(
            f"{cls.__name__}: task {name!r} needs a category (one of {', '.join(CATEGORIES)} or your own)"
        )
    cls.name = name
    return cls


def _adopt_plugin_task(entry_point_name: str, obj: Any) -> None:
    """A task class an entry point names registers under its own ``name``, not the entry point's."""
    if not (isinstance(obj, type) and issubclass(obj, Task)):
        raise TypeError(f"register_task expects a Task subclass, got {obj!r}")
    TASKS.add(getattr(obj, "name", None), obj)


TASKS: Registry[type[Task]] = Registry(
    "task", "polyrl.tasks", builtins=BUILTIN_MODULES, adopt=_adopt_plugin_task, entry=_task_entry
)


def register_task(name: str) -> Callable[[type[Task]], type[Task]]:
    """Class decorator: make the Task subclass available as task ``name`` (its ``name`` attribute).

    A bare ``@register_task`` (how tasks were registered before: the class names itself) still works."""
    if isinstance(name, type):
        return TASKS.add(getattr(name, "name", None), name)
    return TASKS.register(name)


# --- listing ------------------------------------------------------------------------------------------------


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
