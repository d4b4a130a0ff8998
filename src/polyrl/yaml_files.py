"""Reading the YAML files polyrl is given (training configs, experiment files, eval suites, run directories).

PyYAML's ``safe_load`` keeps the last of two equal keys in one mapping, so a config that sets ``lr`` twice
trains with whichever comes last, silently. :func:`safe_load` is ``yaml.safe_load`` that refuses that:
it raises :class:`DuplicateKeyError` (a ``yaml.YAMLError``) naming the key and both lines. Merge keys
(``<<: *base``) still override what they merge in, as YAML specifies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from polyrl.errors import UserError

__all__ = ["DuplicateKeyError", "describe", "safe_load"]


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping lists one key twice; its message is one line naming the key and both lines."""

    def __str__(self) -> str:
        return str(self.problem)


class _UniqueKeyLoader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base loader reports it
                    continue
                line = key_node.start_mark.line + 1
                if first is not None:
                    raise DuplicateKeyError(
                        None, None, f"key {key!r} appears twice (lines {first} and {line})", key_node.start_mark
                    )
                seen[key] = line
        return super().construct_mapping(node, deep)


def safe_load(text: str) -> Any:
    """``yaml.safe_load(text)``, refusing a mapping that lists a key twice."""
    return yaml.load(text, Loader=_UniqueKeyLoader)


def describe(exc: yaml.YAMLError) -> str:
    """One line for a YAML error: the duplicate key and its lines, else "not valid YAML:" the problem and its line."""
    if isinstance(exc, DuplicateKeyError):
        return str(exc)
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or type(exc).__name__
    return f"not valid YAML: {problem}" + (f" (line {mark.line + 1})" if mark else "")


def read_yaml(path: str | Path, what: str) -> Any:
    """The YAML file ``path`` (a ``what``: "config", "suite", ...) loaded with :func:`safe_load`; an unreadable
    file or invalid YAML is a one-line UserError naming it."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise UserError(f"cannot read {what} {str(path)!r}: {exc.strerror or exc}") from None
    try:
        return safe_load(text)
    except yaml.YAMLError as exc:
        raise UserError(f"{what} {str(path)!r}: {describe(exc)}") from None
