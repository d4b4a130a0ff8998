"""Arithmetic tasks."""

from __future__ import annotations

from polyrl.tasks.base import Example, Param, Problem, Task
from polyrl.tasks.builtin._parse import parse_int
from polyrl.tasks.registry import register_task


@register_task
class Addition(Task):
    name = "addition"
    category = "arithmetic"
    description = "Add several non-negative integers."
    params = (
        Param("digits", 2, 12, "digits per operand"),
        Param("terms", 2, 5, "number of operands"),
    )

    def make(self, rng, p):
        lo, hi = 10 ** (p["digits"] - 1), 10 ** p["digits"] - 1
        terms = [rng.randint(lo, hi) for _ in range(p["terms"])]
        return Example(f"{'+'.join(map(str, terms))}=", sum(terms), str(sum(terms)))

    def check(self, answer: str, problem: Problem):
        return float(parse_int(answer) == problem.answer)
