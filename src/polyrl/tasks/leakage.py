"""Train/eval leakage: prompts that occur in two problem sets.

Prompts are compared after collapsing whitespace and case, so reformatting alone does not hide a copy.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from polyrl.tasks.base import Problem


def prompt_key(prompt: str) -> str:
    return " ".join(prompt.split()).casefold()


@dataclass(frozen=True)
class Leakage:
    """The prompts shared by set A and set B."""

    shared_prompts: int
    """Distinct prompts that occur in both sets."""
    rows_a: int
    """Problems of A whose prompt occurs in B."""
    rows_b: int
    """Problems of B whose prompt occurs in A."""
    examples: list[tuple[str, str, str]] = field(default_factory=list)
    """Up to ``max_examples`` of ``(id in A, id in B, prompt)``."""


def find_leakage(a: Iterable[Problem], b: Iterable[Problem], max_examples: int = 5) -> Leakage:
    first_in_a: dict[str, Problem] = {}
    keys_a: list[str] = []
    for p in a:
        key = prompt_key(p.prompt)
        keys_a.append(key)
        first_in_a.setdefault(key, p)
    shared: dict[str, Problem] = {}
    rows_b = 0
    for p in b:
        key = prompt_key(p.prompt)
        if key in first_in_a:
            rows_b += 1
            shared.setdefault(key, p)
    rows_a = sum(k in shared for k in keys_a)
    examples = [(first_in_a[k].id, pb.id, pb.prompt) for k, pb in list(shared.items())[:max_examples]]
    return Leakage(len(shared), rows_a, rows_b, examples)
