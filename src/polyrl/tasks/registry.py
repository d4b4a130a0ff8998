"""Task registry: built-ins, third-party plugins (``polyrl.tasks`` entry points) and ``rg/<name>``.

A plugin package declares, in its pyproject.toml::

    [project.entry-points."polyrl.tasks"]
    my_task = "my_package.tasks:MyTask"

and the class (a :class:`~polyrl.tasks.base.Task` subclass) becomes available by its ``name``.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from polyrl.errors import UserError
from polyrl.registry import load_plugins
from polyrl.tasks.base import CATEGORIES, Task

_REGISTRY: dict[str, type[Task]] = {}
_LOADED = False
RG_PREFIX = "rg/"
_BUILTIN_MODULES = ("arithmetic", "logic", "grid", "graph", "sequential", "crypto", "search")


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
    existing = _REGISTRY.get(name)
    if existing is not None and existing is not cls:
        if (existing.__module__, existing.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ValueError(
                f"task name {name!r} is already registered by {existing.__module__}.{existing.__qualname__}"
            )
    _REGISTRY[name] = cls
    return cls


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for mod in _BUILTIN_MODULES:
        importlib.import_module(f"polyrl.tasks.builtin.{mod}")
    for obj in load_plugins("polyrl.tasks", "task"):
        if isinstance(obj, type) and issubclass(obj, Task):
            register_task(obj)


def builtin_and_plugin_tasks() -> dict[str, type[Task]]:
    _load()
    return dict(_REGISTRY)


def list_tasks(category: str | None = None, include_rg: bool = False) -> list[type[Task]]:
    """Registered task classes sorted by name, optionally of one category (and the ``rg/`` adapters)."""
    _load()
    tasks = sorted(_REGISTRY.values(), key=lambda c: c.name)
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
    _load()
    if name.startswith(RG_PREFIX):
        from polyrl.tasks.reasoning_gym import rg_task_class

        return rg_task_class(name[len(RG_PREFIX) :])
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see `polyrl tasks list`"
        raise UserError(f"unknown task {name!r}{hint}")
    return _REGISTRY[name]


def get_task(name: str, **kwargs: Any) -> Task:
    """An instance of the task registered as ``name`` (``rg/<dataset>`` for reasoning-gym datasets)."""
    return get_task_class(name)(**kwargs)
