"""Arithmetic tasks: exact computation with integers and fractions.

The target-number puzzles (countdown, game24) live in ``arithmetic_target`` and are registered by the
import at the bottom of this module.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from polyrl.tasks.base import Example, Param, Problem, Task
from polyrl.tasks.builtin._parse import evaluate_expression, parse_int, parse_rational
from polyrl.tasks.task_registry import register_task

# Every integer answer stays below 2**63 at the hard end too, so that exported problems fit int64 columns.


def random_with_digits(rng, digits: int) -> int:
    """A uniform integer with exactly ``digits`` decimal digits."""
    return rng.randint(10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1)


@register_task("addition")
class Addition(Task):
    category = "arithmetic"
    pure = True
    description = "Add several non-negative integers."
    answer_shape = "a single integer"
    params = (
        Param("digits", 2, 12, "digits per operand"),
        Param("terms", 2, 5, "number of operands"),
    )

    def make(self, rng, p):
        lo, hi = 10 ** (p["digits"] - 1), 10 ** p["digits"] - 1
        terms = [rng.randint(lo, hi) for _ in range(p["terms"])]
        statement = (
            f"Compute the sum {' + '.join(map(str, terms))}.\n"
            "Answer with a single integer written in digits: the sum itself."
        )
        return Example(f"{'+'.join(map(str, terms))}=", sum(terms), str(sum(terms)), statement)

    def check(self, answer: str, problem: Problem):
        return float(parse_int(answer) == problem.answer)


@register_task("multiplication")
class Multiplication(Task):
    category = "arithmetic"
    pure = True
    description = "Multiply two non-negative integers."
    answer_shape = "a single integer"
    params = (
        Param("digits_a", 2, 10, "digits of the first factor"),
        Param("digits_b", 1, 8, "digits of the second factor"),
    )

    def make(self, rng, p):
        a, b = random_with_digits(rng, p["digits_a"]), random_with_digits(rng, p["digits_b"])
        statement = (
            f"Compute the product {a} × {b}.\nAnswer with a single integer written in digits: the product itself."
        )
        return Example(f"{a}*{b}=", a * b, str(a * b), statement)

    def check(self, answer: str, problem: Problem):
        return float(parse_int(answer) == problem.answer)


def _random_expression(rng, operators: int, digits: int) -> tuple[str, int]:
    """A random tree over + - * written with only the parentheses precedence requires, and its level."""
    if operators == 0:
        return str(random_with_digits(rng, digits)), 3
    left_ops = rng.randint(0, operators - 1)
    op = rng.choice("+-*")
    left, left_level = _random_expression(rng, left_ops, digits)
    right, right_level = _random_expression(rng, operators - 1 - left_ops, digits)
    return join_operands(left, left_level, op, right, right_level)


def join_operands(left: str, left_level: int, op: str, right: str, right_level: int) -> tuple[str, int]:
    """``left op right`` with only the parentheses precedence requires, and its level (1: + -, 2: *, 3: a number)."""
    level = 2 if op == "*" else 1
    if left_level < level:
        left = f"({left})"
    # the right operand of - binds like a parenthesized group: a-(b+c) != a-b+c
    if right_level < level or (op == "-" and right_level == 1):
        right = f"({right})"
    return f"{left}{op}{right}", level


def expression_example(text: str, value: int) -> Example:
    """The ``expression_evaluation`` example for expression ``text`` of value ``value`` (generated or proposed)."""
    statement = (
        f"Evaluate the expression {text}, where * is multiplication. Parentheses come first, then "
        "multiplication, then addition and subtraction from left to right.\n"
        "Answer with a single integer (it may be negative): the value of the expression."
    )
    return Example(f"{text}=", value, str(value), statement)


@register_task("expression_evaluation")
class ExpressionEvaluation(Task):
    category = "arithmetic"
    pure = True
    description = "Evaluate an integer expression with + - * and parentheses, respecting precedence."
    answer_shape = "a single integer"
    params = (
        Param("operators", 2, 10, "binary operators in the expression"),
        Param("digits", 1, 3, "digits per number"),
    )

    def make(self, rng, p):
        while True:
            text, _ = _random_expression(rng, p["operators"], p["digits"])
            value, _ = evaluate_expression(text, max_chars=400, max_depth=32)
            if abs(value) < 10**15:
                return expression_example(text, int(value))

    def check(self, answer: str, problem: Problem):
        return float(parse_int(answer) == problem.answer)


@register_task("modular_arithmetic")
class ModularArithmetic(Task):
    category = "arithmetic"
    pure = True
    description = "Compute a power of an integer modulo m (the least non-negative residue)."
    answer_shape = "a single integer"
    params = (
        Param("digits", 2, 12, "digits of the base"),
        Param("exponent", 1, 1_000_000, "largest exponent (1 means a plain remainder)"),
        Param("modulus", 7, 997, "largest modulus"),
    )

    def make(self, rng, p):
        a = random_with_digits(rng, p["digits"])
        e = rng.randint(1, p["exponent"])
        m = rng.randint(max(2, p["modulus"] // 2), p["modulus"])
        residue = pow(a, e, m)
        power = f"{a}^{e}" if e > 1 else str(a)
        number = f"{a} raised to the power {e}" if e > 1 else str(a)
        statement = (
            f"Compute {power} mod {m}: the remainder when {number} is divided by {m}, a number from 0 to {m - 1}.\n"
            "Answer with a single integer, for example 5."
        )
        return Example(f"{power} mod {m}=", residue, str(residue), statement)

    def check(self, answer: str, problem: Problem):
        return float(parse_int(answer) == problem.answer)


_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
_BASE_PREFIXES = {2: "0b", 8: "0o", 16: "0x"}


def to_base(n: int, base: int) -> str:
    out = []
    while True:
        n, r = divmod(n, base)
        out.append(_DIGITS[r])
        if n == 0:
            return "".join(reversed(out))


@register_task("base_conversion")
class BaseConversion(Task):
    category = "arithmetic"
    pure = True
    description = "Rewrite a non-negative integer from one base into another (digits 0-9 then a-z)."
    answer_shape = "the digits of the number in base"
    params = (
        Param("bits", 4, 48, "the number is below 2**bits"),
        Param("max_base", 2, 36, "largest base used; at 2 the conversion is decimal to binary"),
    )

    def make(self, rng, p):
        n = rng.randint(2 ** (p["bits"] - 1), 2 ** p["bits"] - 1)
        target = rng.randint(2, p["max_base"])
        # decimal is always a possible source, so the easy end is the familiar decimal-to-binary
        source = rng.choice(sorted(({10} | set(range(2, p["max_base"] + 1))) - {target}))
        out = to_base(n, target)
        statement = (
            f"The number {to_base(n, source)} is written in base {source}. Write it in base {target}. Digits above 9 "
            "are the letters a (10), b (11), … z (35).\n"
            f"Answer with the digits of the number in base {target} only, most significant digit first, without a "
            "prefix such as 0b and without leading zeros."
        )
        question = f"{to_base(n, source)} base {source} to base {target}"
        return Example(question, {"digits": out, "base": target}, out, statement)

    def check(self, answer: str, problem: Problem):
        base = problem.answer["base"]
        got = answer.strip().lower().replace(" ", "").replace("_", "")
        prefix = _BASE_PREFIXES.get(base)
        if prefix and got.startswith(prefix):
            got = got[2:]
        if not got or any(c not in _DIGITS[:base] for c in got):
            return 0.0, "malformed"
        return float((got.lstrip("0") or "0") == problem.answer["digits"])


def _linear_side(a: int, b: int) -> str:
    """``a*x + b`` written the way people write it: ``3x-5``, ``-x``, ``7``."""
    if a == 0:
        return str(b)
    coef = {1: "", -1: "-"}.get(a, str(a))
    const = "" if b == 0 else f"{b:+d}"
    return f"{coef}x{const}"


_X_PREFIX_RE = re.compile(r"^\s*x\s*=\s*")


@register_task("linear_equation")
class LinearEquation(Task):
    category = "arithmetic"
    pure = True
    description = "Solve a linear equation in x; the solution may be a fraction."
    answer_shape = "an integer or a fraction p/q"
    params = (
        Param("coefficient", 9, 99, "largest absolute coefficient or constant"),
        Param("form", 0, 2, "0: ax+b=c with non-negative numbers; 1: any signs; 2: x on both sides, fractions"),
    )

    def make(self, rng, p):
        k = p["coefficient"]

        def nonzero() -> int:
            return rng.choice([-1, 1]) * rng.randint(1, k)

        if p["form"] == 2:
            a, c = nonzero(), nonzero()
            while c == a:
                c = nonzero()
            b, d = rng.randint(-k, k), rng.randint(-k, k)
            x = Fraction(d - b, a - c)
            question = f"{_linear_side(a, b)}={_linear_side(c, d)}"
        else:
            if p["form"] == 0:
                a, x, b = rng.randint(1, k), Fraction(rng.randint(0, k)), rng.randint(0, k)
            else:
                a, x, b = nonzero(), Fraction(rng.randint(-k, k)), rng.randint(-k, k)
            question = f"{_linear_side(a, b)}={a * x + b}"
        solution = str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"
        statement = (
            f"Solve the equation {question} for x (a number next to x multiplies it).\n"
            "Answer with the value of x as an integer or a fraction p/q in lowest terms, for example 3 or -7/2."
        )
        return Example(question, [x.numerator, x.denominator], solution, statement)

    def check(self, answer: str, problem: Problem):
        num, den = problem.answer
        return float(parse_rational(_X_PREFIX_RE.sub("", answer)) == Fraction(num, den))


@register_task("gcd_lcm")
class GcdLcm(Task):
    category = "arithmetic"
    pure = True
    description = "Greatest common divisor or least common multiple of a few integers."
    answer_shape = "a single integer"
    params = (
        Param("digits", 2, 6, "digits per number"),
        Param("count", 2, 3, "how many numbers"),
    )

    def make(self, rng, p):
        d, count = p["digits"], p["count"]
        if rng.random() < 0.5:
            # a planted common factor keeps the gcd from being 1 almost always
            g = rng.randint(2, max(2, 10 ** (d - 1) // 3))
            nums = [g * rng.randint(max(1, 10 ** (d - 1) // g), (10**d - 1) // g) for _ in range(count)]
            op, value = "gcd", math.gcd(*nums)
        else:
            nums = [random_with_digits(rng, d) or 1 for _ in range(count)]
            op, value = "lcm", math.lcm(*nums)
        what = "greatest common divisor" if op == "gcd" else "least common multiple"
        statement = f"Find the {what} of {', '.join(map(str, nums))}.\nAnswer with a single integer, for example 36."
        return Example(f"{op} {' '.join(map(str, nums))}", value, str(value), statement)

    def check(self, answer: str, problem: Problem):
        return float(parse_int(answer) == problem.answer)
