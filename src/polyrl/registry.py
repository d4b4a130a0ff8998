"""One registry shape for every extension kind: named objects, built-in modules, entry-point plugins.

Each kind (task, task-name prefix, environment, sampler, advantage estimator, policy objective, loss
aggregation, KL estimator, value loss, gradient surgery, reward term, dataset verifier, generation backend,
tracker, tool format, self-play learnability) is one :class:`Registry` with its entry-point group, and one
``register_<kind>(name, **metadata)`` decorator that hands the decorated function or class to it::

    OBJECTIVES = Registry("policy objective", "polyrl.objectives", builtins=("polyrl.algos.objectives",),
                          entry=_objective_entry)

    def register_objective(name: str, *, settings: type[BaseModel] | None = None):
        return OBJECTIVES.register(name, settings=settings)

    @register_objective("ppo_clip")
    def ppo_clip(inputs, settings): ...

    OBJECTIVES.lookup("ppo_clip")   # UserError "unknown policy objective 'ppo_clp'; did you mean ppo_clip?"
    OBJECTIVES.names()              # sorted names, built-ins and plugins

The decorator returns what it decorates unchanged. ``entry(name, obj, **metadata)`` makes what the registry
holds (the object itself when a kind has no ``entry``; a record with the metadata otherwise) and refuses an
object of the wrong kind; ``tests/test_registry.py`` checks that every ``register_*`` has this shape.

On the first read (``lookup``, ``names``, ``in``, iteration) a registry imports its built-in modules,
which register their objects with decorators, then loads its plugins: every entry point of its group
(``[project.entry-points."polyrl.objectives"]`` in a plugin's pyproject.toml). An entry point names a
module, whose decorators register on import, or an object, registered under the entry point's name.
A broken plugin is reported once on stderr and skipped; it never takes the built-ins down.
Registering a second, different object under a taken name raises.
"""

from __future__ import annotations

import difflib
import importlib
import sys
import threading
import types
from collections.abc import Callable, Iterator, MutableMapping
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from polyrl.errors import UserError

__all__ = ["Registry", "load_plugins"]

T = TypeVar("T")

_LOADING = threading.RLock()
"""Held while a registry imports its built-ins and plugins: a reader on another thread waits for them (rollout
threads look up kinds concurrently), the loading thread itself may read the registry again (re-entrant)."""


