"""Sequential tasks: transformations of sequences, orderings, plans."""

from __future__ import annotations

import string

from polyrl.tasks.base import Example, Param, Problem, Task
from polyrl.tasks.builtin._parse import parse_int_list
from polyrl.tasks.registry import register_task


@register_task
class ReverseLetters(Task):
    name = "reverse_letters"
    category = "sequential"
    description = "Write a string of letters backwards."
    params = (Param("length", 4, 40, "letters in the string"),)
    partial_credit = True

    def make(self, rng, p):
        word = "".join(rng.choice(string.ascii_lowercase) for _ in range(p["length"]))
        return Example(f"reverse {word}", word[::-1], word[::-1])

    def check(self, answer: str, problem: Problem):
        target = problem.answer
        got = answer.strip()
        if got == target:
            return 1.0
        if len(got) != len(target):
            return 0.0, "wrong"
        # Partial credit: the share of positions right, halved so it never rivals a full solve.
        return 0.5 * sum(a == b for a, b in zip(got, target)) / len(target)


@register_task
class SortDigits(Task):
    name = "sort_digits"
    category = "sequential"
    description = "Sort a list of integers in ascending order."
    params = (
        Param("count", 4, 30, "numbers to sort"),
        Param("digits", 1, 4, "digits per number"),
    )

    def make(self, rng, p):
        nums = [rng.randint(0, 10 ** p["digits"] - 1) for _ in range(p["count"])]
        out = sorted(nums)
        return Example(f"sort {' '.join(map(str, nums))}", out, " ".join(map(str, out)))

    def check(self, answer: str, problem: Problem):
        return float(parse_int_list(answer) == problem.answer)
