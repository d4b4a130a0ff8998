"""An example polyrl task plugin: count the vowels in a string of random letters."""

from __future__ import annotations

import string

from polyrl.tasks import Example, Param, Problem, Task


class CountVowels(Task):
    name = "count_vowels"
    category = "text"  # plugins may bring their own categories
    description = "Count the vowels (a, e, i, o, u) in a string of lowercase letters."
    params = (Param("length", 5, 60, "letters in the string"),)

    def make(self, rng, params):
        letters = "".join(rng.choice(string.ascii_lowercase) for _ in range(params["length"]))
        count = sum(c in "aeiou" for c in letters)
        return Example(f"How many vowels are in '{letters}'?", count, str(count))

    def check(self, answer: str, problem: Problem) -> float:
        # int() raises on junk; Task.verify turns that into a 'malformed' verdict
        return float(int(answer) == problem.answer)