class Registry(MutableMapping[str, T], Generic[T]):
    """Name → entry for one extension kind, loading its built-ins and plugins on first read.

    ``kind`` names the kind in messages ("policy objective"); ``entry_point_group`` is the plugin group;
    ``builtins`` lists the modules that register the built-in objects; ``entry(name, obj, **metadata)``
    makes the entry held for a registered object (default: the object itself, and no metadata) and raises
    TypeError or ValueError for an object of the wrong kind; ``adopt(name, obj)`` registers an object an
    entry point names (default: ``self.add(name, obj)``).
    """

    def __init__(
        self,
        kind: str,
        entry_point_group: str | None = None,
        builtins: tuple[str, ...] = (),
        adopt: Callable[[str, Any], Any] | None = None,
        entry: Callable[..., T] | None = None,
    ):
        self.kind = kind
        self.entry_point_group = entry_point_group
        self.builtins = tuple(builtins)
        self._adopt = adopt
        self._entry = entry
        self._entries: dict[str, tuple[Any, T]] = {}
        """name → (the registered object, its entry); duplicates are judged on the object."""
        self._loaded = False
        self._loading = False
        """This registry's built-ins are being imported (by the thread that holds :data:`_LOADING`)."""

    # --- registration (never triggers loading: built-in modules call it while being imported) -----------

    def add(self, name: str, obj: Any, **metadata: Any) -> Any:
        """Register ``obj`` as ``name`` with its kind's ``metadata``; returns ``obj``. The same object (or its
        reloaded definition) again is fine; a different one under a taken name raises ValueError."""
        if not isinstance(name, str) or not name or any(c.isspace() for c in name):
            raise ValueError(f"{self.kind} name must be a non-empty string without spaces, got {name!r}")
        existing = self._entries.get(name)
        if existing is not None and _definition(existing[0]) != _definition(obj):
            raise ValueError(f"{self.kind} {name!r} is already registered by {_origin(existing[0])}")
        if self._entry is not None:
            entry = self._entry(name, obj, **metadata)
        elif metadata:
            raise TypeError(f"a {self.kind} is registered by name only, not with {', '.join(sorted(metadata))}")
        else:
            entry = obj
        self._entries[name] = (obj, entry)
        return obj

    def register(self, name: str, **metadata: Any) -> Callable[[Any], Any]:
        """Decorator: register the decorated function or class as ``name`` with ``metadata``; it is
        returned unchanged. Every ``register_<kind>`` function is this call."""

        def decorator(obj):
            return self.add(name, obj, **metadata)

        return decorator

    def remove(self, name: str) -> None:
        """Forget ``name`` (tests register temporary objects and remove them; a dataset task is replaced)."""
        del self._entries[name]

    # --- reading (loads built-ins and plugins once) -----------------------------------------------------

    def load(self) -> None:
        """Import the built-in modules, then the plugins of the entry-point group; once per process. A thread that
        reads the registry while another is loading it waits until the built-ins and plugins are in."""
        if self._loaded:
            return
        with _LOADING:
            if self._loaded or self._loading:  # loaded meanwhile, or a built-in module read it while being imported
                return
            self._loading = True
            try:
                for module in self.builtins:
                    importlib.import_module(module)
                if self.entry_point_group is not None:
                    load_plugins(self.entry_point_group, self.kind, self._adopt_plugin)
            finally:
                self._loading = False
                self._loaded = True

    def _adopt_plugin(self, name: str, obj: Any) -> None:
        if isinstance(obj, types.ModuleType):
            return  # a module registered its objects with decorators when it was imported
        if self._adopt is not None:
            self._adopt(name, obj)
        else:
            self.add(name, obj)

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        self.load()
        return sorted(self._entries)

    def lookup(self, name: str) -> T:
        """The object registered as ``name``; a one-line UserError with the closest names otherwise."""
        self.load()
        try:
            return self._entries[name][1]
        except (KeyError, TypeError):
            raise UserError(self.unknown_message(name)) from None

    def unknown_message(self, name: Any, prefix: str = "") -> str:
        """``unknown <kind> 'x'; did you mean y?`` (or the known names when nothing is close).

        ``prefix`` is shown before the name and the suggestions (``env/`` for environments).
        """
        names = self.names()
        close = difflib.get_close_matches(name, names, n=3) if isinstance(name, str) else []
        if close:
            return f"unknown {self.kind} {prefix + str(name)!r}; did you mean {', '.join(prefix + c for c in close)}?"
        return f"unknown {self.kind} {prefix + str(name)!r}; known: {', '.join(prefix + n for n in names) or 'none'}"

    def __getitem__(self, name: str) -> T:
        self.load()
        return self._entries[name][1]

    def __setitem__(self, name: str, obj: Any) -> None:
        self.add(name, obj)

    def __delitem__(self, name: str) -> None:
        self.remove(name)

    def __iter__(self) -> Iterator[str]:
        self.load()
        return iter(list(self._entries))

    def __len__(self) -> int:
        self.load()
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._entries)} registered)"


def _definition(obj: Any) -> Any:
    """What makes two registrations the same: the object, or for classes and functions where they are
    defined (a module imported twice, e.g. under a test runner, defines equal but distinct objects)."""
    qualname = getattr(obj, "__qualname__", None) if isinstance(obj, (type, types.FunctionType)) else None
    if not qualname or "<" in qualname:  # lambdas and local definitions: only the object itself
        return obj
    return obj.__module__, qualname


def _origin(obj: Any) -> str:
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return f"{module}.{qualname}" if module and qualname else repr(obj)


def load_plugins(group: str, kind: str, adopt: Callable[[str, Any], Any] | None = None) -> list[Any]:
    """Load every entry point of ``group`` and hand each to ``adopt(name, obj)``; returns what loaded.

    A plugin that fails to import, or whose object ``adopt`` rejects (wrong type, a taken name), is
    reported on stderr and skipped, never fatal.
    """
    loaded = []
    for ep in entry_points(group=group):
        try:
            obj = ep.load()
            if adopt is not None:
                adopt(ep.name, obj)
        except Exception as exc:  # a broken plugin must not take the built-ins down with it
            print(f"polyrl: warning: {kind} plugin {ep.name!r} ({ep.value}) failed to load: {exc}", file=sys.stderr)
            continue
        loaded.append(obj)
    return loaded


def registered(lookup):
    """A field validator: the value must be a name ``lookup`` knows (its one-line error otherwise)."""

    def check(cls, name):
        try:
            lookup(name)
        except UserError as exc:
            raise ValueError(str(exc)) from None
        return name

    return classmethod(check)
