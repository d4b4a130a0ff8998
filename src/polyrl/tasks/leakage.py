"""Train/eval leakage: prompts that occur in two problem sets.

Prompts are compared after collapsing whitespace and case, so reformatting alone does not hide a copy. A problem with
images is the same problem only with the same pictures: its key adds the images' pixel digest (a visual task asks
the same question of many pictures).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from polyrl.tasks.base import Problem
from polyrl.tasks.images import images_digest


def prompt_key(prompt: str) -> str:
    return " ".join(prompt.split()).casefold()


def leakage_key(problem: Problem) -> str:
    """What two problems must share to be one: the prompt (:func:`prompt_key`), and the pixels of any images."""
    key = prompt_key(problem.prompt)
    if problem.images:
        key += "\x00" + images_digest(problem.images)
    return key


@dataclass(frozen=True)
class Leakage:
    """The prompts shared by set A and set B."""

    shared_prompts: int
    """Distinct prompts (with their images) that occur in both sets."""
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
        key = leakage_key(p)
        keys_a.append(key)
        first_in_a.setdefault(key, p)
    shared: dict[str, Problem] = {}
    rows_b = 0
    for p in b:
        key = leakage_key(p)
        if key in first_in_a:
            rows_b += 1
            shared.setdefault(key, p)
    rows_a = sum(k in shared for k in keys_a)
    examples = [(first_in_a[k].id, pb.id, pb.prompt) for k, pb in list(shared.items())[:max_examples]]
    return Leakage(len(shared), rows_a, rows_b, examples)
