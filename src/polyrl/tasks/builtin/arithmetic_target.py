"""Target-number puzzles: combine given numbers with + - * / and parentheses to reach a target.

Answers are parsed by the shared shunting-yard evaluator with exact fractions (never ``eval``), so any
expression reaching the target counts, whichever numbers it picks and however it brackets them.
"""

from __future__ import annotations

from collections import Counter

from polyrl.tasks.base import Example, Param, Problem, Task
from polyrl.tasks.builtin._parse import evaluate_expression
from polyrl.tasks.task_registry import register_task

# Longest accepted expression: six numbers with generous parentheses and spaces fit easily.
_MAX_EXPRESSION_CHARS = 200


def _strip_outer(expr: str) -> str:
    return expr[1:-1] if expr.startswith("(") and expr.endswith(")") else expr


def _expression_value(answer: str, numbers: list[int], exactly_once: bool):
    """The answer's exact value, or None and the reason it does not count (foreign or reused numbers…)."""
    try:
        value, used = evaluate_expression(answer, max_chars=_MAX_EXPRESSION_CHARS, max_depth=16, max_digits=6)
    except ZeroDivisionError:
        return None, "division_by_zero"
    used_count, given = Counter(used), Counter(numbers)
    if used_count - given or (exactly_once and used_count != given):
        return None, "wrong_numbers"
    return value, None


@register_task("countdown")
class Countdown(Task):
    category = "arithmetic"
    pure = True
    description = "Reach the target with + - * / over the given numbers, each used at most once."
    params = (
        Param("count", 3, 6, "numbers given"),
        Param("max_number", 10, 100, "largest given number"),
        Param("max_target", 50, 999, "largest target"),
    )
    partial_credit = True
    answer_shape = "the expression only"

    def make(self, rng, p):
        while True:
            numbers = [rng.randint(1, p["max_number"]) for _ in range(p["count"])]
            # Combine a random subset pairwise, keeping every intermediate a positive integer as the
            # game show does; the surviving expression is the reference solution.
            items = [(n, str(n)) for n in rng.sample(numbers, rng.randint(2, p["count"]))]
            while len(items) > 1:
                (a, ea), (b, eb) = items.pop(rng.randrange(len(items))), items.pop(rng.randrange(len(items)))
                if a < b:
                    (a, ea), (b, eb) = (b, eb), (a, ea)
                ops = ["+", "*"] + ["-"] * (a > b) + ["/"] * (b > 1 and a % b == 0)
                op = rng.choice(ops)
                value = {"+": a + b, "*": a * b, "-": a - b, "/": a // b if b else 0}[op]
                items.append((value, f"({ea}{op}{eb})"))
            target, expr = items[0]
            if 2 <= target <= p["max_target"] and target not in numbers:
                question = f"make {target} from {' '.join(map(str, numbers))}, each at most once"
                statement = (
                    f"Using some of the numbers {', '.join(map(str, numbers))}, write an arithmetic expression whose "
                    f"value is {target}. You may use + - * / and parentheses; each listed number may be used at most "
                    "as often as it is listed, you need not use them all, and no other numbers may appear.\n"
                    "Answer with the expression only, written with the listed numbers."
                )
                return Example(question, {"target": target, "numbers": numbers}, _strip_outer(expr), statement)

    def check(self, answer: str, problem: Problem):
        target = problem.answer["target"]
        value, reason = _expression_value(answer, problem.answer["numbers"], exactly_once=False)
        if value is None:
            return 0.0, reason
        # The show's scoring: near misses (within 10) earn some credit, capped well below a solve.
        miss = abs(value - target)
        if miss == 0:
            return 1.0
        return (0.5 * float(1 - miss / 10), "partial") if miss < 10 else 0.0


def _split(rng, value: int, leaves: int, max_number: int):
    """An expression with ``leaves`` numbers in [1, max_number] equal to ``value``, or None (a dead end).

    Built top-down: pick an operator and a value for the right operand, solve for the left one.
    """
    if leaves == 1:
        return (str(value), [value]) if 1 <= value <= max_number else None
    left_leaves = rng.randint(1, leaves - 1)
    right_leaves = leaves - left_leaves
    right = rng.randint(1, max_number * right_leaves)
    op = rng.choice("+-*/")
    if op == "+":
        left = value - right
    elif op == "-":
        left = value + right
    elif op == "*":
        if value % right:
            return None
        left = value // right
    else:
        left = value * right
    lhs = _split(rng, left, left_leaves, max_number)
    rhs = lhs and _split(rng, right, right_leaves, max_number)
    if not rhs:
        return None
    return f"({lhs[0]}{op}{rhs[0]})", lhs[1] + rhs[1]


@register_task("game24")
class Game24(Task):
    category = "arithmetic"
    pure = True
    description = "Make 24 with + - * / using every given number exactly once."
    params = (
        Param("count", 2, 5, "numbers given (4 is the classic game)"),
        Param("max_number", 9, 13, "largest given number"),
    )
    answer_shape = "the expression only"

    def make(self, rng, p):
        while True:
            built = _split(rng, 24, p["count"], p["max_number"])
            if built:
                expr, numbers = built
                numbers = sorted(numbers)
                question = f"make 24 from {' '.join(map(str, numbers))}, each exactly once"
                statement = (
                    f"Using each of the numbers {', '.join(map(str, numbers))} exactly once, with + - * / and "
                    "parentheses, write an expression whose value is 24 (division is exact: fractions are allowed "
                    "along the way).\nAnswer with the expression only, written with those four numbers."
                )
                return Example(question, {"target": 24, "numbers": numbers}, _strip_outer(expr), statement)

    def check(self, answer: str, problem: Problem):
        value, reason = _expression_value(answer, problem.answer["numbers"], exactly_once=True)
        return (0.0, reason) if value is None else float(value == problem.answer["target"])
