"""Search and constraint tasks: find a subset, a packing or a square meeting stated constraints.

Where several answers meet the constraints, every one of them scores 1.
"""

from __future__ import annotations

import string
from collections import Counter

from polyrl.tasks.base import Example, Param, Problem, Task
from polyrl.tasks.builtin._parse import parse_int, parse_int_grid, parse_int_list
from polyrl.tasks.builtin._text import random_letters
from polyrl.tasks.task_registry import register_task


@register_task("subset_sum")
class SubsetSum(Task):
    category = "search"
    pure = True
    description = (
        "Pick some of the given numbers (each at most once) that add up to the target; any such subset counts."
    )
    answer_shape = "separated by spaces"
    params = (
        Param("count", 3, 20, "numbers offered"),
        Param("max_value", 9, 999, "largest number"),
    )

    def make(self, rng, p):
        numbers = [rng.randint(1, p["max_value"]) for _ in range(p["count"])]
        chosen = rng.sample(numbers, rng.randint(2, max(2, p["count"] // 2)))
        target = sum(chosen)
        question = f"subset of {' '.join(map(str, numbers))} sum {target}"
        statement = (
            f"Choose some of the numbers {' '.join(map(str, numbers))} so that they add up to exactly {target}; "
            "each number may be used as many times as it is listed, no more.\n"
            "Answer with the chosen numbers separated by spaces, each written as it is listed."
        )
        return Example(question, {"numbers": numbers, "target": target}, " ".join(map(str, chosen)), statement)

    def check(self, answer: str, problem: Problem):
        numbers, target = problem.answer["numbers"], problem.answer["target"]
        picked = parse_int_list(answer, len(numbers))
        if Counter(picked) - Counter(numbers):
            return 0.0, "wrong"  # uses a number not offered, or one more often than offered
        return float(bool(picked) and sum(picked) == target)


def _knapsack_optimum(items: list[list[int]], capacity: int) -> tuple[int, list[int]]:
    """The best total value within ``capacity`` and one set of 1-based item numbers reaching it (0/1 knapsack DP)."""
    best = [[0] * (capacity + 1)]
    for w, v in items:
        prev = best[-1]
        best.append([max(prev[c], prev[c - w] + v) if c >= w else prev[c] for c in range(capacity + 1)])
    chosen, c = [], capacity
    for i in range(len(items), 0, -1):
        if best[i][c] != best[i - 1][c]:
            chosen.append(i)
            c -= items[i - 1][0]
    return best[-1][capacity], sorted(chosen)


@register_task("knapsack")
class Knapsack(Task):
    category = "search"
    pure = True
    description = "Choose items (by number, from 1) of the greatest total value within the weight capacity; suboptimal packings get partial credit."
    params = (
        Param("items", 3, 15, "items offered"),
        Param("max_weight", 5, 30, "heaviest item"),
        Param("max_value", 9, 99, "most valuable item"),
    )
    partial_credit = True
    answer_shape = "the numbers of the chosen items"

    def make(self, rng, p):
        items = [[rng.randint(1, p["max_weight"]), rng.randint(1, p["max_value"])] for _ in range(p["items"])]
        capacity = max(max(w for w, _ in items), sum(w for w, _ in items) // 2)
        optimum, chosen = _knapsack_optimum(items, capacity)
        question = f"knapsack cap {capacity}: {' '.join(f'{i}=w{w}v{v}' for i, (w, v) in enumerate(items, 1))}"
        answer = {"items": items, "capacity": capacity, "optimum": optimum}
        listing = "; ".join(f"item {i}: weight {w}, value {v}" for i, (w, v) in enumerate(items, 1))
        statement = (
            f"A knapsack holds a total weight of at most {capacity}. The items are: {listing}. Choose items, each "
            f"at most once, with total weight at most {capacity} and the greatest possible total value.\n"
            "Answer with the numbers of the chosen items separated by spaces, smallest first."
        )
        return Example(question, answer, " ".join(map(str, chosen)), statement)

    def check(self, answer: str, problem: Problem):
        items, capacity, optimum = problem.answer["items"], problem.answer["capacity"], problem.answer["optimum"]
        chosen = parse_int_list(answer, len(items))
        if len(set(chosen)) != len(chosen) or any(not 1 <= i <= len(items) for i in chosen):
            return 0.0, "malformed"
        if sum(items[i - 1][0] for i in chosen) > capacity:
            return 0.0, "wrong"
        value = sum(items[i - 1][1] for i in chosen)
        # A feasible packing short of the optimum: credit in proportion to its value, below a full solve.
        return 1.0 if value == optimum else 0.5 * value / optimum


# Two classic 4x4 magic squares (Duerer's and a pandiagonal one); variety comes from symmetries.
_MAGIC4 = (
    ((16, 3, 2, 13), (5, 10, 11, 8), (9, 6, 7, 12), (4, 15, 14, 1)),
    ((7, 12, 1, 14), (2, 13, 8, 11), (16, 3, 10, 5), (9, 6, 15, 4)),
)
# Permuting rows and columns by the same permutation keeps a 4x4 square magic when the permutation
# commutes with the mirror i -> 3 - i (both diagonals map onto themselves).
_MIRROR_SAFE_PERMS = (
    (0, 1, 2, 3),
    (1, 0, 3, 2),
    (0, 2, 1, 3),
    (2, 3, 0, 1),
    (3, 2, 1, 0),
    (2, 0, 3, 1),
    (1, 3, 0, 2),
    (3, 1, 2, 0),
)


def _magic3(rng, scale: int) -> list[list[int]]:
    """Lucas's form of every 3x3 magic square: centre c, offsets a and b, all entries distinct."""
    while True:
        a, b = rng.randint(-3 * scale, 3 * scale), rng.randint(-3 * scale, 3 * scale)
        c = abs(a) + abs(b) + rng.randint(1, 3 * scale)
        square = [[c - b, c + a + b, c - a], [c - a + b, c, c + a - b], [c + a, c - a - b, c + b]]
        if len({x for row in square for x in row}) == 9:
            return square


def _magic4(rng, scale: int) -> list[list[int]]:
    base = rng.choice(_MAGIC4)
    perm = rng.choice(_MIRROR_SAFE_PERMS)
    square = [[base[perm[r]][perm[c]] for c in range(4)] for r in range(4)]
    if rng.random() < 0.5:
        square = [list(col) for col in zip(*square)]
    k, shift = rng.randint(1, scale), rng.randint(0, 10 * (scale - 1))
    return [[k * x + shift for x in row] for row in square]


def _is_magic(square: list[list[int]], total: int) -> bool:
    n = len(square)
    lines = [*square, *zip(*square), [square[i][i] for i in range(n)], [square[i][n - 1 - i] for i in range(n)]]
    return all(sum(line) == total for line in lines)


@register_task("magic_square")
class MagicSquare(Task):
    category = "search"
    pure = True
    description = "Fill the blanks (_) so that every row, column and diagonal adds up to the given sum, with all entries distinct."
    params = (
        Param("blanks", 2, 10, "cells left blank; up to 5 the square is 3x3, above it is 4x4"),
        Param("scale", 1, 4, "how far entries range beyond 1..n*n"),
    )
    answer_shape = "rows separated by /"

    def make(self, rng, p):
        square = _magic3(rng, p["scale"]) if p["blanks"] <= 5 else _magic4(rng, p["scale"])
        n = len(square)
        hidden = set(rng.sample(range(n * n), p["blanks"]))
        puzzle = [[0 if r * n + c in hidden else square[r][c] for c in range(n)] for r in range(n)]
        total = sum(square[0])
        shown = "/".join(" ".join(str(x) if x else "_" for x in row) for row in puzzle)
        solution = "/".join(" ".join(map(str, row)) for row in square)
        grid = "\n".join(" ".join(str(x) if x else "_" for x in row) for row in puzzle)
        statement = (
            f"Complete this {n}x{n} magic square: replace each _ by an integer so that every row, every column and "
            f"both diagonals add up to {total}, and all {n * n} entries are different.\n{grid}\n"
            f"Answer with the whole square, all {n * n} numbers: the grid above with each _ replaced by its number, "
            "top row first, rows separated by / and the numbers of a row by spaces."
        )
        return Example(f"magic sum {total}: {shown}", {"puzzle": puzzle, "sum": total}, solution, statement)

    def check(self, answer: str, problem: Problem):
        puzzle, total = problem.answer["puzzle"], problem.answer["sum"]
        n = len(puzzle)
        square = parse_int_grid(answer, n, n)
        if any(g and g != x for grow, row in zip(puzzle, square) for g, x in zip(grow, row)):
            return 0.0, "wrong"
        return float(len({x for row in square for x in row}) == n * n and _is_magic(square, total))


@register_task("letter_count")
class LetterCount(Task):
    category = "search"
    pure = True
    description = "How many times a letter occurs in a string."
    params = (
        Param("length", 4, 60, "letters in the string"),
        Param("alphabet", 4, 26, "distinct letters the string is drawn from"),
    )
    answer_shape = "a single integer"

    def make(self, rng, p):
        pool = string.ascii_lowercase[: p["alphabet"]]
        text = random_letters(rng, p["length"], pool)
        letter = rng.choice(text) if rng.random() < 0.9 else rng.choice(pool)  # a count of 0 now and then
        count = text.count(letter)
        statement = (
            f"How many times does the letter {letter} occur in the string {text}?\n"
            "Answer with a single integer, for example 3."
        )
        return Example(f"count {letter} in {text}", count, str(count), statement)

    def check(self, answer: str, problem: Problem):
        return float(parse_int(answer) == problem.answer)
