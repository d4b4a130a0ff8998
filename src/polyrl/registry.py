"""Named registries and plugin loading, shared by tasks, environments, estimators and losses."""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, TypeVar

from polyrl.errors import UserError

T = TypeVar("T")


class Registry(dict[str, Any]):
    """A name → object mapping whose lookups fail with a UserError that lists the known names."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: make the object available as ``self.lookup(name)``."""

        def decorator(obj: T) -> T:
            existing = self.get(name)
            if existing is not None and existing is not obj:
                raise ValueError(f"{self.kind} {name!r} is already registered by {existing.__module__}")
            self[name] = obj
            return obj

        return decorator

    def lookup(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise UserError(f"unknown {self.kind} {name!r}; known: {', '.join(sorted(self))}") from None


def load_plugins(group: str, kind: str) -> list[Any]:
    """Load every entry point of ``group``; a broken plugin is reported and skipped, never fatal."""
    loaded = []
    for ep in entry_points(group=group):
        try:
            loaded.append(ep.load())
        except Exception as exc:  # a broken plugin must not take the built-ins down with it
            print(f"polyrl: warning: {kind} plugin {ep.name!r} ({ep.value}) failed to load: {exc}", file=sys.stderr)
    return loaded
